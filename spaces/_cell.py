"""Cells: a fixed number of nodes; every edge ``i -> j`` (``i < j``) carries an op, ``none`` too.

Node 0 is the cell's input, the last node its output, every other node sums its incoming edges.
With the defaults (4 nodes, :data:`NB201_OPS`) this is exactly the NAS-Bench-201 space; its edge
order (0->1, 0->2, 1->2, 0->3, 1->3, 2->3) is the order of :attr:`CellGenome.edges`.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spaces._genome import (
    Decisions,
    Genome,
    GenomeFamily,
    check_choices,
    check_int,
    check_keys,
    pick,
    put,
)

# Op name -> what the model builder makes of it (training.models._genome implements each one).
CELL_OPS: dict[str, str] = {
    "none": "no edge (contributes zero)",
    "skip_connect": "identity",
    "nor_conv_1x1": "ReLU, 1x1 convolution, batch norm",
    "nor_conv_3x3": "ReLU, 3x3 convolution, batch norm",
    "avg_pool_3x3": "3x3 average pooling, stride 1",
    "max_pool_3x3": "3x3 max pooling, stride 1",
}
NB201_OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
CELL_NODES = (2, 8)
_SHORT = {
    "skip_connect": "skip",
    "nor_conv_1x1": "conv1",
    "nor_conv_3x3": "conv3",
    "avg_pool_3x3": "avgpool3",
    "max_pool_3x3": "maxpool3",
}


def cell_edges(nodes: int) -> list[tuple[int, int]]:
    """Edges ``(i, j)`` in genome order: grouped by target ``j``, then by source ``i``."""
    return list(_cell_edges(nodes))


@functools.cache
def _cell_edges(nodes: int) -> tuple[tuple[int, int], ...]:
    return tuple((i, j) for j in range(1, nodes) for i in range(j))


def _reach(nodes: int, edges: Sequence[tuple[int, int]], start: int, forward: bool) -> set[int]:
    seen = {start}
    for _ in range(nodes):
        for i, j in edges:
            a, b = (i, j) if forward else (j, i)
            if a in seen:
                seen.add(b)
    return seen


def live_edges(nodes: int, ops: Sequence[str]) -> list[bool]:
    """For each edge: is it on some path input -> output through non-``none`` edges?
    (Remembered for the last 2**16 cells asked about: evolution asks about the same few cells
    thousands of times when a study holds most of the space.)"""
    return list(_live_edges(nodes, tuple(ops)))


@functools.lru_cache(maxsize=2**16)
def _live_edges(nodes: int, ops: tuple[str, ...]) -> tuple[bool, ...]:
    pairs = _cell_edges(nodes)
    used = [e for e, op in zip(pairs, ops, strict=True) if op != "none"]
    from_input = _reach(nodes, used, 0, forward=True)
    to_output = _reach(nodes, used, nodes - 1, forward=False)
    return tuple(
        op != "none" and i in from_input and j in to_output
        for (i, j), op in zip(pairs, ops, strict=True)
    )


@dataclass(frozen=True, eq=False, kw_only=True)
class CellGenome(Genome):
    """A cell: ``nodes`` nodes and one op per edge, in :func:`cell_edges` order.

    >>> edges = ("nor_conv_3x3", "none", "none", "skip_connect", "none", "none")
    >>> g = CellGenome(nodes=4, edges=edges)
    >>> g.summary()
    'cell 4 nodes: 1=conv3(0) 3=skip(0)'
    >>> g.canonical().edges   # node 1 cannot reach the output: its edge is irrelevant
    ('none', 'none', 'none', 'skip_connect', 'none', 'none')
    """

    family = "cell"
    nodes: int
    edges: tuple[str, ...]

    def __post_init__(self) -> None:
        check_int("nodes", self.nodes, *CELL_NODES)
        edges = check_choices_list("edges", self.edges)
        object.__setattr__(self, "edges", edges)
        n_edges = self.nodes * (self.nodes - 1) // 2
        if len(edges) != n_edges:
            raise ValueError(
                f"edges: a {self.nodes}-node cell has {n_edges} edges, got {len(edges)}"
            )
        for op in edges:
            if op not in CELL_OPS:
                raise ValueError(f"edges: unknown op {op!r} (known: {sorted(CELL_OPS)})")
        if not any(live_edges(self.nodes, edges)):
            raise ValueError(f"edges: no path from the input to the output in {list(edges)}")

    def to_dict(self) -> dict[str, Any]:
        return {"family": "cell", "nodes": self.nodes, "edges": list(self.edges)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CellGenome:
        check_keys(data, ("family", "nodes", "edges"), "a cell genome")
        return cls(nodes=data.get("nodes"), edges=data.get("edges"))  # type: ignore[arg-type]

    def canonical(self) -> CellGenome:
        """Irrelevant edges set to ``none``; inner nodes renumbered to the smallest edge list."""
        return CellGenome(nodes=self.nodes, edges=_canonical_edges(self.nodes, self.edges))

    def summary(self) -> str:
        parts = []
        for j in range(1, self.nodes):
            terms = [
                f"{_SHORT[op]}({i})"
                for (i, jj), op in zip(cell_edges(self.nodes), self.edges, strict=True)
                if jj == j and op != "none"
            ]
            if terms:
                parts.append(f"{j}=" + "+".join(terms))
        return f"cell {self.nodes} nodes: " + " ".join(parts)

    def to_nb201_string(self) -> str:
        """The NAS-Bench-201 architecture string: ``|nor_conv_3x3~0|+|none~0|none~1|+|...|``."""
        groups = []
        for j in range(1, self.nodes):
            ops = [
                f"{op}~{i}"
                for (i, jj), op in zip(cell_edges(self.nodes), self.edges, strict=True)
                if jj == j
            ]
            groups.append("|" + "|".join(ops) + "|")
        return "+".join(groups)

    @classmethod
    def from_nb201_string(cls, text: str) -> CellGenome:
        """Parse a NAS-Bench-201 architecture string (any node count)."""
        groups = text.split("+")
        edges: list[str] = []
        for j, group in enumerate(groups, start=1):
            items = [s for s in group.strip().split("|") if s]
            for i, item in enumerate(items):
                op, _, src = item.partition("~")
                if src != str(i) or len(items) != j:
                    raise ValueError(
                        f"nb201 string: node {j} must list inputs 0..{j - 1}, got {group!r}"
                    )
                edges.append(op)
        return cls(nodes=len(groups) + 1, edges=tuple(edges))


def check_choices_list(name: str, values: Any) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise ValueError(f"{name}: expected a list of op names, got {values!r}")
    return tuple(values)


@dataclass(frozen=True, eq=False, kw_only=True)
class CellFamily(GenomeFamily):
    """All cells with ``nodes`` nodes over the op vocabulary ``ops``; the defaults: NAS-Bench-201.

    One categorical parameter per edge, ``{prefix}.{i}->{j}``, over ``ops``: the parameter space
    is the full ``len(ops) ** n_edges`` grid (15,625 points for NAS-Bench-201). A point whose cell
    has no input -> output path decodes to the same cell with edge ``0 -> last`` set to the
    vocabulary's first op that is not ``none``, so every point is a valid genome.

    >>> import optuna
    >>> family = CellFamily()
    >>> trial = optuna.create_study().ask()
    >>> genome = family.suggest(trial)
    >>> family.from_params(trial.params).to_dict() == genome.to_dict()
    True
    """

    name = "cell"
    OPTIONS = ("nodes", "ops")
    nodes: int = 4
    ops: tuple[str, ...] = NB201_OPS

    def __post_init__(self) -> None:
        check_int("nodes", self.nodes, *CELL_NODES)
        ops = check_choices("ops", self.ops, tuple(CELL_OPS), what="op")
        object.__setattr__(self, "ops", ops)
        if not self.usable_ops:
            raise ValueError(
                f"ops: {list(ops)} has no usable op (every cell would be empty); "
                f"add one of {sorted(set(CELL_OPS) - {'none'})}"
            )

    @property
    def usable_ops(self) -> tuple[str, ...]:
        return tuple(op for op in self.ops if op != "none")

    def repair(self, edges: Sequence[str]) -> tuple[str, ...]:
        """``edges`` unchanged when they connect input and output; else with edge 0 -> last set."""
        edges = tuple(edges)
        if any(live_edges(self.nodes, edges)):
            return edges
        last = cell_edges(self.nodes).index((0, self.nodes - 1))
        return edges[:last] + (self.usable_ops[0],) + edges[last + 1 :]

    def _decide(self, decisions: Decisions, prefix: str) -> CellGenome:
        edges = [pick(decisions, f"{prefix}.{i}->{j}", self.ops) for i, j in cell_edges(self.nodes)]
        return CellGenome(nodes=self.nodes, edges=self.repair(edges))

    def to_params(self, genome: Genome, prefix: str = "genome") -> dict[str, Any]:
        self.check(genome)
        assert isinstance(genome, CellGenome)
        params: dict[str, Any] = {}
        for (i, j), op in zip(cell_edges(self.nodes), genome.edges, strict=True):
            put(params, f"{prefix}.{i}->{j}", op, len(self.ops))
        return params

    def check(self, genome: Genome) -> None:
        self._check_family(genome)
        assert isinstance(genome, CellGenome)
        if genome.nodes != self.nodes:
            raise ValueError(f"genome: has {genome.nodes} nodes, the family {self.nodes}")
        for op in genome.edges:
            if op not in self.ops:
                raise ValueError(f"genome: op {op!r} is not in the family's ops {list(self.ops)}")


@functools.lru_cache(maxsize=2**16)
def _canonical_edges(n: int, edges: tuple[str, ...]) -> tuple[str, ...]:
    """:meth:`CellGenome.canonical`'s edges (remembered: a pure function of the cell)."""
    live = [
        (e, op)
        for e, op, ok in zip(_cell_edges(n), edges, _live_edges(n, edges), strict=True)
        if ok
    ]
    # Inner nodes without live edges are interchangeable: they take the last labels.
    used = sorted({x for (i, j), _ in live for x in (i, j)} - {0, n - 1})
    unused = [x for x in range(1, n - 1) if x not in used]
    best: tuple[str, ...] | None = None
    for perm in itertools.permutations(used):
        new = {0: 0, n - 1: n - 1, **{old: k + 1 for k, old in enumerate([*perm, *unused])}}
        ops = {(new[i], new[j]): op for (i, j), op in live}
        if all(a < b for a, b in ops):
            encoded = tuple(ops.get(e, "none") for e in _cell_edges(n))
            best = encoded if best is None or encoded < best else best
    assert best is not None  # the identity permutation always qualifies
    return best
