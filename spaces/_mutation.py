"""Variation operators for evolutionary search. Every operator takes an explicit
``numpy.random.Generator`` and returns a member of the family: valid by construction.

Mutation kinds per family (:data:`MUTATIONS`):

- ``op``: another op on a cell edge / a macro node (a cell edge never loses the last path);
- ``param``: another value of one layer or node hyperparameter (width, kernel, activation, ...);
- ``rewire``: one input of a macro node replaced by another earlier node;
- ``add`` / ``remove``: a macro node or stack layer inserted (and wired into an active node) or
  removed (its consumers take over its inputs), within the family's size bounds.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from spaces._cell import CellFamily, CellGenome, cell_edges, live_edges
from spaces._genome import Genome, GenomeFamily
from spaces._macro import MACRO_OPS, MacroFamily, MacroGenome, MacroNode
from spaces._stack import LAYER_KINDS, Layer, StackFamily, StackGenome

T = TypeVar("T")

MUTATIONS: dict[str, tuple[str, ...]] = {
    "cell": ("op",),
    "macro": ("op", "param", "rewire", "add", "remove"),
    "stack": ("param", "add", "remove"),
}
_TRIES = 32  # mutate retries this often to find a child that is a different network


def _choice(rng: np.random.Generator, items: Sequence[T]) -> T:
    return items[int(rng.integers(len(items)))]


# --- cell ----------------------------------------------------------------------------------------


def _cell_op_moves(f: CellFamily, g: CellGenome) -> tuple[tuple[int, str], ...]:
    """Single-edge op changes that keep a path: those that change the network, or else the rest."""
    return _cell_op_moves_of(f.ops, g.nodes, g.edges)


@functools.lru_cache(maxsize=2**16)
def _cell_op_moves_of(
    ops: tuple[str, ...], nodes: int, cell: tuple[str, ...]
) -> tuple[tuple[int, str], ...]:
    # (remembered: evolution mutates the same parents thousands of times in a large study)
    before = live_edges(nodes, cell)
    changing: list[tuple[int, str]] = []
    neutral: list[tuple[int, str]] = []
    for e, current in enumerate(cell):
        for op in ops:
            if op != current:
                edges = cell[:e] + (op,) + cell[e + 1 :]
                after = live_edges(nodes, edges)
                if any(after):
                    live = after != before or (after[e] and before[e])
                    (changing if live else neutral).append((e, op))
    return tuple(changing or neutral)


def _cell_op(f: CellFamily, g: CellGenome, rng: np.random.Generator) -> CellGenome:
    e, op = _choice(rng, _cell_op_moves(f, g))
    return CellGenome(nodes=g.nodes, edges=g.edges[:e] + (op,) + g.edges[e + 1 :])


def _cell_crossover(
    f: CellFamily, a: CellGenome, b: CellGenome, rng: np.random.Generator
) -> CellGenome:
    take_a = rng.random(len(cell_edges(f.nodes))) < 0.5
    edges = [x if t else y for x, y, t in zip(a.edges, b.edges, take_a, strict=True)]
    return CellGenome(nodes=f.nodes, edges=f.repair(edges))


# --- macro ---------------------------------------------------------------------------------------


def _with_node(g: MacroGenome, k: int, node: MacroNode) -> MacroGenome:
    return MacroGenome(nodes=g.nodes[: k - 1] + (node,) + g.nodes[k:])


def _macro_param_moves(f: MacroFamily, g: MacroGenome) -> list[tuple[int, str]]:
    return [
        (k, name)
        for k, node in enumerate(g.nodes, start=1)
        for name in MACRO_OPS[node.op]
        if len(f.choices(name)) > 1
    ]


def _macro_rewire_moves(g: MacroGenome) -> list[tuple[int, int]]:
    return [
        (k, s)
        for k, node in enumerate(g.nodes, start=1)
        if k > len(node.inputs)
        for s in range(len(node.inputs))
    ]


def _macro_op(f: MacroFamily, g: MacroGenome, rng: np.random.Generator) -> MacroGenome:
    k = int(rng.integers(1, len(g.nodes) + 1))
    node = g.nodes[k - 1]
    op = _choice(rng, [o for o in f.ops if o != node.op])
    hyper = {
        name: getattr(node, name)
        if getattr(node, name) is not None
        else _choice(rng, f.choices(name))
        for name in MACRO_OPS[op]
    }
    return _with_node(g, k, MacroNode(op=op, inputs=node.inputs, **hyper))


def _macro_param(f: MacroFamily, g: MacroGenome, rng: np.random.Generator) -> MacroGenome:
    k, name = _choice(rng, _macro_param_moves(f, g))
    node = g.nodes[k - 1]
    value = _choice(rng, [v for v in f.choices(name) if v != getattr(node, name)])
    hyper = {n: getattr(node, n) for n in MACRO_OPS[node.op]} | {name: value}
    return _with_node(g, k, MacroNode(op=node.op, inputs=node.inputs, **hyper))


def _macro_rewire(f: MacroFamily, g: MacroGenome, rng: np.random.Generator) -> MacroGenome:
    k, s = _choice(rng, _macro_rewire_moves(g))
    node = g.nodes[k - 1]
    new = _choice(rng, [i for i in range(k) if i not in node.inputs])
    inputs = node.inputs[:s] + (new,) + node.inputs[s + 1 :]
    return _with_node(
        g, k, MacroNode(op=node.op, inputs=inputs, width=node.width, kernel=node.kernel)
    )


def _macro_add(f: MacroFamily, g: MacroGenome, rng: np.random.Generator) -> MacroGenome:
    """Insert a random node at index ``p`` (before the output) and feed it to an active node."""
    n = len(g.nodes)
    p = int(rng.integers(1, n + 1))

    def shifted(node: MacroNode) -> MacroNode:
        inputs = tuple(i + 1 if i >= p else i for i in node.inputs)
        return MacroNode(op=node.op, inputs=inputs, width=node.width, kernel=node.kernel)

    nodes = [shifted(x) for x in g.nodes]
    grown = MacroGenome(
        nodes=tuple(nodes[: p - 1]) + (f.random_node(rng, p),) + tuple(nodes[p - 1 :])
    )
    c = _choice(rng, [k for k in grown.active if k > p])  # the output always qualifies
    node = grown.nodes[c - 1]
    if len(node.inputs) < f.max_inputs:
        inputs = node.inputs + (p,)
    else:
        s = int(rng.integers(len(node.inputs)))
        inputs = node.inputs[:s] + (p,) + node.inputs[s + 1 :]
    return _with_node(
        grown, c, MacroNode(op=node.op, inputs=inputs, width=node.width, kernel=node.kernel)
    )


def _macro_remove(f: MacroFamily, g: MacroGenome, rng: np.random.Generator) -> MacroGenome:
    """Remove a node other than the output; its consumers take over its inputs."""
    r = int(rng.integers(1, len(g.nodes)))
    removed = g.nodes[r - 1]
    nodes = []
    for node in g.nodes[: r - 1] + g.nodes[r:]:
        inputs = set(node.inputs)
        if r in inputs:
            inputs = (inputs - {r}) | set(removed.inputs)
            if len(inputs) > f.max_inputs:
                inputs = set(rng.choice(sorted(inputs), size=f.max_inputs, replace=False).tolist())
        moved = tuple(i - 1 if i > r else i for i in inputs)
        nodes.append(MacroNode(op=node.op, inputs=moved, width=node.width, kernel=node.kernel))
    return MacroGenome(nodes=tuple(nodes))


def _macro_crossover(
    f: MacroFamily, a: MacroGenome, b: MacroGenome, rng: np.random.Generator
) -> MacroGenome:
    """One-point crossover of the node lists (CGP): one parent's head, the other's tail."""
    first, second = (a, b) if rng.random() < 0.5 else (b, a)
    cut = int(rng.integers(0, min(len(a.nodes), len(b.nodes)) + 1))
    return MacroGenome(nodes=first.nodes[:cut] + second.nodes[cut:])


# --- stack ---------------------------------------------------------------------------------------


def _restack(parts: Mapping[str, Sequence[Layer]]) -> StackGenome:
    return StackGenome(layers=tuple(layer for kind in LAYER_KINDS for layer in parts[kind]))


def _stack_param_moves(f: StackFamily, g: StackGenome) -> list[tuple[int, str]]:
    return [
        (i, a)
        for i, layer in enumerate(g.layers)
        for a, choices in f.layer_choices(layer.kind).items()
        if len(choices) > 1
    ]


def _stack_param(f: StackFamily, g: StackGenome, rng: np.random.Generator) -> StackGenome:
    i, a = _choice(rng, _stack_param_moves(f, g))
    layer = g.layers[i]
    value = _choice(rng, [v for v in f.layer_choices(layer.kind)[a] if v != getattr(layer, a)])
    new = dataclasses.replace(layer, **{a: value})
    return StackGenome(layers=g.layers[:i] + (new,) + g.layers[i + 1 :])


def _stack_add(f: StackFamily, g: StackGenome, rng: np.random.Generator) -> StackGenome:
    kind = _choice(rng, [k for k in LAYER_KINDS if len(g.part(k)) < f.bounds(k)[1]])
    parts = {k: list(g.part(k)) for k in LAYER_KINDS}
    parts[kind].insert(int(rng.integers(len(parts[kind]) + 1)), f.random_layer(rng, kind))
    return _restack(parts)


def _stack_remove(f: StackFamily, g: StackGenome, rng: np.random.Generator) -> StackGenome:
    kind = _choice(rng, [k for k in LAYER_KINDS if len(g.part(k)) > f.bounds(k)[0]])
    parts = {k: list(g.part(k)) for k in LAYER_KINDS}
    parts[kind].pop(int(rng.integers(len(parts[kind]))))
    return _restack(parts)


def _stack_crossover(
    f: StackFamily, a: StackGenome, b: StackGenome, rng: np.random.Generator
) -> StackGenome:
    """Per part (convolutions, dense layers): one-point crossover, the child's depth in bounds."""
    parts: dict[str, Sequence[Layer]] = {}
    for kind in LAYER_KINDS:
        pa, pb = a.part(kind), b.part(kind)
        low, high = f.bounds(kind)
        cuts = [
            (i, j)
            for i in range(len(pa) + 1)
            for j in range(len(pb) + 1)
            if low <= i + len(pb) - j <= high
        ]
        i, j = _choice(rng, cuts)  # (len(pa), len(pb)) always qualifies
        parts[kind] = pa[:i] + pb[j:]
    return _restack(parts)


