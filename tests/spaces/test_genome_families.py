"""Property tests every genome family passes: sampled, mutated and crossed genomes are valid
members; decisions round-trip through ``trial.params``; isomorphic genomes hash equal.

The strategies here (``families``, ``sampled``) are reused by tests/training/test_genome_models.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spaces import (
    ACTIVATIONS,
    CELL_OPS,
    MUTATIONS,
    CellFamily,
    CellGenome,
    GenomeFamily,
    MacroFamily,
    MacroGenome,
    MacroNode,
    Space,
    StackFamily,
    StackGenome,
    applicable_mutations,
    cell_edges,
    crossover,
    genome_from_json,
    mutate,
)
from spaces._genome import Genome

SETTINGS = settings(deadline=None, database=None, max_examples=100)
seeds = st.integers(0, 2**32 - 1)


@st.composite
def cell_families(draw: st.DrawFn) -> CellFamily:
    usable = draw(
        st.lists(st.sampled_from(sorted(set(CELL_OPS) - {"none"})), min_size=1, unique=True)
    )
    ops = draw(st.permutations((["none"] if draw(st.booleans()) else []) + usable))
    return CellFamily(nodes=draw(st.integers(2, 5)), ops=tuple(ops))


@st.composite
def macro_families(draw: st.DrawFn) -> MacroFamily:
    low = draw(st.integers(1, 4))
    others = draw(st.lists(st.sampled_from(["max_pool", "avg_pool", "identity"]), unique=True))
    return MacroFamily(
        min_nodes=low,
        max_nodes=draw(st.integers(low, 7)),
        ops=tuple(draw(st.permutations(["conv", *others]))),
        widths=tuple(draw(st.lists(st.sampled_from([4, 6, 8]), min_size=1, unique=True))),
        kernels=tuple(draw(st.lists(st.sampled_from([1, 3, 5]), min_size=1, unique=True))),
        max_inputs=draw(st.integers(1, 3)),
    )


@st.composite
def stack_families(draw: st.DrawFn) -> StackFamily:
    c_low, d_low = draw(st.integers(0, 2)), draw(st.integers(0, 2))

    def subset(values: list[Any]) -> tuple[Any, ...]:
        return tuple(draw(st.lists(st.sampled_from(values), min_size=1, unique=True)))

    return StackFamily(
        min_conv_layers=c_low,
        max_conv_layers=draw(st.integers(c_low, 3)),
        min_dense_layers=d_low,
        max_dense_layers=draw(st.integers(d_low, 3)),
        channels=subset([4, 8]),
        kernels=subset([1, 3, 5]),
        pools=subset([False, True]),
        widths=subset([8, 16]),
        activations=subset(list(ACTIVATIONS)),
        dropouts=subset([0.0, 0.25]),
    )


families = st.one_of(cell_families(), macro_families(), stack_families())


def sample(family: GenomeFamily, seed: int) -> tuple[Genome, dict[str, Any]]:
    """A genome suggested through a real Optuna trial (RandomSampler), and ``trial.params``."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    trial = study.ask()
    return family.suggest(trial), trial.params


sampled = st.tuples(families, seeds).map(lambda fs: (fs[0], sample(*fs)[0]))


# --- an independent validity check (does not use the library's own reachability code) ---------


def _reaches(n: int, edges: set[tuple[int, int]], a: int, b: int) -> bool:
    frontier, seen = [a], {a}
    while frontier:
        x = frontier.pop()
        for i, j in edges:
            if i == x and j not in seen:
                seen.add(j)
                frontier.append(j)
    return b in seen


