"""A study as figures: what ``search report`` and the notebooks in ``notebooks/`` show (the
table of trials is :mod:`search.analysis._frame`'s, re-exported here for the notebooks).

Everything here reads storage only, through plain Optuna. A figure that cannot be drawn (too few
trials, no parameters, a single objective for a Pareto front, a table objective's learning
curves) comes back as a :class:`Panel` with a note that says why, never as an exception.

>>> import optuna
>>> study = optuna.create_study()
>>> study.optimize(lambda t: t.suggest_float("x", -1, 1) ** 2, n_trials=3)
>>> trials_frame(study)[["number", "state", "value", "params_x"]].shape
(3, 4)
>>> [p.key for p in study_panels(study)]
['history', 'curves', 'parallel', 'importance', 'map']
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import optuna
import plotly.colors
import plotly.graph_objects as go
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState
from plotly.subplots import make_subplots

import spaces
from search.analysis._columns import cost_label, objective_kind, study_config
from search.analysis._frame import (
    anytime_bands,
    anytime_frame,
    objective_names,
    strategy_of,
    trials_frame,
)
from search.analysis._genome_drawing import GenomeGraph, draw_genome, genome_graph
from search.analysis._importance import importance_figure, importance_panel, param_importances
from search.analysis._map import map_figure, map_panel
from search.analysis._plotting import TEMPLATE, CannotDraw, Panel
from search.analysis._plotting import style as _style

__all__ = [
    "TEMPLATE", "CannotDraw", "GenomeGraph", "Panel", "anytime_bands", "anytime_frame",
    "comparable", "compare_figure", "curves_figure", "draw_genome", "genome_figure",
    "genome_graph", "history_figure", "importance_figure", "map_figure", "objective_names",
    "other_studies",
    "parallel_figure", "param_importances", "pareto_figure", "strategy_of", "study_config",
    "study_panels", "trials_frame",
]

STATE_STYLE: dict[str, dict[str, Any]] = {  # learning curves: how each trial state is drawn
    "COMPLETE": {"color": "#1f77b4", "dash": "solid", "width": 1.5},
    "PRUNED": {"color": "#ff7f0e", "dash": "dash", "width": 1.5},
    "FAIL": {"color": "#7f7f7f", "dash": "dot", "width": 1},
    "RUNNING": {"color": "#9467bd", "dash": "solid", "width": 1},
}
BEST_COLOR = "#2ca02c"
MAX_PARALLEL_PARAMS = 8
# Parallel coordinates, worst (0) to best (1): plasma without its two yellows, so that the worst
# trials still show on a white page and the best are the darkest (#0d0887 on white: 14:1).
PARALLEL_SCALE: list[str] = list(reversed(plotly.colors.sequential.Plasma[:8]))


def _number(value: float) -> str:
    """``0.9896``, ``10,690`` (whole numbers such as parameter counts in full)."""
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


# --- one study's figures -----------------------------------------------------------------------


def _complete(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def history_figure(study: optuna.Study) -> go.Figure:
    """Objective value of every complete trial by trial number (best so far for one objective)."""
    complete = _complete(study)
    if not complete:
        raise CannotDraw("no complete trial yet")
    names = objective_names(study)
    if len(names) == 1:
        fig = optuna.visualization.plot_optimization_history(study, target_name=names[0])
        return _style(fig, "Optimisation history")
    front = {t.number for t in study.best_trials}
    fig = make_subplots(rows=len(names), cols=1, shared_xaxes=True, vertical_spacing=0.06)
    for i, name in enumerate(names):
        for on_front in (False, True):
            ts = [t for t in complete if (t.number in front) == on_front]
            fig.add_trace(go.Scatter(
                x=[t.number for t in ts], y=[t.values[i] for t in ts], mode="markers",
                name="Pareto front" if on_front else "dominated", legendgroup=str(on_front),
                showlegend=i == 0, marker={"color": BEST_COLOR if on_front else "#1f77b4",
                                           "size": 8 if on_front else 6},
                hovertemplate=f"trial %{{x}}<br>{name} %{{y:.4g}}<extra></extra>",
            ), row=i + 1, col=1)
        fig.update_yaxes(title_text=name, row=i + 1, col=1)
    fig.update_xaxes(title_text="trial", row=len(names), col=1)
    return _style(fig, "Optimisation history", height=max(420, 260 * len(names)))


def _curve(trial: FrozenTrial, metric: str) -> list[tuple[int, float]]:
    """Per-epoch values: the reported intermediate values, else the stored training history."""
    if trial.intermediate_values:
        return sorted(trial.intermediate_values.items())
    history = trial.user_attrs.get("history")
    if not isinstance(history, list):
        return []
    return [(int(row["epoch"]), float(row[metric])) for row in history
            if isinstance(row, dict) and "epoch" in row and row.get(metric) is not None]


def _best_trial(study: optuna.Study, keep: Callable[[FrozenTrial], bool] = lambda t: True,
                ) -> FrozenTrial | None:
    """Single objective: the best complete trial that ``keep`` accepts. Several objectives: the
    Pareto-front member best on the first objective (else the best on the first objective)."""
    complete = [t for t in _complete(study) if keep(t)]
    if not complete:
        return None
    sign = -1.0 if study.directions[0] == StudyDirection.MAXIMIZE else 1.0
    if len(study.directions) > 1:
        front = {t.number for t in study.best_trials}
        complete = [t for t in complete if t.number in front] or complete
    return min(complete, key=lambda t: sign * float(t.values[0]))


def curves_figure(study: optuna.Study) -> go.Figure:
    """Learning curves of every trial (per epoch; per step for a function objective); pruned ones
    dashed and ending in a cross where they were stopped, the best trial in green."""
    kind = objective_kind(study)
    if kind == "table":
        raise CannotDraw("a benchmark table answers each trial with its final value only: "
                         "there are no per-epoch values to draw")
    unit = "step" if kind == "function" else "epoch"
    names = objective_names(study)
    reported = any(t.intermediate_values for t in study.get_trials(deepcopy=False))
    metric = names[0] if (reported or names[0] != "n_params") else "val_accuracy"
    if not reported and len(names) > 1:
        metric = next((n for n in names if n in ("val_accuracy", "val_loss", "train_loss")),
                      "val_accuracy")
    best = _best_trial(study)
    fig = go.Figure()
    shown: set[str] = set()
    drawn = 0
    for t in study.get_trials(deepcopy=False):
        points = _curve(t, metric)
        if not points:
            continue
        drawn += 1
        state = t.state.name if t.state.name in STATE_STYLE else "FAIL"
        style = STATE_STYLE[state]
        is_best = best is not None and t.number == best.number
        x, y = zip(*points, strict=True)
        cut = state in ("PRUNED", "FAIL")
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="lines+markers" if cut else "lines",
            line={"color": BEST_COLOR if is_best else style["color"], "dash": style["dash"],
                  "width": 3 if is_best else style["width"]},
            marker={"symbol": ["circle"] * (len(x) - 1) + ["x-thin-open" if cut else "circle"],
                    "size": [0] * (len(x) - 1) + [11], "line": {"width": 2}},
            name=f"best (trial {t.number})" if is_best else state.lower(),
            legendgroup="best" if is_best else state,
            showlegend=is_best or state not in shown,
            hovertemplate=f"trial {t.number} ({state.lower()})<br>{unit} %{{x}}<br>"
                          f"{metric} %{{y:.4g}}<extra></extra>",
        ))
        shown.add(state)
    if not drawn:
        hint = " (an objective reports them through its report argument)" \
            if kind == "function" else ""
        raise CannotDraw(f"no trial has reported a per-{unit} value yet{hint}")
    fig.update_xaxes(title_text=unit)
    fig.update_yaxes(title_text=metric)
    return _style(fig, f"Learning curves (pruned trials end in a cross at the {unit} they were "
                       "stopped)")


def _searched_params(trials: Sequence[FrozenTrial]) -> list[str]:
    names: dict[str, None] = {}
    for t in trials:
        names.update(dict.fromkeys(t.params))
    return list(names)


def parallel_figure(study: optuna.Study) -> go.Figure:
    """Parallel coordinates of the searched parameters (plain ones first, then the genome's
    decisions that every trial made) against the first objective."""
    complete = _complete(study)
    if not complete:
        raise CannotDraw("no complete trial yet")
    params = _searched_params(complete)
    if not params:
        raise CannotDraw("the study searches no parameters")
    # Optuna leaves out a trial that lacks one of the axes: conditional (genome) parameters
    # become axes only when every complete trial has them.
    everywhere = [p for p in params if all(p in t.params for t in complete)]
    plain = [p for p in everywhere if not p.startswith("genome.")]
    chosen = ([*plain, *(p for p in everywhere if p.startswith("genome."))]
              or params)[:MAX_PARALLEL_PARAMS]
    name = objective_names(study)[0]
    fig = optuna.visualization.plot_parallel_coordinate(
        study, params=chosen, target=lambda t: t.values[0], target_name=name)
    _recolour(fig, maximize=study.directions[0] == StudyDirection.MAXIMIZE)
    return _style(fig, f"Parallel coordinates ({name})", height=460)


def _recolour(fig: go.Figure, *, maximize: bool) -> None:
    """Colour Optuna's parallel-coordinate lines by :data:`PARALLEL_SCALE`, best darkest, widest
    and on top. (Optuna's Blues scale, reversed for a custom target, draws the best trials of a
    maximised objective near-white on the white page.)

    Optuna draws one line per trial whose first point is the objective, scaled to [0, 1] (0.5
    when all values are equal); its last trace carries the colour bar.
    """
    scale = plotly.colors.make_colorscale(PARALLEL_SCALE)
    lines, rest = [], []
    for trace in fig.data:
        y = trace.y
        if trace.mode == "lines" and y is not None and len(y) > 1 and y[0] is not None:
            lines.append((float(y[0]) if maximize else 1.0 - float(y[0]), trace))
        else:
            rest.append(trace)
    for goodness, trace in lines:
        trace.line.color = plotly.colors.sample_colorscale(scale, [goodness])[0]
        trace.line.width = 1.0 + 1.5 * goodness
        trace.opacity = 0.6 + 0.35 * goodness
    for trace in rest:
        if trace.marker is not None and trace.marker.colorscale is not None:
            trace.marker.colorscale = scale
            trace.marker.reversescale = not maximize  # the best value (cmin) is the dark end
    lines.sort(key=lambda pair: pair[0])  # the best drawn last, on top
    fig.data = tuple(trace for _, trace in lines) + tuple(rest)


def pareto_figure(study: optuna.Study) -> go.Figure:
    names = objective_names(study)
    if len(names) not in (2, 3):
        raise CannotDraw(f"a Pareto front is drawn for 2 or 3 objectives; this study has "
                         f"{len(names)}")
    if not _complete(study):
        raise CannotDraw("no complete trial yet")
    fig = optuna.visualization.plot_pareto_front(study, target_names=names)
    return _style(fig, "Pareto front", height=480)


def genome_figure(study: optuna.Study) -> go.Figure:
    best = _best_trial(study, lambda t: "genome" in t.user_attrs)
    if best is None:
        raise CannotDraw("no complete trial has a genome yet")
    try:
        genome = spaces.genome_from_json(str(best.user_attrs["genome"]))
    except (ValueError, json.JSONDecodeError) as exc:
        raise CannotDraw(f"trial {best.number}'s genome cannot be read: {exc}") from None
    shown = ", ".join(f"{n} {_number(v)}" for n, v in zip(objective_names(study), best.values,
                                                          strict=True))
    return draw_genome(genome, f"Best genome: trial {best.number} ({shown})")


# --- several studies ---------------------------------------------------------------------------


def _dataset(study: optuna.Study) -> str | None:
    """What a study's trials learn from: the training dataset of the built-in trainer, else the
    objective itself (``nb201:cifar10``, ``pkg.mod:function``, an own loop's
    ``mpi:pkg.mod:train``), whose stored training section is unused."""
    config = study_config(study)
    if objective_kind(study) in ("table", "function") or str(
            config.get("objective") or "").startswith("mpi:"):  # an own loop reads its own data
        return str(config["objective"])
    dataset = config.get("training", {}).get("dataset")
    return str(dataset) if dataset is not None else None


def comparable(study: optuna.Study, others: Sequence[optuna.Study], *,
               same_dataset: bool = True) -> tuple[list[optuna.Study], list[str]]:
    """Studies among ``others`` that can share an axis with ``study``: the same first objective
    and direction and (``same_dataset``, where both studies record one) the same dataset.
    Returns them with ``study`` first, and one line per study left out, saying why."""
    key = (objective_names(study)[0], study.directions[0])
    same, skipped = [study], []
    for other in others:
        if other.study_name == study.study_name:
            continue
        theirs = (objective_names(other)[0], other.directions[0])
        if theirs != key:
            skipped.append(f"{other.study_name} ({theirs[0]}, {theirs[1].name.lower()})")
        elif same_dataset and None not in (_dataset(study), _dataset(other)) \
                and _dataset(other) != _dataset(study):
            skipped.append(f"{other.study_name} (dataset {_dataset(other)})")
        else:
            same.append(other)
    return same, skipped


def compare_figure(studies: Sequence[optuna.Study]) -> go.Figure:
    """Best value so far against finished trials and against compute spent (rank-seconds of MPI
    training, simulated training seconds of a benchmark table, wall seconds of a function), one
    line per study, one colour per strategy."""
    if len(studies) < 2:
        raise CannotDraw("a comparison needs at least 2 studies with the same first objective")
    df = anytime_frame(studies).dropna(subset=["best"])
    if df["study"].nunique() < 2:
        raise CannotDraw("fewer than 2 of the compared studies have a complete trial")
    name = objective_names(studies[0])[0]
    cost = cost_label(set(df["kind"]))
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b"]
    colors = {s: palette[i % len(palette)] for i, s in enumerate(dict.fromkeys(df["strategy"]))}
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=("by finished trials", f"by compute ({cost})"))
    # One legend entry per study: its strategy's colour, and where a strategy ran in several
    # studies, the study's name and its own dash.
    studies_of = df.groupby("strategy", sort=False)["study"].unique()
    dashes = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]
    for study_name, part in df.groupby("study", sort=False):
        strategy = str(part["strategy"].iloc[0])
        mine = list(studies_of[strategy])
        shared = len(mine) > 1
        label = f"{strategy}: {study_name}" if shared else strategy
        dash = dashes[mine.index(study_name) % len(dashes)]
        for col, x, axis in ((1, "trials", "trials"), (2, "compute_s", cost)):
            fig.add_trace(go.Scatter(
                x=part[x], y=part["best"], mode="lines",
                line={"shape": "hv", "color": colors[strategy], "dash": dash},
                name=label, legendgroup=str(study_name), showlegend=col == 1,
                hovertemplate=f"{study_name} ({strategy})<br>{axis} %{{x:.4g}}<br>best {name} "
                              f"%{{y:.4g}}<extra></extra>",
            ), row=1, col=col)
    fig.update_xaxes(title_text="finished trials", row=1, col=1)
    fig.update_xaxes(title_text=cost, row=1, col=2)
    fig.update_yaxes(title_text=f"best {name} so far", row=1, col=1)
    return _style(fig, f"Strategies compared: {df['study'].nunique()} studies")


def other_studies(study: optuna.Study, names: Sequence[str] | None = None) -> list[optuna.Study]:
    """Studies that share ``study``'s storage: ``names`` (KeyError for an unknown one) or all."""
    storage = study._storage  # noqa: SLF001 - the same storage object, no second connection
    known = optuna.get_all_study_names(storage)
    wanted = known if names is None else list(names)
    for name in wanted:
        if name not in known:
            raise KeyError(name)
    return [optuna.load_study(study_name=n, storage=storage) for n in wanted
            if n != study.study_name]


