"""spaces/_macro.py's rules, exactly (issue 33): what a node and a macro DAG accept and the
one-line error that names what they refuse, labels and summaries, which nodes are active, the
canonical numbering, the parameters a macro family asks (names, order, constants left out) and
reads back, and which DAGs belong to a family."""

from __future__ import annotations

import numpy as np
import optuna
import pytest

from spaces import CellFamily, MacroFamily, MacroGenome, MacroNode, genome_from_json, make_family
from tests.spaces.rules_helpers import Recorder, refused

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def conv(width: int, *inputs: int, kernel: int = 3) -> MacroNode:
    return MacroNode(op="conv", inputs=inputs, width=width, kernel=kernel)


def pool(*inputs: int, kernel: int = 3, op: str = "max_pool") -> MacroNode:
    return MacroNode(op=op, inputs=inputs, kernel=kernel)


def ident(*inputs: int) -> MacroNode:
    return MacroNode(op="identity", inputs=inputs)


def test_a_node_refuses_each_bad_field_by_name() -> None:
    with refused("op: unknown op 'lstm' (known: ['avg_pool', 'conv', 'identity', 'max_pool'])"):
        MacroNode(op="lstm", inputs=(0,))
    for bad in ("0", 0, ()):
        with refused(f"inputs: expected a non-empty list of node indices, got {bad!r}"):
            MacroNode(op="identity", inputs=bad)  # type: ignore[arg-type]
    with refused("inputs: 16 is out of range [0, 15]"):
        ident(16)
    with refused("inputs: -1 is out of range [0, 15]"):
        ident(-1)
    assert ident(15, 0).inputs == (0, 15)
    assert ident(3, 1, 3).inputs == (1, 3)  # sorted, a repeat counts once
    with refused("width: 0 is out of range [1, 4096]"):
        conv(0, 0)
    with refused("width: 4097 is out of range [1, 4096]"):
        conv(4097, 0)
    with refused("kernel: 17 is out of range [1, 15]"):
        conv(8, 0, kernel=17)
    with refused("kernel: 4 must be odd"):
        pool(0, kernel=4)
    with refused("kernel: 2 must be odd"):
        conv(8, 0, kernel=2)
    with refused("width: op 'max_pool' takes no width, got 8"):
        MacroNode(op="max_pool", inputs=(0,), width=8, kernel=3)
    with refused("kernel: op 'identity' takes no kernel, got 3"):
        MacroNode(op="identity", inputs=(0,), kernel=3)
    with refused("width: op 'identity' takes no width, got 4"):
        MacroNode(op="identity", inputs=(0,), width=4)
    assert conv(4096, 0, kernel=15).width == 4096 and conv(1, 0, kernel=1).kernel == 1


def test_a_node_as_a_table_and_its_label() -> None:
    assert conv(16, 0, 2, kernel=5).to_dict() == {
        "op": "conv",
        "inputs": [0, 2],
        "width": 16,
        "kernel": 5,
    }
    assert pool(1, op="avg_pool").to_dict() == {"op": "avg_pool", "inputs": [1], "kernel": 3}
    assert ident(0).to_dict() == {"op": "identity", "inputs": [0]}
    for node in (conv(16, 0, 2, kernel=5), pool(1, op="avg_pool"), ident(0)):
        assert MacroNode.from_dict(node.to_dict()) == node
    with refused("nodes: expected a table per node, got 'conv'"):
        MacroNode.from_dict("conv")  # type: ignore[arg-type]
    with refused("size: unknown key for a macro node (known: ['inputs', 'kernel', 'op', 'width'])"):
        MacroNode.from_dict({"op": "identity", "inputs": [0], "size": 1})
    assert conv(16, 0, kernel=5).label() == "conv16k5"
    assert ident(0).label() == "id"
    assert pool(0, kernel=3).label() == "maxpool3"
    assert pool(0, kernel=5, op="avg_pool").label() == "avgpool5"


