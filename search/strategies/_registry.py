"""Strategies (Optuna samplers) and pruners by name: a registry, never an if/elif chain."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import optuna

import spaces
from search._errors import StudyError
from search.pruners._promotion import hyperband_brackets
from search.strategies._auto import AUTO, choose
from search.strategies._evolution import EvolutionSampler
from search.strategies._gp import WindowedGPSampler
from search.strategies._nsga2 import GenomeChildGeneration, GenomeNSGAIISampler
from search.strategies._predictor import PredictorSampler
from search.strategies._reinforce import ReinforceSampler
from search.strategies._tpe import DistinctTPESampler
from training.contract import build_pruner


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


def _single_objective(name: str, directions: list[str]) -> None:
    if len(directions) > 1:
        raise StudyError(
            "strategy",
            f"{name!r} optimises one objective, this study has {len(directions)}; "
            "use 'nsga2', 'tpe', 'gp' or 'random'",
        )


def _random(
    options: dict[str, Any], seed: int | None, space: spaces.Space, directions: list[str]
) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=seed)


def _tpe(
    options: dict[str, Any], seed: int | None, space: spaces.Space, directions: list[str]
) -> optuna.samplers.BaseSampler:
    # Multivariate and grouped; the distinct variant never re-proposes a candidate the study
    # holds, running ones included (91.41 -> 91.49 on NB201). Optuna's constant liar (running
    # trials counted as bad results) is off by default: with the distinct filter keeping
    # concurrent asks apart, it only pushed them away from the good region. 8 trials running vs
    # sequential on NB201, 100 seeds: -0.003 / -0.09 / -0.13 without it, -0.04 / -0.16 / -0.17
    # with it (CIFAR-10 / CIFAR-100 / ImageNet16-120; benchmarks/results/nb201-variants.json).
    # On the nine flat tables it spreads 8 concurrent asks but leaves the regret where it was:
    # -0.01 +- 0.15 with 8 running, 30 seeds paired (benchmarks/results/flat.json).
    return DistinctTPESampler(
        space=space,
        seed=seed,
        n_startup_trials=options["startup_trials"],
        n_ei_candidates=options["ei_candidates"],
        multivariate=True,
        group=True,
        constant_liar=options["constant_liar"],
        window=options["window"] or None,
    )


def _gp(
    options: dict[str, Any], seed: int | None, space: spaces.Space, directions: list[str]
) -> optuna.samplers.BaseSampler:
    # Optuna's GP conditions on RUNNING trials itself (q-batch log EI / EHVI), so concurrent
    # asks do not pile onto one point.
    return WindowedGPSampler(
        seed=seed, n_startup_trials=options["startup_trials"], window=options["window"] or None
    )


_TOURNAMENT = 10  # evolution, selection = "tournament": members per tournament by default


def _evolution(
    options: dict[str, Any], seed: int | None, space: spaces.Space, directions: list[str]
) -> optuna.samplers.BaseSampler:
    _single_objective("evolution", directions)
    # selection "greedy" (the default unless a tournament size is given): the parent is the best
    # of the population, tournament = population; "tournament": Real et al.'s aging evolution,
    # the best of `tournament` (default 10) members drawn at random. Measured on all three
    # NAS-Bench-201 datasets (benchmarks/results/nb201-variants.json): tournament 10 of 30 is
    # 0.02-0.06 better sequentially, 0.04-0.13 worse with 8 trials running.
    selection = options["selection"] or ("tournament" if options["tournament"] else "greedy")
    if selection == "greedy" and options["tournament"] not in (None, options["population"]):
        raise StudyError(
            "strategy.tournament",
            "only with selection = \"tournament\" (greedy selection takes the whole population)",
        )
    tournament = options["population"] if selection == "greedy" else (
        options["tournament"] or _TOURNAMENT
    )
    return EvolutionSampler(
        space=space,
        population=options["population"],
        tournament=tournament,
        mutation_prob=options["mutation_prob"],
        crossover_prob=options["crossover_prob"],
        seed=seed,
    )


def _reinforce(
    options: dict[str, Any], seed: int | None, space: spaces.Space, directions: list[str]
) -> optuna.samplers.BaseSampler:
    _single_objective("reinforce", directions)
    return ReinforceSampler(
        space=space,
        learning_rate=options["learning_rate"],
        entropy_weight=options["entropy_weight"],
        baseline_decay=options["baseline_decay"],
        bins=options["bins"],
        importance_weights=options["importance_weights"],
        seed=seed,
    )


def _nsga2(
    options: dict[str, Any], seed: int | None, space: spaces.Space, directions: list[str]
) -> optuna.samplers.BaseSampler:
    # NSGA-II's own selection; children made with the genome operators (GenomeChildGeneration).
    children = GenomeChildGeneration(
        space=space,
        crossover_prob=options["crossover_prob"],
        mutation_prob=options["mutation_prob"],
        seed=seed,
    )
    with warnings.catch_warnings():  # child_generation_strategy is marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return GenomeNSGAIISampler(
            population_size=options["population"],
            seed=seed,
            child_generation_strategy=children,
        )


def _predictor(
    options: dict[str, Any], seed: int | None, space: spaces.Space, directions: list[str]
) -> optuna.samplers.BaseSampler:
    _single_objective("predictor", directions)
    # A GP over spaces.SpaceEmbedding; running trials believed at their predicted mean. NB201,
    # 100 evaluations, sequential / 8 running (benchmarks/results/nb201.json, 100 seeds):
    # CIFAR-10 91.51 / 91.54, CIFAR-100 73.27 / 73.28, ImageNet16-120 46.29 / 46.31.
    # Defaults reasoned, not tuned: no variant was measured (the shared machine's time went to
    # the three datasets).
    return PredictorSampler(
        space=space,
        startup_trials=options["startup_trials"],
        candidates=options["candidates"],
        parents=options["parents"],
        acquisition=options["acquisition"],
        beta=options["beta"],
        embedding=options["embedding"],
        window=options["window"] or None,
        partial=options["partial"],
        seed=seed,
    )


def resolve(name: str, space: spaces.Space, directions: list[str],
            recorded: str | None = None) -> str:
    """The strategy a study runs: ``name`` itself, or for ``auto`` the one the study recorded
    when it was made (``recorded``: a resumed study keeps its strategy, also if a later detol
    would choose another), else :func:`choose`'s."""
    if name != AUTO:
        return name
    if recorded is not None and recorded != AUTO and recorded in STRATEGIES:
        return recorded
    return choose(space, directions)


