"""The NB201 protocol every optimizer of the peers benchmark shares (ours through
``search.Driver`` in ``benchmarks/nb201.py``, the peers in :mod:`peers`): the search space is 6
categorical decisions, one per cell edge in NB201's edge order (0->1, 0->2, 1->2, 0->3, 1->3,
2->3), each among the 5 ops of :data:`spaces.NB201_OPS`. Each evaluation is answered by
:func:`search.simulated._nb201.evaluate` -- the 200-epoch validation accuracy of *one* random
training seed -- with the noise seed the driver would use (``run seed * 1_000_003 + evaluation
index``), so a peer and our strategy with the same run seed draw from the same noise stream. The
incumbent is the evaluation with the best *observed* value (the first one on ties, as in
``nb201.run_one``), and a run is scored by the table's seed-averaged accuracy of that incumbent
(:func:`search.simulated._nb201.mean_accuracy`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spaces import NB201_OPS

EDGES = ("1<-0", "2<-0", "2<-1", "3<-0", "3<-1", "3<-2")  # NB201 edge order, genome order
EDGE_NAMES = tuple(f"edge{i}" for i in range(len(EDGES)))  # hyperparameter names for peers
# search.driver._driver: noise seed = strategy seed * stride + trial number
NOISE_STRIDE = 1_000_003


def encode(ops: Sequence[str]) -> str:
    """Six op names in NB201 edge order -> the table key (``"333132"`` for the best CIFAR-10
    cell); a ValueError naming the edge for anything else. Every one of the 5**6 = 15,625
    keys is a table row, also the cells with no path from input to output (which
    :class:`~spaces.CellGenome` refuses and our cell space never proposes): a peer searches the
    flat 6-categorical space."""
    ops = tuple(ops)
    if len(ops) != len(EDGES):
        raise ValueError(f"ops: expected {len(EDGES)} edges in NB201 order, got {len(ops)}")
    for name, op in zip(EDGE_NAMES, ops, strict=True):
        if op not in NB201_OPS:
            raise ValueError(f"{name}: {op!r} is not an NB201 op {list(NB201_OPS)}")
    return "".join(str(NB201_OPS.index(op)) for op in ops)


def decode(key: str) -> tuple[str, ...]:
    """The table key -> six op names (inverse of :func:`encode`)."""
    if len(key) != len(EDGES) or any(c not in "01234" for c in key):
        raise ValueError(f"key: expected 6 digits 0-4, got {key!r}")
    return tuple(NB201_OPS[int(c)] for c in key)


def from_config(config: dict[str, Any]) -> tuple[str, ...]:
    """A peer's configuration ``{"edge0": op, ..., "edge5": op}`` -> ops in edge order."""
    return tuple(str(config[name]) for name in EDGE_NAMES)


class BudgetSpent(RuntimeError):
    """A peer asked for more evaluations than its budget."""


@dataclass
class NoisyCell:
    """One run's objective: ``problem(ops)`` -> the observed (one-seed) accuracy in percent.

    Keeps the history (key, observed) in evaluation order; :meth:`incumbent_curve` scores it.
    """

    dataset: str
    seed: int
    budget: int
    keys: list[str] = field(default_factory=list)
    observed: list[float] = field(default_factory=list)

    def __call__(self, ops: Sequence[str]) -> float:
        if len(self.keys) >= self.budget:
            raise BudgetSpent(f"budget of {self.budget} evaluations spent")
        key = encode(ops)
        value = observe(key, self.dataset, self.seed * NOISE_STRIDE + len(self.keys))
        self.keys.append(key)
        self.observed.append(value)
        return value

    def incumbent_curve(self) -> list[float]:
        """After each evaluation, the seed-averaged accuracy of the best observed cell so far."""
        return incumbent_curve(self.keys, self.observed, self.dataset)


def observe(key: str, dataset: str, noise_seed: int) -> float:
    """One noisy evaluation of table key ``key``: exactly :func:`search.simulated._nb201.evaluate`'s
    noise model (one training seed drawn by ``np.random.default_rng(noise_seed)``), on the key
    rather than a genome, so disconnected cells answer too."""
    from search.simulated._nb201 import table

    t = table(dataset)
    row = t.rows[key]
    seed = int(np.random.default_rng(noise_seed).integers(t.seeds[row]))
    return float(t.accuracy[row, seed])


def incumbent_curve(keys: Sequence[str], observed: Sequence[float], dataset: str) -> list[float]:
    """The incumbent rule: the best observed value so far (first on ties), scored by the
    table's seed mean."""
    from search.simulated._nb201 import mean_accuracy

    best, score, curve = -np.inf, np.nan, []
    for key, value in zip(keys, observed, strict=True):
        if value > best:
            best, score = value, mean_accuracy(key, dataset)
        curve.append(score)
    return curve