def test_a_dag_refuses_bad_nodes_by_name() -> None:
    with refused("nodes: expected a list of nodes, got 'conv'"):
        MacroGenome(nodes="conv")  # type: ignore[arg-type]
    with refused("nodes: expected a list of nodes, got 3"):
        MacroGenome(nodes=3)  # type: ignore[arg-type]
    with refused("nodes: 0 is out of range [1, 16]"):
        MacroGenome(nodes=())
    with refused("nodes: 17 is out of range [1, 16]"):
        MacroGenome(nodes=[ident(0)] * 17)
    assert len(MacroGenome(nodes=[ident(0)] * 16).nodes) == 16
    assert isinstance(MacroGenome(nodes=[ident(0)]).nodes, tuple)
    with refused("nodes: expected MacroNode, got {'op': 'identity'}"):
        MacroGenome(nodes=({"op": "identity"},))  # type: ignore[arg-type]
    with refused("nodes: node 2 takes input 2, not an earlier node"):
        MacroGenome(nodes=(ident(0), ident(0, 2)))
    with refused("nodes: node 2 takes input 3, not an earlier node"):
        MacroGenome(nodes=(ident(0), ident(3)))
    MacroGenome(nodes=(ident(0), ident(0, 1)))  # node 2 may take node 1


def test_active_nodes_reach_the_output() -> None:
    g = MacroGenome(nodes=(conv(8, 0), pool(0), conv(16, 1), ident(0), conv(8, 3, 0)))
    assert g.active == [1, 3, 5]
    assert MacroGenome(nodes=(conv(8, 0),)).active == [1]
    chain = MacroGenome(nodes=(conv(8, 0), pool(1), ident(2), ident(3)))
    assert chain.active == [1, 2, 3, 4]
    assert g.summary() == (
        "macro 5 nodes: 1=conv8k3(0) 2=maxpool3(0) 3=conv16k3(1) 4=id(0) 5=conv8k3(0,3)"
        " [inactive: 2,4]"
    )
    assert chain.summary() == "macro 4 nodes: 1=conv8k3(0) 2=maxpool3(1) 3=id(2) 4=id(3)"


def test_a_dag_as_a_table_and_json() -> None:
    g = MacroGenome(nodes=(conv(8, 0), pool(0, kernel=5), conv(16, 1, 2)))
    assert g.to_dict() == {"family": "macro", "nodes": [n.to_dict() for n in g.nodes]}
    back = genome_from_json(g.to_json())
    assert isinstance(back, MacroGenome) and back.nodes == g.nodes
    assert MacroGenome.from_dict(g.to_dict()).nodes == g.nodes
    with refused("edges: unknown key for a macro genome (known: ['family', 'nodes'])"):
        MacroGenome.from_dict({"family": "macro", "edges": []})
    with refused("nodes: expected a list of nodes, got 'x'"):
        MacroGenome.from_dict({"family": "macro", "nodes": "x"})
    with refused("nodes: expected a list of nodes, got None"):
        MacroGenome.from_dict({"family": "macro"})


def numbered_topologically(g: MacroGenome) -> bool:
    return all(max(n.inputs) < k for k, n in enumerate(g.nodes, start=1))


def test_canonical_drops_inactive_nodes_and_keeps_every_field() -> None:
    g = MacroGenome(
        nodes=(pool(0, kernel=5, op="avg_pool"), conv(8, 0), conv(32, 1, kernel=5), conv(16, 1))
    )
    c = g.canonical()
    assert [n.to_dict() for n in c.nodes] == [
        {"op": "avg_pool", "inputs": [0], "kernel": 5},
        {"op": "conv", "inputs": [1], "width": 16, "kernel": 3},
    ]
    one = MacroGenome(nodes=(conv(8, 0),))
    assert one.canonical().nodes == one.nodes
    idn = MacroGenome(nodes=(ident(0), ident(0, 1)))
    assert idn.canonical().nodes == idn.nodes  # no width nor kernel invented


def test_canonical_numbering_is_by_depth_and_the_same_for_every_renumbering() -> None:
    # node depths: a=1, b=1, c=2 (from a), d=3 (from c and b), output
    a, b = conv(8, 0), pool(0)
    forms = [
        MacroGenome(nodes=(a, b, conv(16, 1), conv(32, 3, 2), ident(4))),
        MacroGenome(nodes=(b, a, conv(16, 2), conv(32, 3, 1), ident(4))),
        MacroGenome(nodes=(a, conv(16, 1), b, conv(32, 2, 3), ident(4))),
    ]
    canon = [f.canonical() for f in forms]
    assert all(c.nodes == canon[0].nodes for c in canon)
    c = canon[0]
    assert numbered_topologically(c)
    depth = {0: 0}
    for k, n in enumerate(c.nodes, start=1):
        depth[k] = 1 + max(depth[i] for i in n.inputs)
    assert [depth[k] for k in range(1, 6)] == [1, 1, 2, 3, 4]
    assert c.canonical().nodes == c.nodes
    # a different wiring is a different DAG
    other = MacroGenome(nodes=(a, b, conv(16, 2), conv(32, 3, 1), ident(4)))
    assert other.canonical().nodes != c.nodes and other != forms[0]