def _auto(
    options: dict[str, Any], seed: int | None, space: spaces.Space, directions: list[str]
) -> optuna.samplers.BaseSampler:
    name = choose(space, directions)
    return STRATEGIES[name](dict(STRATEGY_OPTIONS[name]), seed, space, directions)


STRATEGIES = {
    "auto": _auto,
    "random": _random,
    "tpe": _tpe,
    "gp": _gp,
    "evolution": _evolution,
    "reinforce": _reinforce,
    "nsga2": _nsga2,
    "predictor": _predictor,
}
# The study-file options each strategy reads, with its defaults (tuned on NAS-Bench-201).
STRATEGY_OPTIONS: dict[str, dict[str, Any]] = {
    "auto": {},  # the chosen strategy's defaults; name it to set its options
    "random": {},
    "tpe": {"startup_trials": 10, "ei_candidates": 100, "constant_liar": False, "window": 1000},
    "gp": {"startup_trials": 10, "window": 200},
    "evolution": {
        "selection": None,  # "greedy", or "tournament" when a tournament size is given
        "population": 30,
        "tournament": None,  # the population (greedy); 10 with selection = "tournament"
        "mutation_prob": None,
        "crossover_prob": 0.0,
    },
    "reinforce": {
        "learning_rate": 0.3,
        "entropy_weight": 0.0,
        "baseline_decay": 0.7,
        "bins": 8,
        "importance_weights": False,
    },
    "nsga2": {"population": 50, "mutation_prob": None, "crossover_prob": 0.9},
    "predictor": {
        "startup_trials": 10,
        "candidates": 200,  # scored per ask: 90 % children of the parents, 10 % uniform draws
        "parents": 10,  # the known candidates the model rates best, mutated
        "acquisition": "ei",  # "ei", "ucb" (mean + beta * std) or "thompson"
        "beta": 1.0,  # ucb only
        # spaces.SpaceEmbedding kind: BANANAS path counts + 2 rounds of WL subtree counts (the
        # kind measured on NAS-Bench-201 with this GP; the embedding's own default may differ)
        "embedding": "path+wl",
        "window": 100,  # complete trials the GP is fitted on (best tenth + most recent; 0: all)
        # until startup_trials are complete: fit on the partial curves (BOHB's rule: the
        # highest epoch that startup_trials configurations reached). Off: on the anytime
        # benchmark it did worse than without (docs/anytime.md, detol-partial)
        "partial": False,
    },
}


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
    if o.get("promote"):
        return _promoting(o, brackets=1)
    return PrunerSpec(
        "optuna.pruners:SuccessiveHalvingPruner",
        {
            "min_resource": o["min_epochs"],
            "reduction_factor": o["reduction_factor"],
            "min_early_stopping_rate": o["min_early_stopping_rate"],
        },
    )


