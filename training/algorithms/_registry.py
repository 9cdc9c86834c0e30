"""The one list of distributed algorithms, by the name a study file uses, and their factory.

Importing this module imports neither torch nor MPI (the driver reads the names); an
algorithm's module is imported when the algorithm is made.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> "module:class". The order is the one docs and error messages list them in.
ALGORITHMS: dict[str, str] = {
    "sync": "training.algorithms._sync:SyncSGD",
    "asgd": "training.algorithms._asgd:ASGD",
    "simuparallel": "training.algorithms._baselines:SimuParallelSGD",
    "localsgd": "training.algorithms._baselines:LocalSGD",
    "batch": "training.algorithms._baselines:BatchGD",
}


def algorithm_class(name: str) -> type:
    try:
        module, cls = ALGORITHMS[name].split(":")
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r} (known: {', '.join(ALGORITHMS)})") from None
    found: type = getattr(importlib.import_module(module), cls)
    return found


def make_algorithm(name: str, model: Any, comm: Any, **options: object) -> Any:
    """An instance of the algorithm ``name`` (a :class:`training.algorithms.Algorithm`)."""
    return algorithm_class(name)(model, comm, **options)
