"""A study as a table and as figures: what ``search report``, ``search export`` and the notebooks
in ``notebooks/`` show.

Everything here reads storage only, through plain Optuna. A figure that cannot be drawn (too few
trials, no parameters, a single objective for a Pareto front) comes back as a :class:`Panel`
with a note that says why, never as an exception.

>>> import optuna
>>> study = optuna.create_study()
>>> study.optimize(lambda t: t.suggest_float("x", -1, 1) ** 2, n_trials=3)
>>> trials_frame(study)[["number", "state", "value", "params_x"]].shape
(3, 4)
>>> [p.key for p in study_panels(study)]
['history', 'curves', 'parallel', 'importance']
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
import pandas as pd
import plotly.graph_objects as go
from optuna.importance import FanovaImportanceEvaluator
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState
from plotly.subplots import make_subplots

import spaces

TEMPLATE = "plotly_white"
STATE_STYLE: dict[str, dict[str, Any]] = {  # learning curves: how each trial state is drawn
    "COMPLETE": {"color": "#1f77b4", "dash": "solid", "width": 1.5},
    "PRUNED": {"color": "#ff7f0e", "dash": "dash", "width": 1.5},
    "FAIL": {"color": "#7f7f7f", "dash": "dot", "width": 1},
    "RUNNING": {"color": "#9467bd", "dash": "solid", "width": 1},
}
BEST_COLOR = "#2ca02c"
MAX_PARALLEL_PARAMS = 8


class CannotDraw(Exception):
    """A figure cannot be drawn for this study; the message says why (shown in its place)."""


@dataclass(frozen=True)
class Panel:
    """One figure of a report, or the note that stands in for it."""

    key: str
    title: str
    figure: go.Figure | None
    note: str = ""


# --- the study as a table ----------------------------------------------------------------------


def objective_names(study: optuna.Study) -> list[str]:
    """The study's metric names; for other studies ``value`` (``value0``, ... for several)."""
    if study.metric_names:
        return list(study.metric_names)
    n = len(study.directions)
    return ["value"] if n == 1 else [f"value{i}" for i in range(n)]


def study_config(study: optuna.Study) -> dict[str, Any]:
    """The validated study file ``search run`` stored with the study ({} for other studies)."""
    config = study.user_attrs.get("detol:study")
    return config if isinstance(config, dict) else {}


def strategy_of(study: optuna.Study) -> str:
    """The strategy's name from the stored study file, else the sampler attribute, else '?'."""
    strategy = study_config(study).get("strategy")
    if isinstance(strategy, dict) and strategy.get("name"):
        return str(strategy["name"])
    return str(study.user_attrs.get("strategy", "?"))


def _ranks(trial: FrozenTrial, default: Any) -> Any:
    return trial.user_attrs.get("ranks", trial.params.get("ranks", default))


