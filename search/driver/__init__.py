"""A study's life: open or resume it, warm starts, the Dask driver loop and its outcomes, promoted
segments, the cluster of a run, and ``search run`` itself.
May import every folder below it (pruners, simulated, strategies, backends, clusters, analysis,
studyfile, storage).
"""

import importlib
from typing import Any

# Imported on first use (like search/__init__), so that importing one module of this folder
# loads only what that module needs.
_LAZY = {
    "Driver": "search.driver._driver",
    "RunCounts": "search.driver._outcomes",
    "open_study": "search.driver._study",
    "requeue": "search.driver._study",
    "recover_orphans": "search.driver._study",
    "load_sources": "search.driver._warm_start",
    "open_cluster": "search.driver._open_cluster",
    "check_cluster": "search.driver._open_cluster",
    "plan_run": "search.driver._run",
    "run": "search.driver._run",
}

__all__ = [
    "Driver",
    "RunCounts",
    "check_cluster",
    "load_sources",
    "open_cluster",
    "open_study",
    "plan_run",
    "recover_orphans",
    "requeue",
    "run",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
