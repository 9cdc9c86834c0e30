"""Macro DAGs (Cartesian-genetic-programming style): a variable number of nodes, each an op with
its own hyperparameters and 1..k inputs from earlier nodes.

Node 0 is the network's input, the last node its output. A node sums its inputs (the model
builder aligns their shapes) and applies its op. Every node has an input, so the input reaches
every node; nodes that do not reach the output are *inactive* (kept in the genome, as in CGP,
dropped by :meth:`MacroGenome.canonical` and by the model builder).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spaces._genome import (
    Decisions,
    Genome,
    GenomeFamily,
    RngDecisions,
    check_choices,
    check_int,
    check_int_choices,
    check_keys,
    check_min_max,
    count,
    pick,
    put,
    short_hash,
)

# Op name -> the hyperparameters it takes. Convolutions keep the size ('same' padding), pools
# halve it (stride 2); training.models._genome implements each one.
MACRO_OPS: dict[str, tuple[str, ...]] = {
    "conv": ("width", "kernel"),
    "max_pool": ("kernel",),
    "avg_pool": ("kernel",),
    "identity": (),
}
MACRO_NODES = (1, 16)
MACRO_INPUTS = (1, 4)
WIDTHS = (1, 4096)
KERNELS = (1, 15)
_MAX_ORDERS = 5040  # canonical numbering tries at most this many orders of tied nodes


@dataclass(frozen=True, kw_only=True)
class MacroNode:
    """One node: ``op`` applied to the sum of ``inputs`` (indices of earlier nodes, 0 = input)."""

    op: str
    inputs: tuple[int, ...]
    width: int | None = None
    kernel: int | None = None

    def __post_init__(self) -> None:
        if self.op not in MACRO_OPS:
            raise ValueError(f"op: unknown op {self.op!r} (known: {sorted(MACRO_OPS)})")
        if isinstance(self.inputs, str) or not isinstance(self.inputs, Sequence) or not self.inputs:
            raise ValueError(
                f"inputs: expected a non-empty list of node indices, got {self.inputs!r}"
            )
        inputs = tuple(sorted({check_int("inputs", i, 0, MACRO_NODES[1] - 1) for i in self.inputs}))
        object.__setattr__(self, "inputs", inputs)
        takes = MACRO_OPS[self.op]
        for name, bounds in (("width", WIDTHS), ("kernel", KERNELS)):
            value = getattr(self, name)
            if name in takes:
                check_int(name, value, *bounds)
                if name == "kernel" and value % 2 == 0:
                    raise ValueError(f"kernel: {value} must be odd")
            elif value is not None:
                raise ValueError(f"{name}: op {self.op!r} takes no {name}, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": self.op, "inputs": list(self.inputs)}
        for name in MACRO_OPS[self.op]:
            out[name] = getattr(self, name)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MacroNode:
        if not isinstance(data, Mapping):
            raise ValueError(f"nodes: expected a table per node, got {data!r}")
        check_keys(data, ("op", "inputs", "width", "kernel"), "a macro node")
        return cls(
            op=data.get("op"),  # type: ignore[arg-type]
            inputs=data.get("inputs"),  # type: ignore[arg-type]
            width=data.get("width"),
            kernel=data.get("kernel"),
        )

    def label(self) -> str:
        if self.op == "conv":
            return f"conv{self.width}k{self.kernel}"
        if self.op == "identity":
            return "id"
        return f"{self.op.replace('_', '')}{self.kernel}"


@dataclass(frozen=True, eq=False, kw_only=True)
class MacroGenome(Genome):
    """Nodes ``1..n`` (``nodes[k - 1]`` is node ``k``); node ``n`` is the output.

    >>> g = MacroGenome(nodes=(
    ...     MacroNode(op="conv", inputs=(0,), width=16, kernel=3),
    ...     MacroNode(op="max_pool", inputs=(0,), kernel=3),
    ...     MacroNode(op="conv", inputs=(1,), width=32, kernel=5),
    ... ))
    >>> g.summary()
    'macro 3 nodes: 1=conv16k3(0) 2=maxpool3(0) 3=conv32k5(1) [inactive: 2]'
    >>> len(g.canonical().nodes)
    2
    """

    family = "macro"
    nodes: tuple[MacroNode, ...]

    def __post_init__(self) -> None:
        if isinstance(self.nodes, str) or not isinstance(self.nodes, Sequence):
            raise ValueError(f"nodes: expected a list of nodes, got {self.nodes!r}")
        nodes = tuple(self.nodes)
        object.__setattr__(self, "nodes", nodes)
        check_int("nodes", len(nodes), *MACRO_NODES)
        for k, node in enumerate(nodes, start=1):
            if not isinstance(node, MacroNode):
                raise ValueError(f"nodes: expected MacroNode, got {node!r}")
            if node.inputs[-1] >= k:
                raise ValueError(
                    f"nodes: node {k} takes input {node.inputs[-1]}, not an earlier node"
                )

    @property
    def active(self) -> list[int]:
        """Indices (1-based, ascending) of the nodes that reach the output."""
        live = {len(self.nodes)}
        for k in range(len(self.nodes), 0, -1):
            if k in live:
                live.update(i for i in self.nodes[k - 1].inputs if i > 0)
        return sorted(live)

    def to_dict(self) -> dict[str, Any]:
        return {"family": "macro", "nodes": [n.to_dict() for n in self.nodes]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MacroGenome:
        check_keys(data, ("family", "nodes"), "a macro genome")
        nodes = data.get("nodes")
        if isinstance(nodes, str) or not isinstance(nodes, Sequence):
            raise ValueError(f"nodes: expected a list of nodes, got {nodes!r}")
        return cls(nodes=tuple(MacroNode.from_dict(n) for n in nodes))

    def canonical(self) -> MacroGenome:
        """Inactive nodes removed, the rest numbered by (depth, structure), ties broken by trying
        their orders and keeping the smallest encoding: isomorphic DAGs get the same genome."""
        keep = self.active
        node = {k: self.nodes[k - 1] for k in keep}
        up: dict[int, str] = {0: "input"}
        depth = {0: 0}
        for k in keep:
            n = node[k]
            up[k] = short_hash(n.op, n.width, n.kernel, sorted(up[i] for i in n.inputs))
            depth[k] = 1 + max(depth[i] for i in n.inputs)
        consumers: dict[int, list[int]] = {k: [] for k in keep}
        for k in keep:
            for i in node[k].inputs:
                if i:
                    consumers[i].append(k)
        down = {keep[-1]: "output"}
        for k in reversed(keep[:-1]):
            down[k] = short_hash(sorted((up[c], down[c]) for c in consumers[k]))
        label = {k: (depth[k], up[k], down[k]) for k in keep}
        groups = [
            list(g)
            for _, g in itertools.groupby(
                sorted(keep, key=label.__getitem__), key=label.__getitem__
            )
        ]
        if math.prod(math.factorial(len(g)) for g in groups) > _MAX_ORDERS:
            orders: Any = [tuple(groups)]
        else:
            orders = itertools.product(*(itertools.permutations(g) for g in groups))
        best: tuple[Any, ...] | None = None
        for order in orders:
            flat = [k for group in order for k in group]
            new = {0: 0, **{old: i for i, old in enumerate(flat, start=1)}}
            encoded = tuple(
                (
                    node[k].op,
                    node[k].width or 0,
                    node[k].kernel or 0,
                    tuple(sorted(new[i] for i in node[k].inputs)),
                )
                for k in flat
            )
            best = encoded if best is None or encoded < best else best
        assert best is not None
        return MacroGenome(
            nodes=tuple(
                MacroNode(op=op, inputs=inputs, width=width or None, kernel=kernel or None)
                for op, width, kernel, inputs in best
            )
        )

    def summary(self) -> str:
        parts = [
            f"{k}={n.label()}({','.join(map(str, n.inputs))})"
            for k, n in enumerate(self.nodes, start=1)
        ]
        inactive = sorted(set(range(1, len(self.nodes) + 1)) - set(self.active))
        tail = f" [inactive: {','.join(map(str, inactive))}]" if inactive else ""
        return f"macro {len(self.nodes)} nodes: " + " ".join(parts) + tail


@dataclass(frozen=True, eq=False, kw_only=True)
class MacroFamily(GenomeFamily):
    """Macro DAGs with ``min_nodes..max_nodes`` nodes, ops from ``ops``, ``conv`` widths from
    ``widths``, kernels (conv and pools) from ``kernels`` and 1..``max_inputs`` inputs per node.

    Parameters (``p`` = prefix): ``p.nodes``; for node ``k``: ``p.nK.op``, ``p.nK.width`` (conv),
    ``p.nK.kernel`` (conv, pools), ``p.nK.arity`` and ``p.nK.in0``.. (a choice of an earlier
    node each; repeated choices count once). A choice with a single option is not a parameter.

    >>> import numpy as np
    >>> g = MacroFamily(max_nodes=4).sample(np.random.default_rng(0))
    >>> 1 <= len(g.nodes) <= 4
    True
    """

    name = "macro"
    OPTIONS = ("min_nodes", "max_nodes", "ops", "widths", "kernels", "max_inputs")
    min_nodes: int = 1
    max_nodes: int = 6
    ops: tuple[str, ...] = ("conv", "max_pool", "avg_pool", "identity")
    widths: tuple[int, ...] = (16, 32, 64)
    kernels: tuple[int, ...] = (3, 5)
    max_inputs: int = 2

    def __post_init__(self) -> None:
        check_min_max("nodes", self.min_nodes, self.max_nodes, MACRO_NODES)
        ops = check_choices("ops", self.ops, tuple(MACRO_OPS), what="op")
        if "conv" not in ops:
            raise ValueError(f"ops: {list(ops)} has no usable op (none has weights); add 'conv'")
        object.__setattr__(self, "ops", ops)
        object.__setattr__(self, "widths", check_int_choices("widths", self.widths, *WIDTHS))
        object.__setattr__(
            self, "kernels", check_int_choices("kernels", self.kernels, *KERNELS, odd=True)
        )
        check_int("max_inputs", self.max_inputs, *MACRO_INPUTS)

    def choices(self, name: str) -> tuple[int, ...]:
        return self.widths if name == "width" else self.kernels

    def node(self, decisions: Decisions, prefix: str, k: int) -> MacroNode:
        """Node ``k`` (1-based) decided by ``decisions``."""
        q = f"{prefix}.n{k}"
        op = pick(decisions, f"{q}.op", self.ops)
        hyper = {name: pick(decisions, f"{q}.{name}", self.choices(name)) for name in MACRO_OPS[op]}
        arity = count(decisions, f"{q}.arity", 1, min(self.max_inputs, k))
        inputs = {pick(decisions, f"{q}.in{s}", tuple(range(k))) for s in range(arity)}
        return MacroNode(op=op, inputs=tuple(inputs), **hyper)

    def random_node(self, rng: np.random.Generator, k: int) -> MacroNode:
        return self.node(RngDecisions(rng), "", k)

    def _decide(self, decisions: Decisions, prefix: str) -> MacroGenome:
        n = count(decisions, f"{prefix}.nodes", self.min_nodes, self.max_nodes)
        return MacroGenome(nodes=tuple(self.node(decisions, prefix, k) for k in range(1, n + 1)))

    def to_params(self, genome: Genome, prefix: str = "genome") -> dict[str, Any]:
        self.check(genome)
        assert isinstance(genome, MacroGenome)
        params: dict[str, Any] = {}
        put(params, f"{prefix}.nodes", len(genome.nodes), self.max_nodes - self.min_nodes + 1)
        for k, node in enumerate(genome.nodes, start=1):
            q = f"{prefix}.n{k}"
            put(params, f"{q}.op", node.op, len(self.ops))
            for name in MACRO_OPS[node.op]:
                put(params, f"{q}.{name}", getattr(node, name), len(self.choices(name)))
            put(params, f"{q}.arity", len(node.inputs), min(self.max_inputs, k))
            for s, i in enumerate(node.inputs):
                put(params, f"{q}.in{s}", i, k)
        return params

    def check(self, genome: Genome) -> None:
        self._check_family(genome)
        assert isinstance(genome, MacroGenome)
        n = len(genome.nodes)
        if not self.min_nodes <= n <= self.max_nodes:
            raise ValueError(
                f"genome: {n} nodes is out of range [{self.min_nodes}, {self.max_nodes}]"
            )
        for k, node in enumerate(genome.nodes, start=1):
            if node.op not in self.ops:
                raise ValueError(
                    f"genome: node {k} op {node.op!r} is not in the family's ops {list(self.ops)}"
                )
            for name in MACRO_OPS[node.op]:
                if getattr(node, name) not in self.choices(name):
                    raise ValueError(
                        f"genome: node {k} {name} {getattr(node, name)} "
                        f"is not one of {list(self.choices(name))}"
                    )
            if len(node.inputs) > self.max_inputs:
                raise ValueError(
                    f"genome: node {k} has {len(node.inputs)} inputs, "
                    f"max_inputs is {self.max_inputs}"
                )
