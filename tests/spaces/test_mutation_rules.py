"""The variation operators' own rules, checked exactly (issue 33: mutants of spaces/_mutation.py
that the family-wide property tests let live): where a macro node is added and how it is wired,
which node a removal may take, where a one-point crossover may cut, and the stack's bounds."""

from __future__ import annotations

import numpy as np
import pytest

from spaces import (
    CellFamily,
    CellGenome,
    Layer,
    MacroFamily,
    MacroGenome,
    MacroNode,
    StackFamily,
    StackGenome,
    crossover,
    mutate,
)
from spaces._mutation import (
    _cell_crossover,
    _macro_add,
    _macro_crossover,
    _macro_op,
    _macro_param,
    _macro_remove,
    _macro_rewire,
    _stack_add,
    _stack_crossover,
    applicable_mutations,
)

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

MACRO = MacroFamily(min_nodes=1, max_nodes=7, ops=("conv", "max_pool", "identity"),
                    widths=(4, 8), kernels=(1, 3), max_inputs=2)
SEEDS = range(60)


def _shape(g: MacroGenome) -> list[tuple]:
    return [(n.op, n.width, n.kernel) for n in g.nodes]


def _sampled(seed: int, family: MacroFamily = MACRO, at_least: int = 1) -> MacroGenome:
    rng = np.random.default_rng(seed)
    while True:
        g = family.sample(rng)
        if len(g.nodes) >= at_least:
            return g


def test_add_inserts_one_node_before_the_output_and_feeds_it_to_a_later_active_node() -> None:
    places = set()
    for seed in SEEDS:
        g = _sampled(seed)
        if len(g.nodes) == MACRO.max_nodes:
            continue
        child = _macro_add(MACRO, g, np.random.default_rng(seed + 1000))
        MACRO.check(child)
        n = len(g.nodes)
        assert len(child.nodes) == n + 1
        # the new node p: taking it out leaves the parent's nodes in order
        ps = [p for p in range(1, n + 1) if _shape(child)[: p - 1] + _shape(child)[p:] == _shape(g)]
        assert ps, (g.summary(), child.summary())
        p = next(p for p in ps if p in child.active)  # wired into the network
        places.add(p)
        consumers = [k for k, node in enumerate(child.nodes, start=1) if p in node.inputs]
        assert consumers and all(k > p for k in consumers)
        assert child.nodes[-1].op == g.nodes[-1].op  # the output stays the output
    assert 1 in places and max(places) > 2  # the first place is possible, and later ones


def test_add_keeps_the_old_edges_shifted_past_the_new_node() -> None:
    g = MacroGenome(nodes=(MacroNode(op="conv", inputs=(0,), width=4, kernel=1),
                           MacroNode(op="conv", inputs=(1,), width=8, kernel=3)))
    seen = set()
    for seed in SEEDS:
        child = _macro_add(MACRO, g, np.random.default_rng(seed))
        ps = [p for p in (1, 2) if _shape(child)[: p - 1] + _shape(child)[p:] == _shape(g)]
        if len(ps) != 1:
            continue  # the new node looks like an old one: the place is ambiguous
        p = ps[0]
        seen.add(p)
        old_first = child.nodes[0 if p == 2 else 1]
        assert 0 in old_first.inputs and set(old_first.inputs) <= {0, p}
        # the output read old node 1: that edge now points at its new index
        assert (1 if p == 2 else 2) in child.nodes[2].inputs
    assert seen == {1, 2}


def test_add_at_max_inputs_replaces_one_input_of_the_consumer() -> None:
    family = MacroFamily(min_nodes=1, max_nodes=4, ops=("conv",), widths=(4,), kernels=(3,),
                         max_inputs=1)
    g = MacroGenome(nodes=(MacroNode(op="conv", inputs=(0,), width=4, kernel=3),))
    for seed in range(10):
        child = _macro_add(family, g, np.random.default_rng(seed))
        family.check(child)
        assert child.nodes[1].inputs == (1,)  # the output now reads the new node only


def test_remove_never_takes_the_output_and_consumers_inherit_inputs() -> None:
    removed_at = set()
    for seed in SEEDS:
        g = _sampled(seed, at_least=2)
        child = _macro_remove(MACRO, g, np.random.default_rng(seed + 7))
        MACRO.check(child)
        n = len(g.nodes)
        assert len(child.nodes) == n - 1
        assert _shape(child)[-1] == _shape(g)[-1]  # the output survives
        rs = [r for r in range(1, n) if _shape(g)[: r - 1] + _shape(g)[r:] == _shape(child)]
        assert rs, (g.summary(), child.summary())
        removed_at.update(rs)
        for k, node in enumerate(g.nodes, start=1):
            if k in rs or len(rs) > 1:
                continue
            r = rs[0]
            if r in node.inputs:
                new = child.nodes[k - 2]
                inherited = {i - 1 if i > r else i for i in g.nodes[r - 1].inputs}
                if len(set(node.inputs) - {r} | set(g.nodes[r - 1].inputs)) <= MACRO.max_inputs:
                    assert inherited <= set(new.inputs)
    assert 1 in removed_at


