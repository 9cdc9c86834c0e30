"""spaces/_genome_encoding.py's rules, exactly (issue 33): which encoding kinds are accepted, and
feature by feature what each family's encoder writes (names and values) for small genomes whose
vectors can be worked out by hand."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import spaces._genome_encoding as enc
from spaces import (
    CellFamily,
    CellGenome,
    Layer,
    MacroFamily,
    MacroGenome,
    MacroNode,
    StackFamily,
    StackGenome,
)
from spaces._genome_encoding import _product, _unit, genome_encoder, parse_kind
from tests.spaces.rules_helpers import refused

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def features(encoder: Any, genome: Any) -> dict[str, float]:
    return dict(zip(encoder.names, encoder(genome), strict=True))


def test_parse_kind_reads_parts_and_wl_iterations() -> None:
    assert parse_kind("path+wl") == (("path", "wl"), 2)
    assert parse_kind("onehot") == (("onehot",), 2)
    assert parse_kind("wl1+onehot") == (("wl", "onehot"), 1)
    assert parse_kind("onehot+path+wl8") == (("onehot", "path", "wl"), 8)
    for bad in ("", None, 3):
        with refused(f"kind: expected a string such as 'path+wl', got {bad!r}"):
            parse_kind(bad)
    for part in ("wl0", "wl9", "wlx", "paths", "wl+"):
        name = part if part != "wl+" else ""
        with refused(
            f"kind: unknown encoding {name!r} in {part!r} "
            "(known: ['onehot', 'path', 'wl'], 'wl1'..'wl8' for the WL iterations)"
        ):
            parse_kind(part)
    with refused("kind: 'wl+path+wl3' names an encoding twice"):
        parse_kind("wl+path+wl3")
    with refused("kind: 'path+path' names an encoding twice"):
        parse_kind("path+path")


def test_product_and_unit() -> None:
    assert _product([]) == [()]
    assert _product([(1, 2), (3,), (4, 5)]) == [(1, 3, 4), (1, 3, 5), (2, 3, 4), (2, 3, 5)]
    lin = _unit((2, 4, 10), log=False)
    assert [lin(v) for v in (2, 4, 10)] == [0.0, 0.25, 1.0]
    log = _unit((10, 100, 1000), log=True)
    assert log(10) == 0.0 and math.isclose(log(100), 0.5) and log(1000) == 1.0
    assert _unit((7,), log=True)(7) == 0.0 and _unit((7,), log=False)(7) == 0.0


def test_an_encoder_for_an_unknown_family_is_refused() -> None:
    class Tree(CellFamily):
        name = "tree"  # type: ignore[assignment]

    try:
        with refused(
            "genome: no embedding for a 'tree' family (known: ['cell', 'macro', 'stack'])"
        ):
            genome_encoder(Tree(), ("onehot",), 2)
    finally:
        from spaces._genome import FAMILIES

        FAMILIES.pop("tree", None)


CELL = CellFamily(nodes=3, ops=("none", "skip_connect", "nor_conv_3x3"))


def test_cell_onehot_is_one_op_per_edge_of_the_canonical_cell() -> None:
    e = genome_encoder(CELL, ("onehot",), 2)
    ops = ("none", "skip_connect", "nor_conv_3x3")
    assert e.names == tuple(
        f"genome.{i}->{j}={op}" for i, j in ((0, 1), (0, 2), (1, 2)) for op in ops
    )
    # 0->1 conv, 0->2 skip, 1->2 none: edge 0->1 is dead, so canonical writes none there
    g = CellGenome(nodes=3, edges=("nor_conv_3x3", "skip_connect", "none"))
    f = features(e, g)
    assert [k for k, v in f.items() if v == 1.0] == [
        "genome.0->1=none",
        "genome.0->2=skip_connect",
        "genome.1->2=none",
    ]
    assert sum(f.values()) == 3.0
    with refused("genome: a macro genome is not a member of a cell family"):
        e(MacroFamily().sample(np.random.default_rng(0)))


def test_cell_dag_puts_ops_on_nodes() -> None:
    e = genome_encoder(CellFamily(nodes=4), ("path",), 2)
    g = CellGenome(
        nodes=4,
        edges=("nor_conv_3x3", "skip_connect", "nor_conv_1x1", "none", "avg_pool_3x3", "none"),
    )
    # edges in genome order: 0->1 conv3, 0->2 skip, 1->2 conv1, 0->3 none, 1->3 pool, 2->3 none
    # live: 0->1, 1->3 (2 feeds nothing); sorted by target then source
    labels, inputs = e.dag(g)
    assert labels == ["input", "nor_conv_3x3", "avg_pool_3x3", "output"]
    assert inputs == [(), (0,), (1,), (2,)]
    g2 = CellGenome(
        nodes=4,
        edges=("nor_conv_3x3", "skip_connect", "nor_conv_1x1", "avg_pool_3x3", "none", "none"),
    )
    labels, inputs = e.dag(g2)
    assert labels == ["input", "avg_pool_3x3", "output"] and inputs == [(), (0,), (1,)]
    g3 = CellGenome(
        nodes=4,
        edges=(
            "nor_conv_3x3",
            "skip_connect",
            "nor_conv_1x1",
            "none",
            "avg_pool_3x3",
            "skip_connect",
        ),
    )
    labels, inputs = e.dag(g3)
    # live edges: 0->1, 0->2, 1->2, 1->3, 2->3; by target: (0,1) (0,2) (1,2) (1,3) (2,3)
    assert labels == [
        "input",
        "nor_conv_3x3",
        "skip_connect",
        "nor_conv_1x1",
        "avg_pool_3x3",
        "skip_connect",
        "output",
    ]
    assert inputs == [(), (0,), (0,), (1,), (1,), (2, 3), (4, 5)]
    # edge 1->2 comes before 0->3: edges are ordered by where they end, then where they start
    g4 = CellGenome(
        nodes=4,
        edges=("skip_connect", "none", "nor_conv_1x1", "avg_pool_3x3", "none", "nor_conv_3x3"),
    )
    labels, inputs = e.dag(g4)
    assert labels == [
        "input",
        "skip_connect",
        "nor_conv_1x1",
        "avg_pool_3x3",
        "nor_conv_3x3",
        "output",
    ]
    assert inputs == [(), (0,), (1,), (0,), (2,), (3, 4)]


def test_cell_path_and_wl_features() -> None:
    e = genome_encoder(CELL, ("path", "wl1"), 1)
    g = CellGenome(nodes=3, edges=("nor_conv_3x3", "skip_connect", "skip_connect"))
    f = features(e, g)
    paths = {k: v for k, v in f.items() if ".path" in k}
    # paths: 0-skip->2 (length 1), 0-conv->1-skip->2 (length 2); longest 2, cap 2
    assert list(paths) == [
        "genome.path=skip_connect",
        "genome.path=nor_conv_3x3",
        "genome.path=skip_connect>skip_connect",
        "genome.path=skip_connect>nor_conv_3x3",
        "genome.path=nor_conv_3x3>skip_connect",
        "genome.path=nor_conv_3x3>nor_conv_3x3",
    ]
    assert [k for k, v in paths.items() if v] == [
        "genome.path=skip_connect",
        "genome.path=nor_conv_3x3>skip_connect",
    ]
    wl0 = {k: v for k, v in f.items() if ".wl0" in k}
    assert wl0 == {
        "genome.wl0=input": 1.0,
        "genome.wl0=output": 1.0,
        "genome.wl0=skip_connect": 2.0,
        "genome.wl0=nor_conv_3x3": 1.0,
    }
    assert sum(v for k, v in f.items() if ".wl1#" in k) == 5.0
    assert len(e.names) == 6 + 4 + 64
    # 5 nodes: paths of 4 ops are the longest counted exactly, none longer
    e5 = genome_encoder(CellFamily(nodes=5, ops=("none", "skip_connect")), ("path",), 2)
    assert e5.names[-1] == "genome.path=" + ">".join(["skip_connect"] * 4)
    e6 = genome_encoder(CellFamily(nodes=6, ops=("none", "skip_connect")), ("path",), 2)
    assert e6.names[-1] == "genome.paths_of_length5"
    assert len(e6.names) == 4 + 1


MACRO = MacroFamily(max_nodes=3, ops=("conv", "max_pool", "identity"), widths=(8, 16), kernels=(3,))


def conv(width: int, *inputs: int) -> MacroNode:
    return MacroNode(op="conv", inputs=inputs, width=width, kernel=3)


def test_macro_labels_slots_and_summary() -> None:
    e = genome_encoder(MACRO, ("onehot",), 2)
    assert e.labels == ("conv8k3", "conv16k3", "maxpool3", "id")
    g = MacroGenome(
        nodes=(conv(8, 0), MacroNode(op="max_pool", inputs=(0,), kernel=3), conv(16, 1, 2))
    )
    assert e.dag(g) == (
        ["input", "conv8k3", "maxpool3", "conv16k3", "output"],
        [(), (0,), (0,), (1, 2), (3,)],
    )
    f = features(e, g)
    assert list(f)[:4] == ["genome.active_nodes", "genome.depth", "genome.widest", "genome.fan_in"]
    assert [f[k] for k in list(f)[:4]] == [1.0, 2 / 3, 2 / 3, 4 / 3]
    on = [k for k, v in f.items() if v == 1.0 and k.startswith("genome.n")]
    canon = g.canonical()
    expect = []
    for k, node in enumerate(canon.nodes, start=1):
        expect += [f"genome.n{k}", f"genome.n{k}={node.label()}"]
        expect += [f"genome.n{k}.in{i}" for i in node.inputs]
    assert sorted(on) == sorted(expect)
    slot_names = [k for k in f if k.startswith("genome.n")]
    assert len(slot_names) == 3 * (1 + 4) + (1 + 2 + 3)
    assert slot_names[:7] == [
        "genome.n1",
        "genome.n1=conv8k3",
        "genome.n1=conv16k3",
        "genome.n1=maxpool3",
        "genome.n1=id",
        "genome.n1.in0",
        "genome.n2",
    ]
    # one node: slots 2 and 3 absent
    one = features(e, MacroGenome(nodes=(conv(16, 0),)))
    assert [k for k, v in one.items() if v and k.startswith("genome.n")] == [
        "genome.n1",
        "genome.n1=conv16k3",
        "genome.n1.in0",
    ]
    assert [one[k] for k in list(one)[:4]] == [1 / 3, 1 / 3, 1 / 3, 1.0]


def test_macro_path_and_wl_features() -> None:
    e = genome_encoder(MACRO, ("path", "wl"), 2)
    assert e.wl_iterations == 2
    g = MacroGenome(nodes=(conv(8, 0), MacroNode(op="identity", inputs=(0, 1))))
    f = features(e, g)
    lengths = {k: v for k, v in f.items() if "paths_of_length" in k}
    assert lengths == {
        "genome.paths_of_length0": 0.0,
        "genome.paths_of_length1": 1.0,
        "genome.paths_of_length2": 1.0,
        "genome.paths_of_length3": 0.0,
    }
    assert sum(v for k, v in f.items() if "path#" in k) == 2.0
    wl0 = {k: v for k, v in f.items() if ".wl0" in k}
    assert wl0 == {
        "genome.wl0=input": 1.0,
        "genome.wl0=output": 1.0,
        "genome.wl0=conv8k3": 1.0,
        "genome.wl0=conv16k3": 0.0,
        "genome.wl0=maxpool3": 0.0,
        "genome.wl0=id": 1.0,
    }
    assert sum(v for k, v in f.items() if ".wl2#" in k) == 4.0
    assert [f[k] for k in list(f)[:4]] == [2 / 3, 2 / 3, 1 / 3, 1.5]


def test_vectors_are_remembered_by_key_as_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    e = genome_encoder(MACRO, ("onehot",), 2)
    computed: list[int] = []
    features = e.features

    def counting(canonical: Any) -> Any:
        computed.append(len(canonical.nodes))
        return features(canonical)

    monkeypatch.setattr(e, "features", counting)
    a = MacroGenome(nodes=(conv(8, 0), conv(16, 0), MacroNode(op="identity", inputs=(1, 2))))
    b = MacroGenome(nodes=(conv(16, 0), conv(8, 0), MacroNode(op="identity", inputs=(1, 2))))
    first = e(a)
    first[:] = -1.0  # the caller's copy
    assert computed == [3]
    again = e(b)  # isomorphic: the same key, read from memory
    assert computed == [3] and again.min() >= 0.0 and again.tolist() == e(a).tolist()
    assert computed == [3]


def test_the_memory_is_cleared_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(enc, "MEMO_SIZE", 2)
    e = genome_encoder(MACRO, ("onehot",), 2)
    rng = np.random.default_rng(1)
    sizes = []
    keys = set()
    while len(keys) < 6:
        g = MACRO.sample(rng)
        keys.add(g.key)
        e(g)
        sizes.append(len(e._memo))
    assert max(sizes) == 2 and min(sizes[1:]) >= 1


STACK = StackFamily(
    min_conv_layers=0,
    max_conv_layers=1,
    min_dense_layers=1,
    max_dense_layers=2,
    channels=(8, 64),
    kernels=(3,),
    pools=(False, True),
    widths=(4, 16, 64),
    activations=("relu", "tanh"),
    dropouts=(0.0, 0.2, 0.4),
)


def test_stack_features_layer_by_layer() -> None:
    e = genome_encoder(STACK, ("wl",), 2)
    assert e.names == (
        "genome.conv_layers",
        "genome.conv0",
        "genome.conv0.width",
        "genome.conv0.pool=False",
        "genome.conv0.pool=True",
        "genome.conv0.activation=relu",
        "genome.conv0.activation=tanh",
        "genome.conv0.dropout",
        "genome.dense_layers",
        "genome.dense0.width",
        "genome.dense0.activation=relu",
        "genome.dense0.activation=tanh",
        "genome.dense0.dropout",
        "genome.dense1",
        "genome.dense1.width",
        "genome.dense1.activation=relu",
        "genome.dense1.activation=tanh",
        "genome.dense1.dropout",
    )
    g = StackGenome(
        layers=(
            Layer(kind="conv", width=64, kernel=3, pool=True, activation="tanh", dropout=0.2),
            Layer(kind="dense", width=16, dropout=0.4),
        )
    )
    expect = [1, 1, 1, 0, 1, 0, 1, 0.5, 0, 0.5, 1, 0, 1, 0, 0, 0, 0, 0]
    assert np.allclose(e(g), expect, rtol=0, atol=1e-12)
    # a stack with no conv layer and two dense layers: absent positions are all zeros
    g2 = StackGenome(layers=(Layer(kind="dense", width=4), Layer(kind="dense", width=64)))
    f = features(e, g2)
    assert [k for k, v in f.items() if v] == [
        "genome.dense_layers",
        "genome.dense0.activation=relu",
        "genome.dense1",
        "genome.dense1.width",
        "genome.dense1.activation=relu",
    ]
    assert all(f[k] == 1.0 for k, v in f.items() if v)
    # every kind encodes a stack the same way, and fixed depths are no feature
    assert genome_encoder(STACK, ("onehot", "path"), 2)(g).tolist() == e(g).tolist()
    fixed = StackFamily(min_dense_layers=2, max_dense_layers=2, widths=(8, 32))
    names = genome_encoder(fixed, ("wl",), 2).names
    assert names == ("genome.dense0.width", "genome.dense1.width")


def test_a_depth_is_placed_between_the_family_bounds() -> None:
    e = genome_encoder(StackFamily(min_dense_layers=1, max_dense_layers=3), ("wl",), 2)
    depth = e.names.index("genome.dense_layers")
    for n, expect in ((1, 0.0), (2, 0.5), (3, 1.0)):
        g = StackGenome(layers=(Layer(kind="dense", width=32),) * n)
        assert e(g)[depth] == expect
