"""Structured pruning during training: ``[training] prune`` (validated, torch-free), the units
chosen by an importance agreed over ranks and removed (any model: Torch-Pruning's dependency
graph finds what is coupled), and what is rebuilt after a prune.
Add a pruning criterion here. The settings need no torch; the rest loads it on first use.
"""

from training._lazy import lazy
from training.pruning._config import (
    SEARCHABLE_PRUNE,
    PruneConfig,
    apply_prune_params,
    field_of,
)

__getattr__ = lazy(__name__, {
    "PruneError": "_graph",
    "Graph": "_graph",
    "UnitPruning": "_units",
    "rebuild": "_rebuild",
    "step_at": "_rebuild",
})

__all__ = [
    "SEARCHABLE_PRUNE", "Graph", "PruneConfig", "PruneError", "UnitPruning",
    "apply_prune_params", "field_of", "rebuild", "step_at",
]
