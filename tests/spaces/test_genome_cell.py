"""Cells express NAS-Bench-201 exactly: 4 nodes, 6 edges in its order, its 5 ops."""

from __future__ import annotations

import itertools

import numpy as np
import optuna
import pytest

from spaces import NB201_OPS, CellFamily, CellGenome, cell_edges, mutate

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

ARCH = (
    "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|"
    "+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"
)


def test_defaults_are_the_nas_bench_201_space() -> None:
    family = CellFamily()
    assert family.nodes == 4 and family.ops == NB201_OPS
    assert NB201_OPS == ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
    assert cell_edges(4) == [(0, 1), (0, 2), (1, 2), (0, 3), (1, 3), (2, 3)]
    trial = optuna.create_study().ask()
    family.suggest(trial)
    assert sorted(trial.params) == sorted(f"genome.{i}->{j}" for i, j in cell_edges(4))
    assert all(trial.distributions[name].choices == NB201_OPS for name in trial.params)


def test_nb201_string_round_trip_in_edge_order() -> None:
    genome = CellGenome.from_nb201_string(ARCH)
    assert genome.edges == (
        "nor_conv_3x3",
        "nor_conv_3x3",
        "avg_pool_3x3",
        "skip_connect",
        "nor_conv_3x3",
        "skip_connect",
    )
    assert genome.to_nb201_string() == ARCH
    assert (
        genome.summary()
        == "cell 4 nodes: 1=conv3(0) 2=conv3(0)+avgpool3(1) 3=skip(0)+conv3(1)+skip(2)"
    )


def test_every_nb201_parameter_point_decodes_to_a_valid_cell() -> None:
    """All 15,625 points of the grid decode; the 341 without an input -> output path are repaired
    (edge 0 -> 3 set to skip_connect); the rest decode unchanged into 8,764 distinct networks
    (graph isomorphism, irrelevant edges ignored)."""
    family = CellFamily()
    names = [f"genome.{i}->{j}" for i, j in cell_edges(4)]
    repaired, keys = 0, set()
    for ops in itertools.product(NB201_OPS, repeat=6):
        genome = family.from_params(dict(zip(names, ops, strict=True)))
        repaired += genome.edges != ops
        keys.add(genome.key)
    assert repaired == 341
    assert len(keys) == 8764


def test_irrelevant_edges_and_swapped_inner_nodes_do_not_change_the_key() -> None:
    a = CellGenome.from_nb201_string(
        "|nor_conv_3x3~0|+|nor_conv_1x1~0|none~1|+|none~0|skip_connect~1|avg_pool_3x3~2|"
    )
    swapped = CellGenome.from_nb201_string(
        "|nor_conv_1x1~0|+|nor_conv_3x3~0|none~1|+|none~0|avg_pool_3x3~1|skip_connect~2|"
    )
    assert a == swapped and a.key == swapped.key
    # Node 1 is fed by nothing (only 'none' into it): its outgoing conv carries no signal.
    b = CellGenome.from_nb201_string(
        "|none~0|+|skip_connect~0|nor_conv_3x3~1|+|none~0|none~1|skip_connect~2|"
    )
    c = CellGenome.from_nb201_string(
        "|none~0|+|skip_connect~0|none~1|+|none~0|none~1|skip_connect~2|"
    )
    assert b == c
    assert a != b


def test_mutation_never_disconnects_the_only_path() -> None:
    only_path = CellGenome.from_nb201_string(
        "|none~0|+|none~0|none~1|+|nor_conv_3x3~0|none~1|none~2|"
    )
    rng = np.random.default_rng(0)
    for _ in range(200):
        child = mutate(CellFamily(), only_path, rng)
        assert child != only_path
