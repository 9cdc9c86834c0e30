"""Strategies (Optuna samplers) and pruners by name: a registry, never an if/elif chain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna


@dataclass(frozen=True)
class PrunerSpec:
    """A pruner as ``module:Class`` + kwargs, so the MPI job's rank 0 can build the same one."""

    factory: str
    kwargs: dict[str, Any]

    def build(self) -> optuna.pruners.BasePruner:
        import importlib

        module, _, name = self.factory.partition(":")
        return getattr(importlib.import_module(module), name)(**self.kwargs)

    def to_json(self) -> dict[str, Any]:
        return {"factory": self.factory, "kwargs": dict(self.kwargs)}


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


def _none(options: dict[str, Any]) -> PrunerSpec:
    return PrunerSpec("optuna.pruners:NopPruner", {})


def _median(options: dict[str, Any]) -> PrunerSpec:
    return PrunerSpec(
        "optuna.pruners:MedianPruner",
        {
            "n_startup_trials": options["startup_trials"],
            "n_warmup_steps": options["warmup_epochs"],
        },
    )


PRUNERS = {"none": _none, "median": _median}


def build_sampler(name: str, options: dict[str, Any], seed: int | None) -> optuna.samplers.BaseSampler:
    return STRATEGIES[name](options, seed)


def pruner_spec(name: str, options: dict[str, Any]) -> PrunerSpec:
    return PRUNERS[name](options)
