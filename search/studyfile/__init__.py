"""The study file: its pydantic model, sections and ``[space]`` table, and every check made before
anything is written.
May import pydantic, ``spaces``, ``training.contract``, ``search.strategies``,
``search.clusters``, ``search.backends`` and ``search._errors``.
"""

import importlib
from typing import Any

# Imported on first use (like search/__init__), so that importing one module of this folder
# loads only what that module needs.
_LAZY = {
    "StudyFile": "search.studyfile._study_file",
    "parse_study": "search.studyfile._study_file",
    "load_study_file": "search.studyfile._study_file",
    "build_space": "search.studyfile._space_table",
    "Budget": "search.studyfile._sections",
    "Strategy": "search.studyfile._sections",
    "Pruner": "search.studyfile._sections",
    "Cluster": "search.studyfile._sections",
    "Launcher": "search.studyfile._sections",
    "Checkpoints": "search.studyfile._sections",
    "WarmSource": "search.studyfile._sections",
}

__all__ = [
    "Budget",
    "Checkpoints",
    "Cluster",
    "Launcher",
    "Pruner",
    "Strategy",
    "StudyFile",
    "WarmSource",
    "build_space",
    "load_study_file",
    "parse_study",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
