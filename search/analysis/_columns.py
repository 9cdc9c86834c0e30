"""Which columns a study's trials have, and how they are printed.

A trial is one of three things, and only its own columns are true of it:

- ``training``: an MPI training job (a study file with no ``objective``): epochs, ranks,
  algorithm, wall time and rank-seconds (``wall_time_s * ranks``, the compute it cost).
- ``table``: a benchmark table answers (``objective = "nb201:cifar10"``): no ranks, no
  algorithm, no epochs; its cost is the table's training time, ``sim_time_s`` (the lookup itself
  takes microseconds, which says nothing).
- ``function``: a Python function (``objective = "pkg.mod:function"``): one process, no ranks or
  algorithm; steps it reported and its wall time.

Studies that ``search run`` did not make are ``other``: they show what their trials carry.

>>> format_seconds(0.0001807), format_seconds(4.021), format_seconds(2233.4)
('<0.01', '4.02', '2,233')
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import optuna

from search.backends._objectives import is_benchmark

KINDS = ("training", "table", "function", "other")

# Per kind: the trial columns worth a glance beside the values and parameters (best-trial
# tables of `search report` and `search best`), in this order, where a trial has them.
SUMMARY: dict[str, tuple[str, ...]] = {
    "training": ("genome_summary", "test_accuracy", "epochs", "ranks", "hosts", "algorithm",
                 "rank_seconds"),
    "table": ("genome_summary", "n_params", "sim_time_s"),
    "function": ("genome_summary", "steps", "wall_time_s"),
    "other": ("genome_summary", "test_accuracy", "epochs", "ranks", "hosts", "algorithm",
              "rank_seconds"),
}

# What a trial's compute is called, per kind (anytime curves, quality-against-cost plots).
COST_LABEL = {
    "training": "rank-seconds",
    "table": "simulated training seconds",
    "function": "wall seconds",
    "other": "rank-seconds",
}


# The trial column that holds that compute, per kind.
COST_COLUMN = {
    "training": "rank_seconds",
    "table": "sim_time_s",
    "function": "wall_time_s",
    "other": "rank_seconds",
}


def study_config(study: optuna.Study) -> dict[str, Any]:
    """The validated study file ``search run`` stored with the study ({} for other studies)."""
    config = study.user_attrs.get("detol:study")
    return config if isinstance(config, dict) else {}


def objective_kind(study: optuna.Study) -> str:
    """``training``, ``table``, ``function`` or ``other`` (see the module docstring).

    >>> import optuna
    >>> s = optuna.create_study()
    >>> objective_kind(s)
    'other'
    >>> s.set_user_attr("detol:study", {"objective": "nb201:cifar10"})
    >>> objective_kind(s)
    'table'
    """
    config = study_config(study)
    if not config:
        return "other"
    objective = config.get("objective")
    if objective is None or str(objective).startswith("mpi:"):  # built-in trainer, own loop
        return "training"
    return "table" if is_benchmark(str(objective)) else "function"


def cost_label(kinds: set[str]) -> str:
    """The name of the compute axis for studies of these kinds."""
    labels = {COST_LABEL[k] for k in kinds}
    if len(labels) == 1:
        return labels.pop()
    return "compute seconds (" + ", ".join(f"{k}: {COST_LABEL[k]}" for k in sorted(kinds)) + ")"


def format_seconds(value: Any) -> str:
    """Seconds to a sensible precision: ``<0.01``, ``0.43``, ``4.02``, ``61.3``, ``2,233``."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(v):
        return ""
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    if abs(v) >= 0.01 or v == 0:
        return f"{v:.2f}"
    return "<0.01"


def format_total(seconds: float) -> str:
    """A total time: ``57,082 s (15.9 h)``, ``0.19 s``."""
    text = f"{format_seconds(seconds)} s"
    return f"{text} ({seconds / 3600:.1f} h)" if seconds >= 3600 else text


def is_seconds(column: str) -> bool:
    return column.endswith("_s") or column == "rank_seconds"


def format_cell(column: str, value: Any) -> str:
    """One table cell: seconds by :func:`format_seconds`, whole numbers in full (``10,690``),
    other numbers to 4 significant digits, NaN and None empty."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    if column == "number":  # a trial number is a name, not a quantity
        return str(int(float(value)))
    if is_seconds(column):
        return format_seconds(value)
    v = float(value)
    if v.is_integer() and abs(v) < 1e15:
        return f"{int(v):,}" if abs(v) >= 10_000 else str(int(v))
    return f"{v:.4g}"
