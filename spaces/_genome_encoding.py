"""Genome -> fixed-length vector, one encoder per family; every encoder reads the *canonical*
genome, so genomes with equal ``key`` (isomorphic, or differing only in dead parts) encode alike.

Encoding parts (a ``kind`` joins them with ``+``, e.g. ``"path+wl"``):

- ``onehot``: the canonical genome slot by slot (cell: op per edge; macro: per node position
  present / label / inputs, padded to ``max_nodes``).
- ``path``: BANANAS path encoding (White et al. 2021): counts of input -> output paths by the op
  labels along them (exact for cells up to :data:`PATH_MAX_LENGTH` ops, hashed for macros).
- ``wl``: Weisfeiler-Lehman subtree counts after :data:`WL_ITERATIONS` rounds (``wlH``: H).

A stack is a chain with no alternative numbering: every kind encodes it the same way, layer by
layer, padded to the family's maximum depth. Macro genomes always add size summaries (active
nodes, depth, widest level, mean fan-in).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from spaces._cell import CellFamily, CellGenome, cell_edges, live_edges
from spaces._genome import Genome, GenomeFamily
from spaces._graph_features import (
    Dag,
    Features,
    depths,
    hashed_path_features,
    path_features,
    wl_features,
)
from spaces._macro import MACRO_OPS, MacroFamily, MacroGenome, MacroNode
from spaces._stack import LAYER_KINDS, StackFamily, StackGenome

PARTS = ("onehot", "path", "wl")
WL_ITERATIONS = 2  # for kind "wl"; "wlH" asks for H
MEMO_SIZE = 20_000  # genomes whose features an encoder remembers (cleared when full)
PATH_MAX_LENGTH = 4  # longer cell paths are counted by length only (5 ops: 780 features)


def parse_kind(kind: Any) -> tuple[tuple[str, ...], int]:
    """``"path+wl2"`` -> ``(("path", "wl"), 2)``: the parts and the WL iterations (``wl`` alone:
    :data:`WL_ITERATIONS`); an unknown or repeated part is an error."""
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"kind: expected a string such as 'path+wl', got {kind!r}")
    parts: list[str] = []
    iterations = WL_ITERATIONS
    for part in kind.split("+"):
        if part.startswith("wl") and part[2:].isdigit() and 1 <= int(part[2:]) <= 8:
            part, iterations = "wl", int(part[2:])
        if part not in PARTS:
            raise ValueError(
                f"kind: unknown encoding {part!r} in {kind!r} "
                f"(known: {list(PARTS)}, 'wl1'..'wl8' for the WL iterations)"
            )
        if part in parts:
            raise ValueError(f"kind: {kind!r} names an encoding twice")
        parts.append(part)
    return tuple(parts), iterations


class GenomeEncoder(ABC):
    """Encodes the members of one family; ``names`` has one entry per feature."""

    def __init__(self, family: GenomeFamily, parts: Sequence[str], wl_iterations: int) -> None:
        self.family = family
        self.parts = tuple(parts)
        self.wl_iterations = wl_iterations
        self._memo: dict[str, np.ndarray] = {}  # genome key -> features
        self.names: tuple[str, ...] = tuple(self.features(self.example())[1])

    @abstractmethod
    def example(self) -> Genome:
        """Any member, to fix the feature names."""

    @abstractmethod
    def features(self, canonical: Genome) -> Features: ...

    def __call__(self, genome: Genome) -> np.ndarray:
        """The canonical form's features (a copy; remembered by ``genome.key``)."""
        self.family.check(genome)
        values = self._memo.get(genome.key)
        if values is None:
            values, _ = self.features(genome.canonical())
            if len(self._memo) >= MEMO_SIZE:
                self._memo.clear()
            self._memo[genome.key] = values
        return values.copy()


def _join(parts: list[Features]) -> Features:
    return np.concatenate([v for v, _ in parts]), [n for _, ns in parts for n in ns]


class CellEncoder(GenomeEncoder):
    family: CellFamily

    def __init__(self, family: GenomeFamily, parts: Sequence[str], wl_iterations: int) -> None:
        assert isinstance(family, CellFamily)
        self.alphabet = family.usable_ops  # the ops a live edge can carry
        self.ops = ("none", *self.alphabet)  # canonical() writes 'none' on dead edges
        super().__init__(family, parts, wl_iterations)

    def example(self) -> Genome:
        return self.family.sample(np.random.default_rng(0))

    def dag(self, genome: CellGenome) -> Dag:
        """The cell with ops on nodes: one node per live edge, between ``input`` and ``output``
        (the form NAS-Bench-101 uses and WL kernels on NB201 take)."""
        n = genome.nodes
        live = [
            (i, j, op)
            for (i, j), op, ok in zip(
                cell_edges(n), genome.edges, live_edges(n, genome.edges), strict=True
            )
            if ok
        ]
        live.sort(key=lambda e: (e[1], e[0]))  # an edge's inputs end where it starts: earlier
        labels = ["input"] + [op for _, _, op in live] + ["output"]
        ending = {x: [1 + k for k, e in enumerate(live) if e[1] == x] for x in range(n)}
        inputs = [()] + [tuple(ending[i]) if i else (0,) for i, _, _ in live]
        inputs.append(tuple(ending[n - 1]))
        return labels, inputs

    def features(self, canonical: Genome) -> Features:
        assert isinstance(canonical, CellGenome)
        n = canonical.nodes
        out: list[Features] = []
        for part in self.parts:
            if part == "onehot":
                values = np.zeros((len(canonical.edges), len(self.ops)))
                for e, op in enumerate(canonical.edges):
                    values[e, self.ops.index(op)] = 1.0
                names = [f"genome.{i}->{j}={op}" for i, j in cell_edges(n) for op in self.ops]
                out.append((values.ravel(), names))
            elif part == "path":
                longest = n - 1
                cap = min(PATH_MAX_LENGTH, longest)
                dag = self.dag(canonical)
                out.append(path_features(dag, self.alphabet, cap, longest, "genome"))
            else:
                vocabulary = ("input", "output", *self.alphabet)
                out.append(
                    wl_features(self.dag(canonical), vocabulary, self.wl_iterations, "genome")
                )
        return _join(out)