def trials_frame(study: optuna.Study) -> pd.DataFrame:
    """One row per trial: state, objective values (columns named by metric), ``params_NAME``,
    genome summary and key, epochs, ranks, algorithm, wall time, rank-seconds
    (``wall_time_s * ranks``), test accuracy, size, exit reason, times, ASGD-style counters.

    >>> import optuna
    >>> s = optuna.create_study(direction="maximize")
    >>> s.optimize(lambda t: t.suggest_int("hidden", 8, 64), n_trials=2)
    >>> list(trials_frame(s).columns[:5])
    ['study', 'number', 'state', 'value', 'params_hidden']
    """
    names = objective_names(study)
    training = study_config(study).get("training", {})
    default_ranks = training.get("ranks", np.nan)
    default_algorithm = training.get("algorithm", None)
    rows = []
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        row: dict[str, Any] = {"study": study.study_name, "number": t.number, "state": t.state.name}
        values = t.values if t.values is not None else [None] * len(names)
        row.update({n: (np.nan if v is None else float(v)) for n, v in zip(names, values,
                                                                            strict=True)})
        row.update({f"params_{k}": v for k, v in t.params.items()})
        ranks = _ranks(t, default_ranks)
        wall = a.get("wall_time_s", np.nan)
        row.update(
            genome_summary=a.get("genome_summary"),
            genome_key=a.get("genome_key"),
            epochs=a.get("epochs_run", len(t.intermediate_values) or np.nan),
            ranks=ranks,
            algorithm=a.get("algorithm", t.params.get("algorithm", default_algorithm)),
            wall_time_s=wall,
            rank_seconds=a.get("rank_seconds", _product(wall, ranks)),
            test_accuracy=a.get("test_accuracy", np.nan),
            n_params=a.get("n_params", np.nan),
            flops=a.get("flops", np.nan),
            samples_per_s=a.get("samples_per_s", np.nan),
            exit_reason=a.get("exit_reason"),
            datetime_start=t.datetime_start,
            datetime_complete=t.datetime_complete,
        )
        counters = a.get("counters")
        if isinstance(counters, dict):
            row.update({f"counters.{k}": v for k, v in counters.items()})
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=["study", "number", "state", *names])
    for col in ("datetime_start", "datetime_complete"):
        df[col] = pd.to_datetime(df[col])
    df["duration_s"] = (df["datetime_complete"] - df["datetime_start"]).dt.total_seconds()
    return df


def _number(value: float) -> str:
    """``0.9896``, ``10,690`` (whole numbers such as parameter counts in full)."""
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


def _product(a: Any, b: Any) -> float:
    try:
        return float(a) * float(b)
    except (TypeError, ValueError):
        return float("nan")


# --- one study's figures -----------------------------------------------------------------------


