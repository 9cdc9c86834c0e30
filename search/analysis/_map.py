"""The architecture map: every complete trial as a point in 2-D, placed by the principal
components of its embedding (:class:`spaces.SpaceEmbedding`: the canonical genome and the
scalar parameters), coloured by the first objective; the best trial is a star, trials
transferred from another study (user attribute ``transferred_from``) are diamonds.

The space is read back from the trials themselves (a study in storage does not keep its genome
family): the genomes in their ``genome`` user attribute, embedded in the smallest family of
their kind that holds them all, and each scalar parameter over the range its trials were
sampled from. So the map also draws studies made by plain Optuna, with or without genomes.

>>> import optuna
>>> study = optuna.create_study()
>>> study.optimize(lambda t: t.suggest_float("x", -1, 1) ** 2 + t.suggest_int("k", 0, 3), 5)
>>> fig = map_figure(study)
>>> sum(len(trace.x) for trace in fig.data)
5
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
import plotly.graph_objects as go
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

import spaces
from search.analysis._frame import objective_names
from search.analysis._plotting import CannotDraw, Panel
from search.analysis._plotting import style as _style

TRANSFERRED_ATTR = "transferred_from"  # set by warm starts: "source study #trial"
MIN_TRIALS = 3
_GENOME = "genome"


def _covering_family(genomes: Sequence[spaces.Genome]) -> spaces.GenomeFamily:
    """The smallest family of the genomes' kind whose members include them all."""
    kind = genomes[0].family
    if kind == "cell":
        cells = [g for g in genomes if isinstance(g, spaces.CellGenome)]
        used = sorted({op for g in cells for op in g.edges} - {"none"})
        return spaces.CellFamily(nodes=cells[0].nodes, ops=("none", *used))
    if kind == "macro":
        nodes = [n for g in genomes if isinstance(g, spaces.MacroGenome) for n in g.nodes]
        widths = sorted({n.width for n in nodes if n.width is not None}) or [16]
        kernels = sorted({n.kernel for n in nodes if n.kernel is not None}) or [3]
        ops = sorted({n.op for n in nodes} | {"conv"})
        return spaces.MacroFamily(
            min_nodes=1,
            max_nodes=max(len(g.nodes) for g in genomes if isinstance(g, spaces.MacroGenome)),
            ops=tuple(ops),
            widths=tuple(widths),
            kernels=tuple(kernels),
            max_inputs=max(len(n.inputs) for n in nodes),
        )
    stacks = [g for g in genomes if isinstance(g, spaces.StackGenome)]
    layers = [layer for g in stacks for layer in g.layers]

    def seen(kind: str, attr: str, default: tuple[Any, ...]) -> tuple[Any, ...]:
        found = sorted({getattr(x, attr) for x in layers if x.kind == kind})
        return tuple(found) or default

    return spaces.StackFamily(
        min_conv_layers=0,
        max_conv_layers=max(len(g.part("conv")) for g in stacks),
        min_dense_layers=0,
        max_dense_layers=max(len(g.part("dense")) for g in stacks),
        channels=seen("conv", "width", (16,)),
        kernels=seen("conv", "kernel", (3,)),
        pools=seen("conv", "pool", (False,)),
        widths=seen("dense", "width", (32,)),
        activations=tuple(sorted({x.activation for x in layers})) or ("relu",),
        dropouts=tuple(sorted({x.dropout for x in layers})) or (0.0,),
    )


def _dimension(dists: list[BaseDistribution]) -> spaces.Dimension | None:
    """One scalar dimension covering every distribution a parameter was sampled from."""
    if all(isinstance(d, CategoricalDistribution) for d in dists):
        choices: dict[str, Any] = {}
        for d in dists:
            choices.update({repr(c): c for c in d.choices})  # type: ignore[attr-defined]
        return spaces.Categorical(tuple(choices.values()))
    if all(isinstance(d, FloatDistribution | IntDistribution) for d in dists):
        low = min(d.low for d in dists)  # type: ignore[attr-defined]
        high = max(d.high for d in dists)  # type: ignore[attr-defined]
        log = all(d.log for d in dists)  # type: ignore[attr-defined]
        if all(isinstance(d, IntDistribution) for d in dists):
            return spaces.Int(low=int(low), high=int(high), log=log)
        return spaces.Float(low=float(low), high=float(high), log=log)
    return None  # a parameter whose type changed between trials is left out


def _genome(trial: FrozenTrial) -> spaces.Genome | None:
    try:
        return spaces.genome_from_json(str(trial.user_attrs[_GENOME]))
    except (KeyError, ValueError, json.JSONDecodeError):
        return None