def test_canonical_of_tied_nodes_takes_the_smallest_encoding() -> None:
    # four identical parallel convolutions of different widths feed the output: one depth,
    # every order ties on depth only, the smallest encoding sorts them by (op, width)
    nodes = (conv(64, 0), conv(16, 0), conv(32, 0), conv(8, 0), ident(1, 2, 3, 4))
    c = MacroGenome(nodes=nodes).canonical()
    assert numbered_topologically(c)
    again = MacroGenome(nodes=(nodes[2], nodes[0], nodes[3], nodes[1], ident(1, 2, 3, 4)))
    assert again.canonical().nodes == c.nodes
    # 8 interchangeable nodes (8! = 40320 orders, over the cap): still a valid, stable numbering
    many = MacroGenome(nodes=(conv(8, 0),) * 8 + (ident(*range(1, 9)),))
    assert many.canonical().nodes == many.nodes
    # 7 interchangeable nodes (5040 orders, at the cap) are still tried: the same answer
    seven = MacroGenome(nodes=(conv(8, 0),) * 7 + (ident(*range(1, 8)),))
    assert seven.canonical().nodes == seven.nodes


def test_a_macro_family_refuses_each_option_by_name() -> None:
    with refused("min_nodes: 3 must be <= max_nodes (2)"):
        MacroFamily(min_nodes=3, max_nodes=2)
    with refused("ops: ['identity'] has no usable op (none has weights); add 'conv'"):
        MacroFamily(ops=("identity",))
    with refused("ops: unknown op 'sep' (known: ['avg_pool', 'conv', 'identity', 'max_pool'])"):
        MacroFamily(ops=("conv", "sep"))
    with refused("widths: 5000 is out of range [1, 4096]"):
        MacroFamily(widths=(5000,))
    with refused("kernels: 17 is out of range [1, 15]"):
        MacroFamily(kernels=(17,))
    with refused("kernels: 2 must be odd (so 'same' padding keeps the size)"):
        MacroFamily(kernels=(2,))
    with refused("max_inputs: 0 is out of range [1, 4]"):
        MacroFamily(max_inputs=0)
    with refused("max_inputs: 5 is out of range [1, 4]"):
        MacroFamily(max_inputs=5)
    f = MacroFamily(ops=["conv"], widths=[np.int64(8)], kernels=[np.int64(3)], max_inputs=4)
    assert f.ops == ("conv",) and f.widths == (8,) and f.kernels == (3,)
    assert type(f.widths[0]) is int and type(f.kernels[0]) is int
    d = MacroFamily()
    assert (d.min_nodes, d.max_nodes, d.max_inputs) == (1, 6, 2)
    assert d.ops == ("conv", "max_pool", "avg_pool", "identity")
    assert d.widths == (16, 32, 64) and d.kernels == (3, 5)
    assert d.choices("width") == (16, 32, 64) and d.choices("kernel") == (3, 5)
    assert make_family("macro", min_nodes=16, max_nodes=16).min_nodes == 16


FAMILY = MacroFamily(min_nodes=2, max_nodes=3, widths=(8, 16), kernels=(3,), max_inputs=2)