def _complete(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def _style(fig: go.Figure, title: str, height: int = 420) -> go.Figure:
    fig.update_layout(template=TEMPLATE, title=title, height=height,
                      margin={"l": 60, "r": 30, "t": 60, "b": 50})
    return fig


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
    """Learning curves of every trial; pruned ones dashed and ending in a cross where they were
    stopped, the best trial in green."""
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
            hovertemplate=f"trial {t.number} ({state.lower()})<br>epoch %{{x}}<br>"
                          f"{metric} %{{y:.4g}}<extra></extra>",
        ))
        shown.add(state)
    if not drawn:
        raise CannotDraw("no trial has reported a per-epoch value yet")
    fig.update_xaxes(title_text="epoch")
    fig.update_yaxes(title_text=metric)
    return _style(fig, "Learning curves (pruned trials end in a cross at the epoch they were "
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
    return _style(fig, f"Parallel coordinates ({name})", height=460)


def importance_figure(study: optuna.Study) -> go.Figure:
    """fANOVA parameter importances (seeded, so a report is reproducible)."""
    complete = _complete(study)
    params = _searched_params(complete)
    if len(complete) < 2 or not params:
        raise CannotDraw(f"parameter importances need at least 2 complete trials and 1 searched "
                         f"parameter (the study has {len(complete)} complete trial(s), "
                         f"{len(params)} parameter(s))")
    names = objective_names(study)
    evaluator = FanovaImportanceEvaluator(seed=0)
    try:
        if len(names) == 1:
            fig = optuna.visualization.plot_param_importances(study, evaluator=evaluator,
                                                              target_name=names[0])
        else:
            fig = optuna.visualization.plot_param_importances(study, evaluator=evaluator)
    except (ValueError, RuntimeError, ZeroDivisionError) as exc:
        raise CannotDraw(f"parameter importances could not be computed: {exc}") from None
    if not fig.data:
        raise CannotDraw("no parameter is present in every complete trial")
    return _style(fig, "Parameter importances (fANOVA)")


def pareto_figure(study: optuna.Study) -> go.Figure:
    names = objective_names(study)
    if len(names) not in (2, 3):
        raise CannotDraw(f"a Pareto front is drawn for 2 or 3 objectives; this study has "
                         f"{len(names)}")
    if not _complete(study):
        raise CannotDraw("no complete trial yet")
    fig = optuna.visualization.plot_pareto_front(study, target_names=names)
    return _style(fig, "Pareto front", height=480)


# --- genomes as graphs -------------------------------------------------------------------------


@dataclass(frozen=True)
class GenomeGraph:
    """Nodes (id -> label, kind) and labelled edges of a genome, ready to draw."""

    nodes: dict[int, tuple[str, str]]
    edges: list[tuple[int, int, str]]


def genome_graph(genome: spaces.Genome) -> GenomeGraph:
    """The network a genome describes, as a DAG from ``input`` to ``output``.

    >>> from spaces import CellGenome
    >>> g = genome_graph(CellGenome.from_nb201_string("|nor_conv_3x3~0|+|none~0|skip_connect~1|"))
    >>> g.edges
    [(0, 1, 'nor_conv_3x3'), (1, 2, 'skip_connect')]
    """
    if isinstance(genome, spaces.CellGenome):
        last = genome.nodes - 1
        nodes = {k: ("input" if k == 0 else "output" if k == last else f"node {k}",
                     "input/output" if k in (0, last) else "sum of inputs")
                 for k in range(genome.nodes)}
        edges = [(i, j, op) for (i, j), op in zip(spaces.cell_edges(genome.nodes), genome.edges,
                                                  strict=True) if op != "none"]
        used = {0, last} | {x for i, j, _ in edges for x in (i, j)}
        return GenomeGraph({k: v for k, v in nodes.items() if k in used}, edges)
    if isinstance(genome, spaces.MacroGenome):
        active = set(genome.active)
        nodes = {0: ("input", "input/output")}
        edges = []
        for k, node in enumerate(genome.nodes, start=1):
            if k not in active:
                continue
            out = " (output)" if k == len(genome.nodes) else ""
            nodes[k] = (f"{k}: {node.label()}{out}", node.op)
            edges += [(i, k, "") for i in node.inputs]
        return GenomeGraph(nodes, edges)
    if isinstance(genome, spaces.StackGenome):
        labels = ["input", *(layer.label() for layer in genome.layers), "classifier"]
        kinds = ["input/output", *(layer.kind for layer in genome.layers), "input/output"]
        nodes = {k: (label, kind) for k, (label, kind) in enumerate(zip(labels, kinds,
                                                                         strict=True))}
        return GenomeGraph(nodes, [(k, k + 1, "") for k in range(len(labels) - 1)])
    raise CannotDraw(f"no drawing for {genome.family} genomes")


def _layout(graph: GenomeGraph) -> dict[int, tuple[float, float]]:
    """x = longest path from the input, y = spread within the same x."""
    depth = dict.fromkeys(graph.nodes, 0)
    for _ in graph.nodes:
        for i, j, _label in graph.edges:
            depth[j] = max(depth[j], depth[i] + 1)
    columns: dict[int, list[int]] = {}
    for k in sorted(graph.nodes):
        columns.setdefault(depth[k], []).append(k)
    pos = {}
    for x, ks in columns.items():
        for n, k in enumerate(ks):
            pos[k] = (float(x), (len(ks) - 1) / 2 - n)
    return pos


def _bend(a: tuple[float, float], b: tuple[float, float], lift: float) -> tuple[list[float],
                                                                               list[float]]:
    """A quadratic curve from a to b whose middle is lifted by ``lift`` (0: a straight line)."""
    mx, my = (a[0] + b[0]) / 2, (a[1] + b[1]) / 2 + lift
    ts = np.linspace(0, 1, 21)
    xs = (1 - ts) ** 2 * a[0] + 2 * (1 - ts) * ts * mx + ts**2 * b[0]
    ys = (1 - ts) ** 2 * a[1] + 2 * (1 - ts) * ts * my + ts**2 * b[1]
    return xs.tolist(), ys.tolist()


def draw_genome(genome: spaces.Genome, title: str = "Genome") -> go.Figure:
    graph = genome_graph(genome)
    pos = _layout(graph)
    fig = go.Figure()
    arcs = 0
    for i, j, label in graph.edges:
        (x0, y0), (x1, y1) = pos[i], pos[j]
        # An edge whose straight line would run through a node in between becomes an arc
        # (alternately above and below).
        blocked = any(x0 < x < x1 and abs(y0 + (y1 - y0) * (x - x0) / (x1 - x0) - y) < 0.3
                      for k, (x, y) in pos.items() if k not in (i, j))
        lift = 0.0
        if blocked:
            lift = (0.3 + 0.15 * (x1 - x0)) * (1 if arcs % 2 == 0 else -1)
            arcs += 1
        xs, ys = _bend(pos[i], pos[j], lift)
        sizes = [0] * len(xs)
        sizes[14] = 13  # an arrow head 70% along the edge
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="lines+markers", hoverinfo="skip", showlegend=False,
            line={"color": "#888", "width": 1.5},
            marker={"symbol": "arrow", "angleref": "previous", "size": sizes, "color": "#555"},
        ))
        if label:
            fig.add_annotation(x=xs[8], y=ys[8], text=label, showarrow=False,
                               font={"size": 11, "color": "#333"},
                               bgcolor="rgba(255,255,255,0.85)")
    kinds = sorted({kind for _, kind in graph.nodes.values()})
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]
    for c, kind in enumerate(kinds):
        ks = [k for k, (_, kk) in graph.nodes.items() if kk == kind]
        fig.add_trace(go.Scatter(
            x=[pos[k][0] for k in ks], y=[pos[k][1] for k in ks], mode="markers+text",
            text=[graph.nodes[k][0] for k in ks], textposition="top center", name=kind,
            marker={"size": 22, "line": {"color": "white", "width": 2},
                    "color": "#444" if kind == "input/output" else palette[c % len(palette)]},
            hovertext=[graph.nodes[k][0] for k in ks], hoverinfo="text",
        ))
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    fig.update_xaxes(visible=False, range=[min(xs) - 0.6, max(xs) + 0.6])
    fig.update_yaxes(visible=False, range=[min(ys) - 1.0, max(ys) + 1.0])
    return _style(fig, title, height=380 + 40 * int(max(ys) - min(ys)))


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