def embed_trials(trials: Sequence[FrozenTrial]) -> tuple[np.ndarray, list[str], str]:
    """The embedding of each trial (rows), one label per trial for hovering (its genome or its
    parameters), and a note on what was left out ("" when nothing was)."""
    genomes = [_genome(t) for t in trials]
    kinds = Counter(
        (g.family, getattr(g, "nodes", 0) if g.family == "cell" else 0)
        for g in genomes
        if g is not None
    )
    dims: dict[str, spaces.Dimension] = {}
    notes: list[str] = []
    names: dict[str, list[BaseDistribution]] = {}
    for t in trials:
        for name, dist in t.distributions.items():
            if not name.startswith(_GENOME + "."):
                names.setdefault(name, []).append(dist)
    for name, dists in names.items():
        dim = _dimension(dists)
        if dim is not None:
            dims[name] = dim
    family = None
    if kinds:
        (kind, nodes), _ = kinds.most_common(1)[0]
        keep = [
            g
            for g in genomes
            if g is not None
            and g.family == kind
            and (kind != "cell" or getattr(g, "nodes", 0) == nodes)
        ]
        family = _covering_family(keep)
        dims[_GENOME] = family
        left = len(trials) - len(keep)
        if left:
            notes.append(
                f"{left} trial(s) without a {kind} genome are placed by their other parameters only"
            )
    if not dims:
        raise CannotDraw("the trials have neither a genome nor searched parameters to place them")
    embed = spaces.SpaceEmbedding(spaces.Space(dims))
    width = embed.dim - len(embed.scalars({}))  # the genome's features come first
    rows = np.zeros((len(trials), embed.dim))
    labels = []
    for i, (t, g) in enumerate(zip(trials, genomes, strict=True)):
        if family is not None and g is not None and g.family == family.name:
            with contextlib.suppress(ValueError):  # another cell size: placed by the rest
                rows[i, :width] = embed.genome_vector(g)
        rows[i, width:] = embed.scalars({k: v for k, v in t.params.items() if k in dims})
        labels.append(_label(t, g))
    return rows, labels, "; ".join(notes)


def _label(trial: FrozenTrial, genome: spaces.Genome | None) -> str:
    """What hovering shows: the genome summary the driver stored, else the genome's, else the
    parameters."""
    if "genome_summary" in trial.user_attrs:
        return str(trial.user_attrs["genome_summary"])
    if genome is not None:
        return genome.summary()
    return ", ".join(f"{k}={_short(v)}" for k, v in trial.params.items())


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def project(rows: np.ndarray) -> np.ndarray:
    """The first two principal components of the rows (SVD of the centred rows: the same plane
    as classical MDS on Euclidean embedding distances); each sign fixed so that the largest
    loading is positive, so the map is deterministic. Missing components are zeros."""
    x = rows - rows.mean(axis=0)
    out = np.zeros((len(rows), 2))
    if not np.any(x):
        return out
    u, s, vt = np.linalg.svd(x, full_matrices=False)
    for k in range(min(2, len(s))):
        if s[k] <= 1e-9 * s[0]:
            break
        flip = -1.0 if vt[k][np.argmax(np.abs(vt[k]))] < 0 else 1.0
        out[:, k] = flip * u[:, k] * s[k]
    return out


def map_panel(study: optuna.Study) -> Panel:
    """The map as a report panel, with a note when some trials are placed without a genome."""
    try:
        figure, note = _map(study)
    except CannotDraw as exc:
        return Panel("map", "Architecture map", None, str(exc))
    return Panel("map", "Architecture map", figure, note)


def map_figure(study: optuna.Study) -> go.Figure:
    """The architecture map of ``study``'s complete trials (see the module docstring)."""
    return _map(study)[0]


def _map(study: optuna.Study) -> tuple[go.Figure, str]:
    trials = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.values is not None
    ]
    if len(trials) < MIN_TRIALS:
        raise CannotDraw(
            f"a map needs at least {MIN_TRIALS} complete trials; this study has {len(trials)}"
        )
    rows, labels, note = embed_trials(trials)
    xy = project(rows)
    name = objective_names(study)[0]
    values = np.array([t.values[0] for t in trials])
    maximize = study.directions[0] == StudyDirection.MAXIMIZE
    best = int(np.argmax(values) if maximize else np.argmin(values))
    source = [str(t.user_attrs.get(TRANSFERRED_ATTR, "")) for t in trials]
    groups = [
        (
            "searched here",
            "circle",
            9,
            [i for i in range(len(trials)) if i != best and not source[i]],
        ),
        ("transferred", "diamond", 11, [i for i in range(len(trials)) if i != best and source[i]]),
        (f"best (trial {trials[best].number})", "star", 20, [best]),
    ]
    fig = go.Figure()
    for label, symbol, size, index in groups:
        if not index:
            continue
        fig.add_trace(
            go.Scatter(
                x=xy[index, 0],
                y=xy[index, 1],
                mode="markers",
                name=label,
                marker={
                    "symbol": symbol,
                    "size": size,
                    "color": values[index],
                    "coloraxis": "coloraxis",
                    "line": {"width": 2 if symbol == "star" else 1, "color": "#222"},
                },
                customdata=[
                    [
                        trials[i].number,
                        values[i],
                        labels[i],
                        f"<br>transferred from {source[i]}" if source[i] else "",
                    ]
                    for i in index
                ],
                hovertemplate=(
                    f"trial %{{customdata[0]}}<br>{name} %{{customdata[1]:.4g}}<br>"
                    "%{customdata[2]}%{customdata[3]}<extra></extra>"
                ),
            )
        )
    fig.update_layout(
        coloraxis={
            "colorscale": "Viridis",
            "reversescale": not maximize,
            "colorbar": {"title": {"text": name}},
        },
        legend={"orientation": "h", "y": -0.15},
    )
    fig.update_xaxes(title_text="component 1", zeroline=False)
    fig.update_yaxes(title_text="component 2", zeroline=False)
    return _style(fig, "Architecture map", height=480), note