def test_the_questions_a_macro_family_asks_in_order() -> None:
    rec = Recorder(
        {
            "p.nodes": 3,
            "p.n1.op": "conv",
            "p.n2.op": "max_pool",
            "p.n2.arity": 2,
            "p.n2.in0": 1,
            "p.n2.in1": 1,
            "p.n3.op": "identity",
            "p.n3.arity": 2,
            "p.n3.in0": 0,
            "p.n3.in1": 2,
        }
    )
    g = FAMILY._decide(rec, "p")
    ops = ("conv", "max_pool", "avg_pool", "identity")
    assert rec.asked == [
        ("p.nodes", (2, 3)),
        ("p.n1.op", ops),
        ("p.n1.width", (8, 16)),
        ("p.n2.op", ops),
        ("p.n2.arity", (1, 2)),
        ("p.n2.in0", (0, 1)),
        ("p.n2.in1", (0, 1)),
        ("p.n3.op", ops),
        ("p.n3.arity", (1, 2)),
        ("p.n3.in0", (0, 1, 2)),
        ("p.n3.in1", (0, 1, 2)),
    ]
    assert g.nodes == (conv(16, 0), pool(1), ident(0, 2))
    # one node of one op with one width and one input: nothing is asked
    fixed = MacroFamily(min_nodes=1, max_nodes=1, ops=("conv",), widths=(8,), kernels=(3,))
    rec = Recorder({})
    assert fixed._decide(rec, "g").nodes == (conv(8, 0),)
    assert rec.asked == []
    # node k has at most min(max_inputs, k) inputs
    wide = MacroFamily(max_inputs=4, ops=("identity", "conv"))
    rec = Recorder({"g.nodes": 3, "g.n1.op": "conv"})
    wide._decide(rec, "g")
    assert [a for a in rec.asked if a[0].endswith("arity")] == [
        ("g.n2.arity", (1, 2)),
        ("g.n3.arity", (1, 3)),
    ]


def test_to_params_is_what_suggest_asked() -> None:
    g = MacroGenome(nodes=(conv(16, 0), pool(0, 1), ident(2)))
    params = FAMILY.to_params(g, prefix="arch")
    assert params == {
        "arch.nodes": 3,
        "arch.n1.op": "conv",
        "arch.n1.width": 16,
        "arch.n2.op": "max_pool",
        "arch.n2.arity": 2,
        "arch.n2.in0": 0,
        "arch.n2.in1": 1,
        "arch.n3.op": "identity",
        "arch.n3.arity": 1,
        "arch.n3.in0": 2,
    }
    assert FAMILY.from_params(params, prefix="arch").nodes == g.nodes
    assert list(FAMILY.to_params(g)) == [k.replace("arch", "genome") for k in params]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=5))
    for _ in range(8):
        trial = study.ask()
        genome = FAMILY.suggest(trial, "s")
        assert FAMILY.from_params(trial.params, "s").nodes == genome.nodes
        study.tell(trial, 0.0)
    fixed = MacroFamily(min_nodes=1, max_nodes=1, ops=("conv",), widths=(8,), kernels=(3,))
    assert fixed.to_params(MacroGenome(nodes=(conv(8, 0),))) == {}


def test_random_nodes_draw_every_choice() -> None:
    rng = np.random.default_rng(0)
    nodes = [FAMILY.random_node(rng, 3) for _ in range(80)]
    assert {n.op for n in nodes} == set(FAMILY.ops)
    assert {n.width for n in nodes if n.op == "conv"} == {8, 16}
    assert {len(n.inputs) for n in nodes} == {1, 2}
    assert {i for n in nodes for i in n.inputs} == {0, 1, 2}
    sizes = {len(FAMILY.sample(np.random.default_rng(s)).nodes) for s in range(30)}
    assert sizes == {2, 3}


def test_check_says_which_node_is_not_a_member() -> None:
    FAMILY.check(MacroGenome(nodes=(conv(8, 0), conv(16, 0, 1))))
    FAMILY.check(MacroGenome(nodes=(conv(8, 0), ident(1), pool(1, 2))))
    with refused("genome: 1 nodes is out of range [2, 3]"):
        FAMILY.check(MacroGenome(nodes=(conv(8, 0),)))
    with refused("genome: 4 nodes is out of range [2, 3]"):
        FAMILY.check(MacroGenome(nodes=(conv(8, 0),) * 4))
    narrow = MacroFamily(ops=("conv", "identity"), widths=(8, 16), kernels=(3,), max_inputs=1)
    with refused("genome: node 2 op 'max_pool' is not in the family's ops ['conv', 'identity']"):
        narrow.check(MacroGenome(nodes=(conv(8, 0), pool(1))))
    with refused("genome: node 1 width 32 is not one of [8, 16]"):
        narrow.check(MacroGenome(nodes=(conv(32, 0),)))
    with refused("genome: node 1 kernel 5 is not one of [3]"):
        narrow.check(MacroGenome(nodes=(conv(8, 0, kernel=5),)))
    with refused("genome: node 2 has 2 inputs, max_inputs is 1"):
        narrow.check(MacroGenome(nodes=(conv(8, 0), conv(8, 0, 1))))
    with refused("genome: node 2 has 2 inputs, max_inputs is 1"):
        narrow.to_params(MacroGenome(nodes=(conv(8, 0), conv(8, 0, 1))))
    cell = CellFamily().sample(np.random.default_rng(0))
    with refused("genome: a cell genome is not a member of a macro family"):
        FAMILY.check(cell)