def test_crossover_cuts_within_the_shorter_parent_and_both_orders_occur() -> None:
    a = _sampled(1, at_least=5)
    b = next(g for s in range(100) if 1 <= len((g := _sampled(200 + s)).nodes) <= 2)
    cuts, heads = set(), set()
    for seed in range(80):
        child = _macro_crossover(MACRO, a, b, np.random.default_rng(seed))
        for first, second in ((a, b), (b, a)):
            found = [c for c in range(min(len(a.nodes), len(b.nodes)) + 1)
                     if child.nodes == first.nodes[:c] + second.nodes[c:]]
            if found:
                cuts.update(found)
                heads.add(id(first))
        assert len(child.nodes) in (len(a.nodes), len(b.nodes))
        assert any(child.nodes == f.nodes[:c] + s.nodes[c:] for f, s in ((a, b), (b, a))
                   for c in range(min(len(a.nodes), len(b.nodes)) + 1)), child.summary()
    assert heads == {id(a), id(b)}
    assert 0 in cuts and min(len(a.nodes), len(b.nodes)) in cuts


def test_stack_crossover_splices_each_part_within_its_bounds() -> None:
    family = StackFamily(min_conv_layers=0, max_conv_layers=3, min_dense_layers=1,
                         max_dense_layers=3)
    rng = np.random.default_rng(0)
    parents = [family.sample(rng) for _ in range(12)]
    for seed, (a, b) in enumerate(zip(parents, parents[1:], strict=False)):
        child = _stack_crossover(family, a, b, np.random.default_rng(seed))
        family.check(child)
        for kind in ("conv", "dense"):
            pa, pb, pc = a.part(kind), b.part(kind), child.part(kind)
            assert any(pc == pa[:i] + pb[j:] for i in range(len(pa) + 1)
                       for j in range(len(pb) + 1)), (kind, a, b, child)


def test_stack_add_and_remove_change_one_layer_of_one_part() -> None:
    family = StackFamily(min_conv_layers=0, max_conv_layers=2, min_dense_layers=1,
                         max_dense_layers=2)
    g = StackGenome(layers=(Layer(kind="dense", width=32, activation="relu", dropout=0.0),))
    for seed in range(20):
        grown = mutate(family, g, np.random.default_rng(seed), kind="add")
        family.check(grown)
        assert len(grown.layers) == 2
        shrunk = mutate(family, grown, np.random.default_rng(seed), kind="remove")
        assert len(shrunk.layers) == 1 and shrunk.layers[0].kind == "dense"


def test_mutate_refuses_a_kind_that_cannot_change_the_genome() -> None:
    one = MacroGenome(nodes=(MacroNode(op="conv", inputs=(0,), width=4, kernel=1),))
    with pytest.raises(ValueError, match=r"^kind: mutation 'remove' cannot change this genome"):
        mutate(MACRO, one, np.random.default_rng(0), kind="remove")
    with pytest.raises(ValueError, match=r"^kind: unknown mutation 'swap' for a macro genome"):
        mutate(MACRO, one, np.random.default_rng(0), kind="swap")


def test_crossover_checks_both_parents() -> None:
    small = MacroFamily(min_nodes=1, max_nodes=2)
    big = _sampled(3, at_least=4)
    ok = MacroGenome(nodes=(MacroNode(op="conv", inputs=(0,), width=16, kernel=3),))
    for a, b in ((big, ok), (ok, big)):
        with pytest.raises(ValueError, match="out of range"):
            crossover(small, a, b, np.random.default_rng(0))


# --- the full mutant set (issue 33): what the tests above still let live --------------------


def test_a_removal_over_max_inputs_keeps_max_inputs_distinct_inherited_inputs() -> None:
    conv = lambda w, *i: MacroNode(op="conv", inputs=i, width=w, kernel=1)  # noqa: E731
    # removing node 3 (width 16) hands its inputs {1, 2} to the output, which also reads 0
    g = MacroGenome(nodes=(conv(4, 0), conv(8, 0), conv(16, 1, 2), conv(4, 0, 3)))
    kept = set()
    for seed in range(80):
        child = _macro_remove(MACRO, g, np.random.default_rng(seed))
        if [n.width for n in child.nodes] != [4, 8, 4]:
            continue  # another node went
        inputs = child.nodes[-1].inputs
        assert len(inputs) == MACRO.max_inputs and set(inputs) <= {0, 1, 2}, inputs
        kept.add(inputs)
    assert kept == {(0, 1), (0, 2), (1, 2)}  # any max_inputs of them, at random


