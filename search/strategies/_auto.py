"""``strategy = "auto"``: the strategy picked by the space and the objectives, so the user
need not choose. What each kind of study gets, and the measurements behind it, are in
docs/strategies.md ("Which strategy: auto").

>>> import spaces
>>> flat = spaces.Space({"lr": spaces.Float(low=1e-4, high=1e-1, log=True)})
>>> space_kind(flat, ["minimize"]), space_kind(flat, ["minimize", "minimize"])
('flat', 'multi-objective')
"""

from __future__ import annotations

import spaces

AUTO = "auto"
# What `auto` picks, by the space (benchmarks/flat.py, benchmarks/nb201.py; docs/strategies.md).
AUTO_CHOICES = {
    "multi-objective": "tpe",  # Optuna's multi-objective TPE; the model-based ones take one
    "conditional": "tpe",  # grouped TPE samples each condition's dimensions as one group
    "genome": "predictor",  # best on NAS-Bench-201 (all three datasets, 8 running too)
    # benchmarks/results/flat.json; ~9 ms per proposal at 10,000 trials (gp: ~210 ms)
    "flat": "predictor",
}


def space_kind(space: spaces.Space, directions: list[str]) -> str:
    """Which of :data:`AUTO_CHOICES` a study is: several objectives first, then a space with
    conditional dimensions (``when``), then one with a genome, else a flat space."""
    if len(directions) > 1:
        return "multi-objective"
    if any(space.condition(n) for n in space):
        return "conditional"
    if any(isinstance(space[n], spaces.GenomeFamily) for n in space):
        return "genome"
    return "flat"


def choose(space: spaces.Space, directions: list[str]) -> str:
    """The strategy ``auto`` runs for this space and these objectives."""
    return AUTO_CHOICES[space_kind(space, directions)]