def test_a_genome_key_is_stable_across_versions() -> None:
    # trials store genome.key (user attr "genome_key") and strategies compare stored keys with
    # new ones: the canonical numbering, and so the key, must not change between versions
    g = MacroGenome(
        nodes=(
            conv(8, 0),
            pool(0, kernel=5, op="avg_pool"),
            conv(16, 0, kernel=5),
            pool(0),
            ident(1, 2),
            conv(8, 3, 4),
            conv(32, 5, 6, 0),
        )
    )
    c = g.canonical()
    assert c.summary() == (
        "macro 7 nodes: 1=conv16k5(0) 2=maxpool3(0) 3=conv8k3(0) 4=avgpool5(0) 5=id(3,4)"
        " 6=conv8k3(1,2) 7=conv32k3(0,5,6)"
    )
    assert g.key == "8e48e47a12b392a8f655" == c.key


def seven_alike(taker: int) -> MacroGenome:
    """Input -> P, Q (alike, but P also feeds a pool); seven alike convs T, one of them (at
    ``taker``) on P, the rest on Q; the output sums the Ts and the pool."""
    ts = tuple(conv(16, 1 if t == taker else 2) for t in range(7))
    return MacroGenome(nodes=(conv(8, 0), conv(8, 0), *ts, pool(1), ident(*range(3, 11))))


def test_seven_interchangeable_nodes_are_numbered_alike_in_every_order() -> None:
    # 7! = 5040 orders of the Ts: at the cap, every order is tried, so which T takes P does
    # not change the canonical genome
    forms = [seven_alike(t).canonical() for t in range(7)]
    assert all(f.nodes == forms[0].nodes for f in forms)
    assert len({seven_alike(t).key for t in range(7)}) == 1
    assert [n.inputs for n in forms[0].nodes[3:10]] == [(1,)] * 6 + [(2,)]


def test_keys_of_dags_whose_twin_nodes_differ_only_downstream() -> None:
    # each has two nodes alike from the input side, told apart by what they feed: the numbering
    # of such twins (and so the stored key) must not change between versions either
    cases = [
        (
            (conv(8, 0), conv(8, 0), pool(1), conv(16, 1, 2), ident(3, 4)),
            "1=conv8k3(0) 2=conv8k3(0) 3=conv16k3(1,2) 4=maxpool3(1) 5=id(3,4)",
            "4c5841c2734132257360",
        ),
        (
            (pool(0), pool(0), conv(8, 1), conv(16, 2), ident(1, 3, 4)),
            "1=maxpool3(0) 2=maxpool3(0) 3=conv8k3(2) 4=conv16k3(1) 5=id(2,3,4)",
            "5168d3f0db48d7821409",
        ),
        (
            (conv(16, 0), conv(16, 0), ident(1), pool(2), conv(8, 3, 4)),
            "1=conv16k3(0) 2=conv16k3(0) 3=maxpool3(1) 4=id(2) 5=conv8k3(3,4)",
            "138729785ebcaad56be5",
        ),
        (
            (ident(0), ident(0), conv(8, 1, 2), pool(1), ident(3, 4)),
            "1=id(0) 2=id(0) 3=conv8k3(1,2) 4=maxpool3(1) 5=id(3,4)",
            "a83447aa959b4d8c0750",
        ),
        (
            (
                conv(8, 0, kernel=5),
                conv(8, 0, kernel=5),
                pool(1, op="avg_pool"),
                pool(2),
                conv(32, 3, 4, 1),
            ),
            "1=conv8k5(0) 2=conv8k5(0) 3=avgpool3(2) 4=maxpool3(1) 5=conv32k3(2,3,4)",
            "dd892d76c83fa15a244c",
        ),
    ]
    for nodes, summary, key in cases:
        g = MacroGenome(nodes=nodes)
        assert g.canonical().summary() == "macro 5 nodes: " + summary
        assert g.key == key


def test_the_summary_lists_node_one_when_it_is_inactive() -> None:
    g = MacroGenome(nodes=(conv(8, 0), pool(0)))
    assert g.summary() == "macro 2 nodes: 1=conv8k3(0) 2=maxpool3(0) [inactive: 1]"