def test_cell_crossover_takes_each_edge_from_either_parent_half_the_time() -> None:
    family = CellFamily()
    a = CellGenome(nodes=4, edges=("nor_conv_3x3",) * 6)
    b = CellGenome(nodes=4, edges=("skip_connect",) * 6)
    from_a = np.zeros(6)
    for seed in range(60):
        child = _cell_crossover(family, a, b, np.random.default_rng(seed))
        assert all(op in ("nor_conv_3x3", "skip_connect") for op in child.edges)
        from_a += [op == "nor_conv_3x3" for op in child.edges]
    assert ((from_a > 15) & (from_a < 45)).all(), from_a  # about 30 of 60 at every edge


def test_nothing_to_change_gives_the_genome_itself() -> None:
    fixed = MacroFamily(min_nodes=1, max_nodes=1, ops=("conv",), widths=(4,), kernels=(3,),
                        max_inputs=1)
    g = MacroGenome(nodes=(MacroNode(op="conv", inputs=(0,), width=4, kernel=3),))
    assert applicable_mutations(fixed, g) == []
    assert mutate(fixed, g, np.random.default_rng(0)) is g
    cell = CellFamily(nodes=2, ops=("none", "skip_connect"))  # "none" would cut the only path
    only = CellGenome(nodes=2, edges=("skip_connect",))
    assert applicable_mutations(cell, only) == []
    assert mutate(cell, only, np.random.default_rng(0)) is only


def test_an_op_change_reaches_every_node_and_keeps_the_hyperparameters_it_can() -> None:
    family = MacroFamily(min_nodes=1, max_nodes=4, ops=("conv", "max_pool", "identity"),
                         widths=(4, 8), kernels=(1, 3), max_inputs=2)
    g = MacroGenome(nodes=(MacroNode(op="conv", inputs=(0,), width=8, kernel=3),
                           MacroNode(op="identity", inputs=(1,)),
                           MacroNode(op="max_pool", inputs=(2,), kernel=3)))
    changed = set()
    for seed in range(60):
        child = _macro_op(family, g, np.random.default_rng(seed))
        (k,) = [k for k in (1, 2, 3) if child.nodes[k - 1] != g.nodes[k - 1]]
        changed.add(k)
        old, new = g.nodes[k - 1], child.nodes[k - 1]
        assert new.op != old.op and new.inputs == old.inputs
        for name in ("width", "kernel"):
            if getattr(old, name) is not None and getattr(new, name) is not None:
                assert getattr(new, name) == getattr(old, name)  # kept, not drawn again
        family.check(child)
    assert changed == {1, 2, 3}


def test_a_stack_layer_is_inserted_at_each_place_alike() -> None:
    family = StackFamily(min_dense_layers=1, max_dense_layers=2, widths=(8, 16))
    g = StackGenome(layers=(Layer(kind="dense", width=32, activation="relu", dropout=0.0),))
    first = 0
    for seed in range(400):
        child = _stack_add(family, g, np.random.default_rng(seed))
        assert len(child.layers) == 2 and g.layers[0] in child.layers
        first += child.layers[1] == g.layers[0]  # the new layer went before the old one
    assert 160 < first < 240  # half of 400 (a third would mean the end is favoured)


def test_a_hyperparameter_with_two_choices_can_mutate() -> None:
    family = MacroFamily(min_nodes=1, max_nodes=1, ops=("conv",), widths=(4, 8), kernels=(3,),
                         max_inputs=1)
    g = MacroGenome(nodes=(MacroNode(op="conv", inputs=(0,), width=4, kernel=3),))
    assert applicable_mutations(family, g) == ["param"]  # the kernel has one choice: not it
    assert mutate(family, g, np.random.default_rng(0)).nodes[0].width == 8


def _diff(a: MacroGenome, b: MacroGenome) -> list[int]:
    return [k for k, (x, y) in enumerate(zip(a.nodes, b.nodes, strict=True), start=1) if x != y]


def test_a_rewire_moves_one_input_of_one_node_to_another_earlier_node() -> None:
    g = MacroGenome(nodes=(MacroNode(op="conv", inputs=(0,), width=8, kernel=3),
                           MacroNode(op="max_pool", inputs=(1,), kernel=1),
                           MacroNode(op="conv", inputs=(0, 2), width=4, kernel=1)))
    rewired = set()
    for seed in range(40):
        child = _macro_rewire(MACRO, g, np.random.default_rng(seed))
        (k,) = _diff(g, child)
        old, new = g.nodes[k - 1], child.nodes[k - 1]
        assert (new.op, new.width, new.kernel) == (old.op, old.width, old.kernel)
        assert len(set(old.inputs) - set(new.inputs)) == 1 and all(i < k for i in new.inputs)
        rewired.add(k)
    assert rewired == {2, 3}  # node 1 can only read the input


