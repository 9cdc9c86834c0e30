"""Bad genome input gets one clear line that names the argument and echoes the value."""

from __future__ import annotations

import re
from collections.abc import Callable

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
    genome_from_json,
    make_family,
    mutate,
)

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

CASES: list[tuple[Callable[[], object], str]] = [
    (lambda: CellFamily(ops=("none", "conv")), "ops: unknown op 'conv' (known: ['avg_pool_3x3',"),
    (lambda: CellFamily(ops=("none",)), "ops: ['none'] has no usable op"),
    (lambda: CellFamily(ops=()), "ops: must not be empty"),
    (lambda: CellFamily(ops="skip_connect"), "ops: expected a list, got 'skip_connect'"),
    (lambda: CellFamily(nodes=9), "nodes: 9 is out of range [2, 8]"),
    (lambda: CellFamily(nodes="4"), "nodes: expected an integer, got '4'"),
    (lambda: MacroFamily(min_nodes=5, max_nodes=3), "min_nodes: 5 must be <= max_nodes (3)"),
    (lambda: MacroFamily(max_nodes=40), "max_nodes: 40 is out of range [1, 16]"),
    (lambda: MacroFamily(min_nodes=0), "min_nodes: 0 is out of range [1, 16]"),
    (
        lambda: MacroFamily(ops=("identity", "max_pool")),
        "ops: ['identity', 'max_pool'] has no usable op",
    ),
    (lambda: MacroFamily(ops=("conv", "sep_conv")), "ops: unknown op 'sep_conv'"),
    (lambda: MacroFamily(kernels=(3, 4)), "kernels: 4 must be odd"),
    (lambda: MacroFamily(widths=(0,)), "widths: 0 is out of range [1, 4096]"),
    (lambda: MacroFamily(max_inputs=9), "max_inputs: 9 is out of range [1, 4]"),
    (lambda: StackFamily(activations=("relu", "swish")), "activations: unknown activation 'swish'"),
    (lambda: StackFamily(dropouts=(0.0, 1.0)), "dropouts: 1.0 must be a number in [0, 1)"),
    (lambda: StackFamily(max_conv_layers=9), "max_conv_layers: 9 is out of range [0, 8]"),
    (lambda: StackFamily(widths=(8, 8)), "widths: choices must be distinct, got [8, 8]"),
    (
        lambda: make_family("tree"),
        "family: unknown genome family 'tree' (known: ['cell', 'macro', 'stack'])",
    ),
    (
        lambda: make_family("cell", node=4),
        "node: unknown key for a cell family (known: ['nodes', 'ops'])",
    ),
    (lambda: CellFamily().from_params({}), "genome.0->1: missing parameter"),
    (
        lambda: MacroFamily(max_nodes=8).from_params({"genome.nodes": 20}),
        "genome.nodes: 20 is out of range [1, 8]",
    ),
    (
        lambda: CellFamily().from_params(
            dict.fromkeys(
                [
                    "genome.0->1",
                    "genome.0->2",
                    "genome.1->2",
                    "genome.0->3",
                    "genome.1->3",
                    "genome.2->3",
                ],
                "conv",
            )
        ),
        "genome.0->1: 'conv' is not one of ['none',",
    ),
    (
        lambda: CellGenome(nodes=4, edges=("none",) * 6),
        "edges: no path from the input to the output",
    ),
    (
        lambda: CellGenome(nodes=3, edges=("skip_connect",) * 6),
        "edges: a 3-node cell has 3 edges, got 6",
    ),
    (
        lambda: MacroGenome(nodes=(MacroNode(op="identity", inputs=(1,)),)),
        "nodes: node 1 takes input 1, not an earlier node",
    ),
    (lambda: MacroNode(op="conv", inputs=(0,), kernel=3), "width: expected an integer, got None"),
    (
        lambda: MacroNode(op="identity", inputs=(0,), kernel=3),
        "kernel: op 'identity' takes no kernel, got 3",
    ),
    (
        lambda: Layer(kind="dense", width=8, kernel=3),
        "kernel: a dense layer takes no kernel or pool",
    ),
    (lambda: genome_from_json('{"family": "tree"}'), "family: unknown genome family 'tree'"),
    (
        lambda: genome_from_json(
            '{"family": "cell", "nodes": 2, "edges": ["skip_connect"], "x": 1}'
        ),
        "x: unknown key for a cell genome",
    ),
    (
        lambda: CellFamily(nodes=3).check(CellGenome(nodes=4, edges=("skip_connect",) * 6)),
        "genome: has 4 nodes, the family 3",
    ),
    (
        lambda: mutate(
            CellFamily(),
            CellGenome(nodes=4, edges=("skip_connect",) * 6),
            np.random.default_rng(0),
            kind="add",
        ),
        "kind: unknown mutation 'add' for a cell genome (known: ['op'])",
    ),
]


@pytest.mark.parametrize(
    ("make", "message"), CASES, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(CASES)]
)
def test_bad_input_raises_one_clear_line(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        make()
    assert "\n" not in str(info.value)
