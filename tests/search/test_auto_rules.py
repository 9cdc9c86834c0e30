"""``auto``'s order of kinds (issue 33): several objectives (two or more) first, then conditional
dimensions, then a genome under any name, else flat; and the strategy each kind runs."""

from __future__ import annotations

import pytest

import spaces
from search.strategies._auto import choose, space_kind

CELL = spaces.CellFamily()
FLAT = {"lr": spaces.Float(low=1e-4, high=1e-1, log=True)}
CONDITIONAL_GENOME = spaces.Space(
    {"genome": CELL, "algorithm": spaces.Categorical(("sync", "asgd")),
     "send_every": spaces.Int(low=1, high=8)},
    when={"send_every": {"algorithm": ["asgd"]}},
)


@pytest.mark.parametrize(("space", "directions", "kind", "strategy"), [
    (spaces.Space(FLAT), ["minimize"] * 3, "multi-objective", "tpe"),
    (CONDITIONAL_GENOME, ["maximize", "minimize"], "multi-objective", "tpe"),
    (CONDITIONAL_GENOME, ["maximize"], "conditional", "tpe"),  # before the genome
    (spaces.Space({**FLAT, "arch": CELL}), ["maximize"], "genome", "predictor"),
    (spaces.Space(FLAT), ["maximize"], "flat", "predictor"),
])
def test_the_kind_of_a_study_and_the_strategy_auto_runs_for_it(
    space: spaces.Space, directions: list[str], kind: str, strategy: str
) -> None:
    assert space_kind(space, directions) == kind
    assert choose(space, directions) == strategy  # docs/strategies.md, "Which strategy: auto"