class MacroEncoder(GenomeEncoder):
    family: MacroFamily

    def __init__(self, family: GenomeFamily, parts: Sequence[str], wl_iterations: int) -> None:
        assert isinstance(family, MacroFamily)
        self.labels = tuple(
            MacroNode(op=op, inputs=(0,), **dict(zip(MACRO_OPS[op], combo, strict=True))).label()
            for op in family.ops
            for combo in _product([family.choices(h) for h in MACRO_OPS[op]])
        )
        super().__init__(family, parts, wl_iterations)

    def example(self) -> Genome:
        return self.family.sample(np.random.default_rng(0))

    @staticmethod
    def dag(genome: MacroGenome) -> Dag:
        """Nodes as in the genome, then an ``output`` node fed by the last one."""
        labels = ["input"] + [node.label() for node in genome.nodes] + ["output"]
        n = len(genome.nodes)
        return labels, [()] + [node.inputs for node in genome.nodes] + [(n,)]

    def features(self, canonical: Genome) -> Features:
        assert isinstance(canonical, MacroGenome)
        m = self.family.max_nodes
        dag = self.dag(canonical)
        level = depths(dag)[:-1]  # without the output node
        widest = max(level[1:].count(d) for d in set(level[1:]))
        fan_in = sum(len(node.inputs) for node in canonical.nodes) / len(canonical.nodes)
        summary = np.array([len(canonical.nodes) / m, max(level) / m, widest / m, fan_in])
        out: list[Features] = [
            (summary, ["genome.active_nodes", "genome.depth", "genome.widest", "genome.fan_in"])
        ]
        for part in self.parts:
            if part == "onehot":
                out.append(self.slots(canonical))
            elif part == "path":
                out.append(hashed_path_features(dag, m, "genome"))
            else:
                vocabulary = ("input", "output", *self.labels)
                out.append(wl_features(dag, vocabulary, self.wl_iterations, "genome"))
        return _join(out)

    def slots(self, canonical: MacroGenome) -> Features:
        """Node position k = 1..max_nodes: present, label one-hot, an input bit per 0..k-1."""
        values: list[float] = []
        names: list[str] = []
        for k in range(1, self.family.max_nodes + 1):
            node = canonical.nodes[k - 1] if k <= len(canonical.nodes) else None
            values.append(float(node is not None))
            values += [float(node is not None and node.label() == x) for x in self.labels]
            values += [float(node is not None and i in node.inputs) for i in range(k)]
            names += [f"genome.n{k}"] + [f"genome.n{k}={x}" for x in self.labels]
            names += [f"genome.n{k}.in{i}" for i in range(k)]
        return np.array(values), names


def _product(choices: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for values in choices:
        out = [c + (v,) for c in out for v in values]
    return out


def _unit(values: Sequence[Any], log: bool) -> Callable[[Any], float]:
    """A choice's position in [0, 1] between the smallest and largest choice."""
    f: Callable[[float], float] = math.log if log else float
    low, high = f(min(values)), f(max(values))
    return lambda v: 0.0 if high == low else (f(v) - low) / (high - low)


class StackEncoder(GenomeEncoder):
    """Layer by layer, padded: per position ``present``, then each searched attribute (width
    and kernel on a log / linear scale, pool and activation one-hot, dropout linear), plus the
    number of layers of each kind. Attributes with a single choice are left out."""

    family: StackFamily

    def example(self) -> Genome:
        return self.family.sample(np.random.default_rng(0))

    def features(self, canonical: Genome) -> Features:
        assert isinstance(canonical, StackGenome)
        values: list[float] = []
        names: list[str] = []
        for kind in LAYER_KINDS:
            low, high = self.family.bounds(kind)
            part = canonical.part(kind)
            if high > low:
                values.append((len(part) - low) / (high - low))
                names.append(f"genome.{kind}_layers")
            for i in range(high):
                layer = part[i] if i < len(part) else None
                q = f"genome.{kind}{i}"
                if i >= low:
                    values.append(float(layer is not None))
                    names.append(q)
                for attr, choices in self.family.layer_choices(kind).items():
                    if len(choices) < 2:
                        continue
                    value = None if layer is None else getattr(layer, attr)
                    if attr in ("pool", "activation"):
                        values += [float(value is not None and value == c) for c in choices]
                        names += [f"{q}.{attr}={c}" for c in choices]
                    else:
                        scale = _unit(choices, log=attr == "width")
                        values.append(0.0 if value is None else scale(value))
                        names.append(f"{q}.{attr}")
        return np.array(values), names


ENCODERS: dict[str, type[GenomeEncoder]] = {
    "cell": CellEncoder,
    "macro": MacroEncoder,
    "stack": StackEncoder,
}


def genome_encoder(family: GenomeFamily, parts: Sequence[str], wl_iterations: int) -> GenomeEncoder:
    if family.name not in ENCODERS:
        raise ValueError(
            f"genome: no embedding for a {family.name!r} family (known: {sorted(ENCODERS)})"
        )
    return ENCODERS[family.name](family, parts, wl_iterations)
