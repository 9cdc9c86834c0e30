"""Reading finished studies: trial frames, columns, figures (history, map, importance, genomes),
the HTML report, tables, export and the notebooks' helpers.
May import optuna, pandas, plotly, ``spaces``, ``training.contract``, ``search.backends`` and
``search._errors``.
"""

import importlib
from typing import Any

# Imported on first use (like search/__init__), so that importing one module of this folder
# loads only what that module needs.
_LAZY = {
    "trials_frame": "search.analysis._frame",
    "anytime_frame": "search.analysis._frame",
    "objective_names": "search.analysis._frame",
    "study_panels": "search.analysis._figures",
    "param_importances": "search.analysis._importance",
    "map_figure": "search.analysis._map",
    "write_report": "search.analysis._report",
    "render_report": "search.analysis._report",
    "best_table": "search.analysis._tables",
    "status_table": "search.analysis._tables",
    "export_study": "search.analysis._export",
    "load_study": "search.analysis._notebook",
    "load_studies": "search.analysis._notebook",
    "static_images": "search.analysis._notebook",
}

__all__ = [
    "anytime_frame",
    "best_table",
    "export_study",
    "load_studies",
    "load_study",
    "map_figure",
    "objective_names",
    "param_importances",
    "render_report",
    "static_images",
    "status_table",
    "study_panels",
    "trials_frame",
    "write_report",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
