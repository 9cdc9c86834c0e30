"""Opening a study in its Optuna storage for the commands that read one (status, best, report,
dashboard, export).
May import optuna, ``training.contract``, ``search.studyfile`` and ``search._errors``.
"""

import importlib
from typing import Any

# Imported on first use (like search/__init__), so that importing one module of this folder
# loads only what that module needs.
_LAZY = {
    "DEFAULT_STORAGE": "search.storage._reading",
    "default_storage": "search.storage._reading",
    "open_url": "search.storage._reading",
    "load": "search.storage._reading",
    "reading": "search.storage._reading",
    "writable": "search.storage._reading",
}

__all__ = [
    "DEFAULT_STORAGE",
    "default_storage",
    "load",
    "open_url",
    "reading",
    "writable",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
