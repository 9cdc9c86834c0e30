"""Who decides and where it runs: study files, strategies, pruners, storage, the Dask driver
and the ``search`` command line.

>>> from search import parse_study
>>> parse_study({"name": "demo"}).strategy.name
'tpe'
"""

import importlib
from typing import Any

from search._errors import StudyError

# Imported on first use, so that `search --help` and the Dask workers load only what they need.
_LAZY = {
    "Driver": "search._driver",
    "RunCounts": "search._driver",
    "Pruned": "search._objectives",
    "open_study": "search._study",
    "StudyFile": "search._study_file",
    "load_study_file": "search._study_file",
    "parse_study": "search._study_file",
    "trials_frame": "search._frame",  # pandas
}

__all__ = [
    "Driver",
    "Pruned",
    "RunCounts",
    "StudyError",
    "StudyFile",
    "load_study_file",
    "open_study",
    "parse_study",
    "trials_frame",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'search' has no attribute {name!r}")
