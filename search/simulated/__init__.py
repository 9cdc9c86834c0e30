"""Objectives answered without training: the NAS-Bench-201 table, the flat HPOLib and HPOBench-nn
tables, the synthetic workload, and the simulated clock the driver advances.
May import optuna, dask, numpy, ``spaces`` and ``search._errors``; no other folder of
``search``.
"""

import importlib
from typing import Any

# Imported on first use (like search/__init__), so that importing one module of this folder
# loads only what that module needs.
_LAZY = {
    "SimClock": "search.simulated._clock",
    "EventQueue": "search.simulated._clock",
    "default_clock": "search.simulated._clock",
    "driver_bound": "search.simulated._clock",
    "Workload": "search.simulated._workload",
    "WORKLOADS": "search.simulated._workload",
    "mean_accuracy": "search.simulated._nb201",
    "random_search_expectation": "search.simulated._nb201",
}

__all__ = [
    "EventQueue",
    "SimClock",
    "WORKLOADS",
    "Workload",
    "default_clock",
    "driver_bound",
    "mean_accuracy",
    "random_search_expectation",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