def assert_valid(family: GenomeFamily, genome: Genome) -> None:
    family.check(genome)
    assert genome_from_json(genome.to_json()).to_dict() == genome.to_dict()
    canon = genome.canonical()
    assert canon.key == genome.key and canon.canonical().to_dict() == canon.to_dict()
    assert genome.summary() and "\n" not in genome.summary()
    if isinstance(genome, CellGenome):
        n = genome.nodes
        for g in (genome, canon):
            used = {e for e, op in zip(cell_edges(n), g.edges, strict=True) if op != "none"}
            assert all(i < j for i, j in used)  # acyclic
            assert _reaches(n, used, 0, n - 1)  # input reaches output
        used = {e for e, op in zip(cell_edges(n), canon.edges, strict=True) if op != "none"}
        for i, j in used:  # every kept edge is on an input -> output path
            assert _reaches(n, used, 0, i) and _reaches(n, used, j, n - 1)
    elif isinstance(genome, MacroGenome):
        for g in (genome, canon):
            for k, node in enumerate(g.nodes, start=1):
                assert node.inputs and all(0 <= i < k for i in node.inputs)  # acyclic, fed
        n = len(canon.nodes)
        edges = {(i, k) for k, node in enumerate(canon.nodes, start=1) for i in node.inputs}
        assert all(_reaches(n + 1, edges, k, n) for k in range(n + 1))  # kept nodes reach output
    else:
        assert isinstance(genome, StackGenome)
        kinds = [layer.kind for layer in genome.layers]
        assert kinds == sorted(kinds)  # convolutions before dense layers


# --- properties ----------------------------------------------------------------------------------


@pytest.mark.unit
@SETTINGS
@given(families, seeds)
def test_sampled_genomes_are_valid_and_rebuild_from_trial_params(
    family: GenomeFamily, seed: int
) -> None:
    genome, params = sample(family, seed)
    assert_valid(family, genome)
    assert all(name.startswith("genome.") for name in params)
    assert family.from_params(params).to_dict() == genome.to_dict()
    encoded = family.to_params(genome)
    assert set(encoded) <= set(params)  # a macro node's repeated input choice is asked once
    assert family.from_params(encoded).to_dict() == genome.to_dict()
    # A sampler that proposes genomes (evolution) answers the trial's questions from to_params.
    fixed = optuna.trial.FixedTrial(encoded)
    assert family.suggest(fixed).to_dict() == genome.to_dict()


@pytest.mark.unit
@SETTINGS
@given(families, seeds)
def test_random_sampling_without_optuna_gives_members(family: GenomeFamily, seed: int) -> None:
    assert_valid(family, family.sample(np.random.default_rng(seed)))


@pytest.mark.unit
@SETTINGS
@given(families, seeds, seeds, st.data())
def test_every_mutation_kind_gives_a_valid_member(
    family: GenomeFamily, seed: int, rng_seed: int, data: st.DataObject
) -> None:
    genome = family.sample(np.random.default_rng(seed))
    rng = np.random.default_rng(rng_seed)
    kinds = applicable_mutations(family, genome)
    assert set(kinds) <= set(MUTATIONS[family.name])
    if kinds:
        kind = data.draw(st.sampled_from(kinds))
        assert_valid(family, mutate(family, genome, rng, kind=kind))
    child = genome
    for _ in range(5):  # a short evolutionary lineage stays valid
        child = mutate(family, child, rng)
        assert_valid(family, child)


@pytest.mark.unit
@SETTINGS
@given(families, seeds, seeds, seeds)
def test_crossover_gives_a_valid_member(
    family: GenomeFamily, a: int, b: int, rng_seed: int
) -> None:
    pa, pb = family.sample(np.random.default_rng(a)), family.sample(np.random.default_rng(b))
    assert_valid(family, crossover(family, pa, pb, np.random.default_rng(rng_seed)))


@pytest.mark.unit
def test_mutation_changes_the_network_when_it_can() -> None:
    family = MacroFamily(max_nodes=5)
    rng = np.random.default_rng(0)
    for _ in range(50):
        genome = family.sample(rng)
        assert mutate(family, genome, rng) != genome


@pytest.mark.unit
def test_a_family_is_a_dimension_of_a_space() -> None:
    space = Space({"genome": CellFamily()})
    trial = optuna.create_study().ask()
    params = space.suggest(trial)
    assert CellFamily().from_params(trial.params) == params["genome"]


# --- isomorphism ---------------------------------------------------------------------------------


