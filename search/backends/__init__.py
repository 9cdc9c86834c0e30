"""What executes one trial on a Dask worker: the MPI job (``training.launch``), a Python function
objective, or a table objective from ``search.simulated`` (by name).
May import ``training.launch``, ``training.contract``, ``search.simulated`` and
``search._errors``.
"""

import importlib
from typing import Any

# Imported on first use (like search/__init__), so that importing one module of this folder
# loads only what that module needs.
_LAZY = {
    "Pruned": "search.backends._objectives",
    "BENCHMARKS": "search.backends._objectives",
    "check_objective": "search.backends._objectives",
    "is_benchmark": "search.backends._objectives",
    "run_function_trial": "search.backends._objectives",
    "run_trial_on_worker": "search.backends._dask",
}

__all__ = [
    "BENCHMARKS",
    "Pruned",
    "check_objective",
    "is_benchmark",
    "run_function_trial",
    "run_trial_on_worker",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