# --- dispatch ------------------------------------------------------------------------------------

Applicable = Callable[[Any, Any], bool]
Operator = Callable[[Any, Any, np.random.Generator], Genome]

_OPERATORS: dict[tuple[str, str], tuple[Applicable, Operator]] = {
    ("cell", "op"): (lambda f, g: bool(_cell_op_moves(f, g)), _cell_op),
    ("macro", "op"): (lambda f, g: len(f.ops) > 1, _macro_op),
    ("macro", "param"): (lambda f, g: bool(_macro_param_moves(f, g)), _macro_param),
    ("macro", "rewire"): (lambda f, g: bool(_macro_rewire_moves(g)), _macro_rewire),
    ("macro", "add"): (lambda f, g: len(g.nodes) < f.max_nodes, _macro_add),
    ("macro", "remove"): (lambda f, g: len(g.nodes) > max(f.min_nodes, 1), _macro_remove),
    ("stack", "param"): (lambda f, g: bool(_stack_param_moves(f, g)), _stack_param),
    ("stack", "add"): (
        lambda f, g: any(len(g.part(k)) < f.bounds(k)[1] for k in LAYER_KINDS),
        _stack_add,
    ),
    ("stack", "remove"): (
        lambda f, g: any(len(g.part(k)) > f.bounds(k)[0] for k in LAYER_KINDS),
        _stack_remove,
    ),
}
_CROSSOVERS: dict[str, Callable[[Any, Any, Any, np.random.Generator], Genome]] = {
    "cell": _cell_crossover,
    "macro": _macro_crossover,
    "stack": _stack_crossover,
}