def _promoting(o: dict[str, Any], *, brackets: int) -> PrunerSpec:
    return PrunerSpec(
        "search.pruners._promotion:PromotingHalving",
        {
            "min_resource": o["min_epochs"],
            "reduction_factor": o["reduction_factor"],
            "min_early_stopping_rate": o.get("min_early_stopping_rate", 0),
            "brackets": brackets,
            "max_resource": o["max_epochs"],
        },
    )


def _hyperband(o: dict[str, Any]) -> PrunerSpec:
    if o.get("promote"):
        brackets = hyperband_brackets(o["min_epochs"], o["max_epochs"], o["reduction_factor"])
        return _promoting(o, brackets=brackets)
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
    # Egele et al. 2024's rule as published (search/pruners/_top_half.py); Optuna's MedianPruner
    # with a huge interval is not it (its median is over complete trials only: the bar rises).
    return PrunerSpec(
        "search.pruners._top_half:TopHalfPruner", {"startup_trials": o["startup_trials"]}
    )


def _dominated(o: dict[str, Any]) -> PrunerSpec:
    # Several objectives: stop a trial whose epoch vector a fraction of the others dominate
    # (search.pruners._dominated); one objective: a percentile pruner at 100 * fraction.
    return PrunerSpec(
        "search.pruners._dominated:DominatedPruner",
        {
            "fraction": o["fraction"],
            "n_startup_trials": o["startup_trials"],
            "n_warmup_steps": o["warmup_epochs"],
        },
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
    "dominated": _dominated,
}
# The pruners a multi-objective study may use (Optuna's own prune one objective only).
MULTI_OBJECTIVE_PRUNERS = ("dominated", "none")
# The study-file options each pruner reads ("patient" also reads its wrapped pruner's).
PRUNER_OPTIONS: dict[str, tuple[str, ...]] = {
    "none": (),
    "median": ("startup_trials", "warmup_epochs"),
    "percentile": ("percentile", "startup_trials", "warmup_epochs"),
    "asha": ("min_epochs", "reduction_factor", "min_early_stopping_rate", "promote"),
    "hyperband": ("min_epochs", "max_epochs", "reduction_factor", "promote"),
    "threshold": ("lower", "upper", "warmup_epochs"),
    "patient": ("wrapped", "patience", "min_delta"),
    "top-half": ("startup_trials",),
    "dominated": ("fraction", "startup_trials", "warmup_epochs"),
}


def build_sampler(
    name: str,
    options: dict[str, Any],
    seed: int | None,
    space: spaces.Space,
    directions: list[str],
) -> optuna.samplers.BaseSampler:
    """The strategy's sampler; options left out (or None) take the strategy's defaults."""
    if name not in STRATEGIES:
        known = sorted(STRATEGIES)
        raise StudyError("strategy.name", f"unknown strategy {name!r} (known: {known})")
    defaults = STRATEGY_OPTIONS[name]
    own = defaults | {k: v for k, v in options.items() if k in defaults and v is not None}
    try:
        return STRATEGIES[name](own, seed, space, directions)
    except ValueError as exc:
        if isinstance(exc, StudyError):
            raise
        key, sep, rest = str(exc).partition(": ")  # sampler errors start with the argument
        if sep and key in defaults:
            raise StudyError(f"strategy.{key}", rest) from None
        raise StudyError("strategy", str(exc)) from None


def pruner_spec(name: str, options: dict[str, Any]) -> PrunerSpec:
    return PRUNERS[name](options)
