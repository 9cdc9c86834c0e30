"""Parameter importances, computed the way optuna-dashboard computes them, so that the report,
the notebooks and ``search dashboard`` show the same numbers.

optuna-dashboard (``optuna_dashboard/_importance.py``) calls
``optuna.importance.get_param_importances`` with a default ``PedAnovaImportanceEvaluator()`` on
the complete trials, one objective at a time, negating a maximised objective (PED-ANOVA counts
low values as good). PED-ANOVA asks how differently each parameter is distributed among the best
10% of the complete trials than among all of them; it is deterministic (no random forest, no
seed), so there is no spread to report. fANOVA, which this report used before, fits a random
forest to all trials and answers another question (how much of the value's variance a parameter
explains); on small studies the two can rank parameters differently.
"""

from __future__ import annotations

import math
import warnings

import optuna
import plotly.graph_objects as go
from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from search.analysis._frame import objective_names
from search.analysis._plotting import CannotDraw, Panel, style

METHOD = "PED-ANOVA, as in optuna-dashboard"
TARGET_QUANTILE = 0.1  # PedAnovaImportanceEvaluator's default, which the dashboard keeps
_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def _searched(trials: list[FrozenTrial]) -> list[str]:
    names: dict[str, None] = {}
    for t in trials:
        names.update(dict.fromkeys(t.params))
    return list(names)


def param_importances(study: optuna.Study) -> list[dict[str, float]]:
    """Per objective, parameter -> importance (summing to 1), as optuna-dashboard computes them.

    Raises :class:`CannotDraw` with fewer than 2 complete trials or no searched parameter.
    """
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    params = _searched(complete)
    if len(complete) < 2 or not params:
        raise CannotDraw(f"parameter importances need at least 2 complete trials and 1 searched "
                         f"parameter (the study has {len(complete)} complete trial(s), "
                         f"{len(params)} parameter(s))")
    found = []
    for i, direction in enumerate(study.directions):
        sign = -1.0 if direction == StudyDirection.MAXIMIZE else 1.0

        def target(t: FrozenTrial, i: int = i, sign: float = sign) -> float:
            return sign * float(t.values[i])

        with warnings.catch_warnings():
            # The target is already negated for a maximised objective (as the dashboard does).
            warnings.filterwarnings("ignore", message="PedAnovaImportanceEvaluator computes the "
                                    "importances of params to achieve low `target` values.*")
            try:
                importance = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator(),
                                                   target=target)
            except (ValueError, RuntimeError, ZeroDivisionError) as exc:
                raise CannotDraw(f"parameter importances could not be computed: {exc}") from None
        found.append({k: float(v) for k, v in importance.items()})
    if not any(found):
        raise CannotDraw("no parameter is present in every complete trial")
    return found


def importance_figure(study: optuna.Study) -> go.Figure:
    """Horizontal bars, one per parameter (one colour per objective), most important on top."""
    found = param_importances(study)
    names = objective_names(study)
    order = sorted(found[0], key=lambda p: found[0][p])
    fig = go.Figure()
    for i, (name, importance) in enumerate(zip(names, found, strict=True)):
        fig.add_trace(go.Bar(
            x=[importance.get(p, 0.0) for p in order], y=order, orientation="h", name=name,
            marker_color=_COLORS[i % len(_COLORS)], showlegend=len(names) > 1,
            text=[f"{importance.get(p, 0.0):.2f}" for p in order], textposition="outside",
            hovertemplate=f"%{{y}}: %{{x:.3f}} for {name}<extra></extra>",
        ))
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="importance (PED-ANOVA)", rangemode="tozero")
    return style(fig, f"Parameter importances ({METHOD})",
                 height=max(320, 60 + 34 * len(order) * len(names)))


def importance_note(study: optuna.Study) -> str:
    """How to read the importances: the method and how many trials they rest on."""
    n = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    top = max(1, math.ceil(TARGET_QUANTILE * n))
    note = (f"{METHOD}: how differently each parameter is distributed among the best 10% of the "
            f"complete trials ({top} of {n}) than among all of them; deterministic (no seed, no "
            "spread)")
    if top < 5:
        note += "; fewer than 5 trials in the best 10%: a rough guide only"
    return note


def importance_panel(study: optuna.Study) -> Panel:
    title = "Parameter importances"
    try:
        return Panel("importance", title, importance_figure(study), importance_note(study))
    except CannotDraw as exc:
        return Panel("importance", title, None, str(exc))