def applicable_mutations(family: GenomeFamily, genome: Genome) -> list[str]:
    """The mutation kinds that can change ``genome`` within ``family``."""
    family.check(genome)
    return [k for k in MUTATIONS[family.name] if _OPERATORS[family.name, k][0](family, genome)]


def mutate(
    family: GenomeFamily, genome: Genome, rng: np.random.Generator, *, kind: str | None = None
) -> Genome:
    """A mutated copy of ``genome``, a member of ``family``.

    ``kind`` forces one mutation kind; by default each try picks an applicable kind at random.
    Tries up to 32 times to return a *different network* (canonical forms differ: a change to an
    inactive node alone does not count); when nothing can change, returns ``genome`` itself.

    >>> import numpy as np
    >>> from spaces import CellFamily, CellGenome
    >>> arch = "|nor_conv_3x3~0|+|none~0|none~1|+|skip_connect~0|none~1|none~2|"
    >>> parent = CellGenome.from_nb201_string(arch)
    >>> child = mutate(CellFamily(), parent, np.random.default_rng(0))
    >>> child != parent
    True
    """
    kinds = applicable_mutations(family, genome)
    if kind is not None:
        if kind not in MUTATIONS[family.name]:
            raise ValueError(
                f"kind: unknown mutation {kind!r} for a {family.name} genome "
                f"(known: {list(MUTATIONS[family.name])})"
            )
        if kind not in kinds:
            raise ValueError(
                f"kind: mutation {kind!r} cannot change this genome ({genome.summary()})"
            )
        kinds = [kind]
    child = genome
    for _ in range(_TRIES if kinds else 0):
        child = _OPERATORS[family.name, _choice(rng, kinds)][1](family, genome, rng)
        if child != genome:
            break
    return child


def crossover(family: GenomeFamily, a: Genome, b: Genome, rng: np.random.Generator) -> Genome:
    """A child of parents ``a`` and ``b`` (both members of ``family``), itself a member."""
    family.check(a)
    family.check(b)
    return _CROSSOVERS[family.name](family, a, b, rng)