def anytime_frame(studies: Sequence[optuna.Study]) -> pd.DataFrame:
    """Anytime curves: per study and finished trial (in order of completion), the cumulative
    rank-seconds spent (complete, pruned and failed trials all cost), the best first objective
    so far, and the test accuracy of that incumbent."""
    rows = []
    for study in studies:
        sign = -1.0 if study.directions[0] == StudyDirection.MAXIMIZE else 1.0
        default = study_config(study).get("training", {}).get("ranks", 1)
        done = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
        done.sort(key=lambda t: (t.datetime_complete is None, t.datetime_complete, t.number))
        spent, best, incumbent = 0.0, math.inf, None
        for n, t in enumerate(done, start=1):
            cost = float(t.user_attrs.get("rank_seconds", _product(
                t.user_attrs.get("wall_time_s", np.nan), _ranks(t, default))))
            spent += 0.0 if math.isnan(cost) else cost
            if t.state == TrialState.COMPLETE and sign * float(t.values[0]) < best:
                best, incumbent = sign * float(t.values[0]), t
            rows.append({
                "study": study.study_name, "strategy": strategy_of(study), "trials": n,
                "number": t.number, "rank_seconds": spent,
                "best": sign * best if incumbent is not None else np.nan,
                "incumbent_test_accuracy": (incumbent.user_attrs.get("test_accuracy", np.nan)
                                            if incumbent is not None else np.nan),
            })
    return pd.DataFrame(rows, columns=["study", "strategy", "trials", "number", "rank_seconds",
                                       "best", "incumbent_test_accuracy"])


