"""Re-exports that load their module on first use: a package's ``__init__`` names its public
surface without importing torch or mpi4py until a name that needs them is asked for (the driver
imports these packages, and never torch).

>>> import training.algorithms as algorithms
>>> "ASGD" in algorithms.__all__ and "torch" not in dir(algorithms)
True
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy(package: str, where: dict[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package``: ``where`` maps a name to its private module
    (``{"ASGD": "_asgd"}``), imported when the name is first read."""

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
