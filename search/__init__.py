"""Who decides and where it runs: study files, strategies, pruners, storage, the Dask driver
and the ``search`` command line.

Where things are (one folder per thing a contributor adds; its ``__init__`` says more):
``studyfile/`` the study file and its checks; ``strategies/`` the samplers and the registry of
strategy and pruner names; ``pruners/`` the pruners Optuna lacks; ``backends/`` what runs one
trial on a Dask worker; ``clusters/`` cluster plans, remote backends and the watch;
``simulated/`` table objectives and the simulated clock; ``driver/`` a study's life and ``search
run``; ``analysis/`` frames, figures, the report, export; ``storage/`` opening a study for the
commands that read one; ``cli.py`` the ``search`` command.

>>> from search import parse_study
>>> parse_study({"name": "demo"}).strategy.name
'tpe'
"""

import importlib
from typing import Any

from search._errors import StudyError

# Imported on first use, so that `search --help` and the Dask workers load only what they need.
_LAZY = {
    "Driver": "search.driver._driver",
    "RunCounts": "search.driver._driver",
    "Pruned": "search.backends._objectives",
    "open_study": "search.driver._study",
    "StudyFile": "search.studyfile._study_file",
    "load_study_file": "search.studyfile._study_file",
    "parse_study": "search.studyfile._study_file",
    "trials_frame": "search.analysis._frame",  # pandas
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
