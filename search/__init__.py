"""Who decides and where it runs: study files, strategies, pruners, storage, the Dask driver
and the ``search`` command line.

>>> from search import parse_study
>>> parse_study({"name": "demo"}).strategy.name
'tpe'
"""

from typing import Any

from search._driver import Driver, RunCounts
from search._errors import StudyError
from search._objectives import Pruned
from search._study import open_study
from search._study_file import StudyFile, load_study_file, parse_study

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
    # pandas and plotly load only when the analysis API is used (not on Dask workers or
    # `search run`).
    if name == "trials_frame":
        from search._frame import trials_frame

        return trials_frame
    raise AttributeError(f"module 'search' has no attribute {name!r}")
