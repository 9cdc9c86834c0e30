"""Pruners Optuna lacks: promotion (ASHA/Hyperband that pause and resume, their rung values kept
in an index), Egele's top-half rule, dominated epoch vectors, and the replay of recorded curves.
May import optuna, ``training.contract`` and ``search._errors``; no other folder of ``search``.
"""

import importlib
from typing import Any

# Imported on first use (like search/__init__), so that importing one module of this folder
# loads only what that module needs.
_LAZY = {
    "PromotingHalving": "search.pruners._promotion",
    "hyperband_brackets": "search.pruners._promotion",
    "TopHalfPruner": "search.pruners._top_half",
    "DominatedPruner": "search.pruners._dominated",
    "ReplayRun": "search.pruners._replay",
    "replay": "search.pruners._replay",
}

__all__ = [
    "DominatedPruner",
    "PromotingHalving",
    "ReplayRun",
    "TopHalfPruner",
    "hyperband_brackets",
    "replay",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
