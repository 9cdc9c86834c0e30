"""Dask clusters per backend: what every plan shares, the local plan, the remote backends (SLURM,
PBS, Kubernetes, cloud), the registry of backends and the watch on delivery.
May import dask, ``training.launch``, ``search.backends`` (worker preloads, by name) and
``search._errors``.
"""

import importlib
from typing import Any

# Imported on first use (like search/__init__), so that importing one module of this folder
# loads only what that module needs.
_LAZY = {
    "MPI": "search.clusters._base",
    "Adapt": "search.clusters._base",
    "Backend": "search.clusters._base",
    "ClusterPlan": "search.clusters._base",
    "BACKENDS": "search.clusters._plans",
    "plan_cluster": "search.clusters._plans",
    "check_backend_options": "search.clusters._plans",
    "ClusterFailed": "search.clusters._watch",
    "ClusterHandle": "search.clusters._watch",
}

__all__ = [
    "Adapt",
    "BACKENDS",
    "Backend",
    "ClusterFailed",
    "ClusterHandle",
    "ClusterPlan",
    "MPI",
    "check_backend_options",
    "plan_cluster",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