def _dataset(study: optuna.Study) -> str | None:
    dataset = study_config(study).get("training", {}).get("dataset")
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
    """Best value so far against finished trials and against rank-seconds spent, one line per
    study, one colour per strategy."""
    if len(studies) < 2:
        raise CannotDraw("a comparison needs at least 2 studies with the same first objective")
    df = anytime_frame(studies).dropna(subset=["best"])
    if df["study"].nunique() < 2:
        raise CannotDraw("fewer than 2 of the compared studies have a complete trial")
    name = objective_names(studies[0])[0]
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b"]
    colors = {s: palette[i % len(palette)] for i, s in enumerate(dict.fromkeys(df["strategy"]))}
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=("by finished trials", "by compute (rank-seconds)"))
    legend: set[str] = set()
    for study_name, part in df.groupby("study", sort=False):
        strategy = str(part["strategy"].iloc[0])
        for col, x in ((1, "trials"), (2, "rank_seconds")):
            fig.add_trace(go.Scatter(
                x=part[x], y=part["best"], mode="lines", line={"shape": "hv",
                                                               "color": colors[strategy]},
                name=strategy, legendgroup=strategy, showlegend=col == 1 and strategy not in legend,
                hovertemplate=f"{study_name} ({strategy})<br>{x} %{{x:.4g}}<br>best {name} "
                              f"%{{y:.4g}}<extra></extra>",
            ), row=1, col=col)
        legend.add(strategy)
    fig.update_xaxes(title_text="finished trials", row=1, col=1)
    fig.update_xaxes(title_text="rank-seconds", row=1, col=2)
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
    """Every figure for ``study`` (a note where one cannot be drawn): history, learning curves,
    parallel coordinates, importances, the Pareto front (several objectives), the best genome
    (when trials have genomes) and a strategy comparison with the studies in ``compare`` that
    share its first objective (and, unless the user ``chosen`` them, its dataset)."""
    panels = [
        _panel("history", "Optimisation history", lambda: history_figure(study)),
        _panel("curves", "Learning curves", lambda: curves_figure(study)),
        _panel("parallel", "Parallel coordinates", lambda: parallel_figure(study)),
        _panel("importance", "Parameter importances", lambda: importance_figure(study)),
    ]
    if len(study.directions) > 1:
        panels.append(_panel("pareto", "Pareto front", lambda: pareto_figure(study)))
    if any("genome" in t.user_attrs for t in study.get_trials(deepcopy=False)):
        panels.append(_panel("genome", "Best genome", lambda: genome_figure(study)))
    if compare:
        same, skipped = comparable(study, compare, same_dataset=not chosen)
        panel = _panel("compare", "Strategies compared", lambda: compare_figure(same))
        if skipped:
            note = f"not compared (another objective, direction or dataset): {', '.join(skipped)}"
            panel = Panel(panel.key, panel.title, panel.figure,
                          f"{panel.note}; {note}" if panel.note else note)
        panels.append(panel)
    return panels


def anytime_bands(frame: pd.DataFrame, x: str = "rank_seconds", points: int = 100) -> pd.DataFrame:
    """Anytime curves of several seeds per strategy on one grid of ``x`` (from 0 to the budget
    every study reached): mean, min and max of the best value so far, per strategy.

    ``frame`` is :func:`anytime_frame`'s. A study counts at a grid point once it has a complete
    trial there.
    """
    budget = frame.groupby("study")[x].max().min()
    grid = np.linspace(0.0, float(budget), points)
    rows = []
    for (strategy, study), part in frame.groupby(["strategy", "study"], sort=False):
        xs, best = part[x].to_numpy(), part["best"].to_numpy()
        at = np.searchsorted(xs, grid, side="right") - 1  # last finished trial at each point
        values = np.where(at >= 0, best[np.clip(at, 0, None)], np.nan)
        rows += [{"strategy": strategy, "study": study, x: g, "best": v}
                 for g, v in zip(grid, values, strict=True)]
    per_study = pd.DataFrame(rows)
    return (per_study.groupby(["strategy", x], sort=False)["best"]
            .agg(["mean", "min", "max", "count"]).reset_index())
