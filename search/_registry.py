"""Strategies (Optuna samplers) and pruners by name: a registry, never an if/elif chain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna

from training.launch import build_pruner


@dataclass(frozen=True)
class PrunerSpec:
    """A pruner as ``module:Class`` + kwargs (a kwarg may itself be a spec), so the MPI job's
    rank 0 can build the same pruner from JSON."""

    factory: str
    kwargs: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "factory": self.factory,
            "kwargs": {
                k: v.to_json() if isinstance(v, PrunerSpec) else v for k, v in self.kwargs.items()
            },
        }

    def build(self) -> optuna.pruners.BasePruner:
        return build_pruner(self.to_json())


def _random(options: dict[str, Any], seed: int | None) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=seed)


def _tpe(options: dict[str, Any], seed: int | None) -> optuna.samplers.BaseSampler:
    # multivariate + constant liar: pending trials count, so concurrent asks spread out.
    return optuna.samplers.TPESampler(
        seed=seed,
        n_startup_trials=options["startup_trials"],
        multivariate=True,
        group=True,
        constant_liar=True,
    )


STRATEGIES = {"random": _random, "tpe": _tpe}


def _none(o: dict[str, Any]) -> PrunerSpec:
    return PrunerSpec("optuna.pruners:NopPruner", {})


def _median(o: dict[str, Any]) -> PrunerSpec:
    return PrunerSpec(
        "optuna.pruners:MedianPruner",
        {"n_startup_trials": o["startup_trials"], "n_warmup_steps": o["warmup_epochs"]},
    )


def _percentile(o: dict[str, Any]) -> PrunerSpec:
    return PrunerSpec(
        "optuna.pruners:PercentilePruner",
        {
            "percentile": o["percentile"],
            "n_startup_trials": o["startup_trials"],
            "n_warmup_steps": o["warmup_epochs"],
        },
    )


def _asha(o: dict[str, Any]) -> PrunerSpec:
    return PrunerSpec(
        "optuna.pruners:SuccessiveHalvingPruner",
        {
            "min_resource": o["min_epochs"],
            "reduction_factor": o["reduction_factor"],
            "min_early_stopping_rate": o["min_early_stopping_rate"],
        },
    )


def _hyperband(o: dict[str, Any]) -> PrunerSpec:
    return PrunerSpec(
        "optuna.pruners:HyperbandPruner",
        {
            "min_resource": o["min_epochs"],
            "max_resource": o["max_epochs"],
            "reduction_factor": o["reduction_factor"],
        },
    )


def _threshold(o: dict[str, Any]) -> PrunerSpec:
    return PrunerSpec(
        "optuna.pruners:ThresholdPruner",
        {"lower": o["lower"], "upper": o["upper"], "n_warmup_steps": o["warmup_epochs"]},
    )


def _top_half(o: dict[str, Any]) -> PrunerSpec:
    # Egele et al. 2024's simple rule: after the first epoch, stop every trial below the median
    # epoch-1 value of the trials so far (Optuna counts running and pruned ones too once
    # `startup_trials` have completed); never look again (huge interval).
    return PrunerSpec(
        "optuna.pruners:MedianPruner",
        {"n_startup_trials": o["startup_trials"], "n_warmup_steps": 1, "interval_steps": 10**9},
    )


def _patient(o: dict[str, Any]) -> PrunerSpec:
    inner = PRUNERS[o["wrapped"]](o)
    return PrunerSpec(
        "optuna.pruners:PatientPruner",
        {
            "wrapped_pruner": None if o["wrapped"] == "none" else inner,
            "patience": o["patience"],
            "min_delta": o["min_delta"],
        },
    )


PRUNERS = {
    "none": _none,
    "median": _median,
    "percentile": _percentile,
    "asha": _asha,
    "hyperband": _hyperband,
    "threshold": _threshold,
    "patient": _patient,
    "top-half": _top_half,
}
# The study-file options each pruner reads ("patient" also reads its wrapped pruner's).
PRUNER_OPTIONS: dict[str, tuple[str, ...]] = {
    "none": (),
    "median": ("startup_trials", "warmup_epochs"),
    "percentile": ("percentile", "startup_trials", "warmup_epochs"),
    "asha": ("min_epochs", "reduction_factor", "min_early_stopping_rate"),
    "hyperband": ("min_epochs", "max_epochs", "reduction_factor"),
    "threshold": ("lower", "upper", "warmup_epochs"),
    "patient": ("wrapped", "patience", "min_delta"),
    "top-half": ("startup_trials",),
}


def build_sampler(
    name: str, options: dict[str, Any], seed: int | None
) -> optuna.samplers.BaseSampler:
    return STRATEGIES[name](options, seed)


def pruner_spec(name: str, options: dict[str, Any]) -> PrunerSpec:
    return PRUNERS[name](options)