def _random_topological_order(
    rng: np.random.Generator, nodes: list[int], deps: dict[int, set[int]]
) -> list[int]:
    order: list[int] = []
    left = list(nodes)
    while left:
        ready = [x for x in left if deps[x] <= set(order)]
        x = ready[int(rng.integers(len(ready)))]
        order.append(x)
        left.remove(x)
    return order


def _permuted_cell(genome: CellGenome, rng: np.random.Generator) -> CellGenome:
    n = genome.nodes
    ops = dict(zip(cell_edges(n), genome.edges, strict=True))
    inner = list(range(1, n - 1))
    deps = {
        j: {i for (i, jj), op in ops.items() if jj == j and op != "none" and i in inner}
        for j in inner
    }
    order = _random_topological_order(rng, inner, deps)
    new = {0: 0, n - 1: n - 1, **{old: k for k, old in enumerate(order, start=1)}}
    moved = {(new[i], new[j]): op for (i, j), op in ops.items() if op != "none"}
    return CellGenome(nodes=n, edges=tuple(moved.get(e, "none") for e in cell_edges(n)))


def _permuted_macro(genome: MacroGenome, rng: np.random.Generator) -> MacroGenome:
    n = len(genome.nodes)
    inner = list(range(1, n))
    deps = {k: {i for i in genome.nodes[k - 1].inputs if i > 0} for k in inner}
    order = _random_topological_order(rng, inner, deps) + [n]  # the output stays last
    new = {0: 0, **{old: k for k, old in enumerate(order, start=1)}}
    return MacroGenome(
        nodes=tuple(
            MacroNode(
                op=x.op, inputs=tuple(new[i] for i in x.inputs), width=x.width, kernel=x.kernel
            )
            for x in (genome.nodes[old - 1] for old in order)
        )
    )


@pytest.mark.unit
@SETTINGS
@given(st.one_of(cell_families(), macro_families()), seeds, seeds)
def test_isomorphic_genomes_hash_equal(family: GenomeFamily, seed: int, perm_seed: int) -> None:
    genome = family.sample(np.random.default_rng(seed))
    rng = np.random.default_rng(perm_seed)
    permute = _permuted_cell if isinstance(genome, CellGenome) else _permuted_macro
    copy = permute(genome, rng)  # type: ignore[arg-type]
    assert copy.key == genome.key and copy == genome and hash(copy) == hash(genome)
    assert copy.canonical().to_dict() == genome.canonical().to_dict()


@pytest.mark.unit
def test_renumbered_macro_dag_is_equal_and_a_different_dag_is_not() -> None:
    conv = lambda w, *i: MacroNode(op="conv", inputs=i, width=w, kernel=3)  # noqa: E731
    pool = lambda *i: MacroNode(op="max_pool", inputs=i, kernel=3)  # noqa: E731
    a = MacroGenome(nodes=(conv(8, 0), pool(0), conv(16, 1, 2)))
    b = MacroGenome(nodes=(pool(0), conv(8, 0), conv(16, 1, 2)))
    assert a.to_dict() != b.to_dict() and a == b and a.key == b.key
    # Two parallel convolutions are not one convolution used twice (different weights).
    shared = MacroGenome(nodes=(conv(8, 0), MacroNode(op="identity", inputs=(1,)), conv(16, 1, 2)))
    parallel = MacroGenome(nodes=(conv(8, 0), conv(8, 0), conv(16, 1, 2)))
    assert shared != parallel and parallel != a
    # An inactive node does not change the network.
    dead = MacroGenome(nodes=(conv(8, 0), pool(0), conv(32, 0), conv(16, 1, 2)))
    assert dead == a and len(dead.canonical().nodes) == 3


def test_spaces_imports_neither_torch_nor_training() -> None:
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, spaces\n"
        "f = spaces.MacroFamily(); g = f.sample(np.random.default_rng(0))\n"
        "spaces.mutate(f, g, np.random.default_rng(1)); g.key\n"
        "print(sorted({'torch', 'training', 'search'} & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