def test_a_param_change_gives_one_hyperparameter_another_value() -> None:
    g = MacroGenome(nodes=(MacroNode(op="conv", inputs=(0,), width=8, kernel=3),
                           MacroNode(op="max_pool", inputs=(1,), kernel=1)))
    for seed in range(30):
        child = _macro_param(MACRO, g, np.random.default_rng(seed))
        (k,) = _diff(g, child)
        old, new = g.nodes[k - 1], child.nodes[k - 1]
        changed = [n for n in ("width", "kernel") if getattr(old, n) != getattr(new, n)]
        assert len(changed) == 1 and new.op == old.op and new.inputs == old.inputs


def test_a_removal_renumbers_every_edge_past_the_removed_node() -> None:
    conv = lambda w, *i: MacroNode(op="conv", inputs=i, width=w, kernel=1)  # noqa: E731
    g = MacroGenome(nodes=(conv(4, 0), conv(8, 1), conv(16, 0, 2), conv(32, 3, 1), conv(64, 4, 2)))
    seen = set()
    for seed in range(40):
        child = _macro_remove(MACRO, g, np.random.default_rng(seed))
        widths = [n.width for n in child.nodes]
        (r,) = [k for k, n in enumerate(g.nodes, start=1) if n.width not in widths]
        seen.add(r)
        shift = lambda ids: {i - 1 if i > r else i for i in ids}  # noqa: B023, E731
        for old, new in zip(g.nodes[: r - 1] + g.nodes[r:], child.nodes, strict=True):
            want = set(old.inputs)
            if r in want:
                want = (want - {r}) | set(g.nodes[r - 1].inputs)
            if len(want) <= MACRO.max_inputs:
                assert set(new.inputs) == shift(want), (r, old, new)
            else:
                assert len(new.inputs) == MACRO.max_inputs and set(new.inputs) <= shift(want)
    assert seen == {1, 2, 3, 4}


def test_an_add_at_a_full_consumer_replaces_exactly_one_of_its_inputs() -> None:
    conv = lambda w, *i: MacroNode(op="conv", inputs=i, width=w, kernel=1)  # noqa: E731
    g = MacroGenome(nodes=(conv(4, 0), conv(8, 0, 1)))  # the output's two inputs: full
    wide = MacroFamily(min_nodes=1, max_nodes=4, ops=("conv",), widths=(16,), kernels=(1,),
                       max_inputs=2)  # so the new node is the one of width 16
    full = 0
    for seed in range(40):
        child = _macro_add(wide, g, np.random.default_rng(seed))
        out = child.nodes[-1]
        (p,) = [k for k, n in enumerate(child.nodes, start=1) if n.width == 16]
        if p not in out.inputs:
            continue  # the new node feeds node 2, not the output
        full += 1
        old = {i + 1 if i >= p else i for i in g.nodes[-1].inputs}
        assert len(out.inputs) == 2 and len(old & set(out.inputs)) == 1, (p, out)
    assert full > 10


def test_a_stack_attribute_with_two_choices_can_mutate() -> None:
    family = StackFamily(min_dense_layers=1, max_dense_layers=1, widths=(8, 16))
    g = StackGenome(layers=(Layer(kind="dense", width=8, activation="relu", dropout=0.0),))
    assert applicable_mutations(family, g) == ["param"]  # one activation, one dropout
    assert mutate(family, g, np.random.default_rng(0)).layers[0].width == 16


def test_stack_crossover_draws_each_valid_cut_alike() -> None:
    # dense parts a1 a2 | b: the cuts that keep 1 to 3 dense layers give five children
    family = StackFamily(min_dense_layers=1, max_dense_layers=3)
    dense = lambda w: Layer(kind="dense", width=w, activation="relu", dropout=0.0)  # noqa: E731
    a1, a2, b1 = dense(8), dense(16), dense(32)
    a, b = StackGenome(layers=(a1, a2)), StackGenome(layers=(b1,))
    counts: dict[tuple[int, ...], int] = {}
    for seed in range(500):
        child = _stack_crossover(family, a, b, np.random.default_rng(seed))
        widths = tuple(layer.width for layer in child.layers)
        counts[widths] = counts.get(widths, 0) + 1
    assert set(counts) == {(32,), (8, 32), (8,), (8, 16, 32), (8, 16)}
    assert all(60 < n < 140 for n in counts.values()), counts  # 100 each