# --- all panels --------------------------------------------------------------------------------


def _panel(key: str, title: str, draw: Callable[[], go.Figure]) -> Panel:
    try:
        return Panel(key, title, draw())
    except CannotDraw as exc:
        return Panel(key, title, None, str(exc))


def study_panels(study: optuna.Study, compare: Sequence[optuna.Study] = (), *,
                 chosen: bool = False) -> list[Panel]:
    """Every figure for ``study`` (a note where one cannot be drawn): history, learning curves
    (not for a benchmark table, which has none), parallel coordinates, importances, the Pareto
    front (several objectives), the best genome (when trials have genomes), the architecture map
    (:mod:`search.analysis._map`) and a strategy
    comparison with the studies in ``compare`` that share its first objective (and, unless the
    user ``chosen`` them, its dataset)."""
    panels = [_panel("history", "Optimisation history", lambda: history_figure(study))]
    if objective_kind(study) != "table":
        panels.append(_panel("curves", "Learning curves", lambda: curves_figure(study)))
    panels += [
        _panel("parallel", "Parallel coordinates", lambda: parallel_figure(study)),
        importance_panel(study),
    ]
    if len(study.directions) > 1:
        panels.append(_panel("pareto", "Pareto front", lambda: pareto_figure(study)))
    if any("genome" in t.user_attrs for t in study.get_trials(deepcopy=False)):
        panels.append(_panel("genome", "Best genome", lambda: genome_figure(study)))
    panels.append(map_panel(study))
    if compare:
        same, skipped = comparable(study, compare, same_dataset=not chosen)
        panel = _panel("compare", "Strategies compared", lambda: compare_figure(same))
        if skipped:
            note = f"not compared (another objective, direction or dataset): {', '.join(skipped)}"
            panel = Panel(panel.key, panel.title, panel.figure,
                          f"{panel.note}; {note}" if panel.note else note)
        panels.append(panel)
    return panels
