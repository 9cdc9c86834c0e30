"""A genome as a graph: the network it describes, from ``input`` to ``output``, drawn with
plotly (the best genome of ``search report`` and the notebooks)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

import spaces
from search.analysis._plotting import CannotDraw, style


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
    return style(fig, title, height=380 + 40 * int(max(ys) - min(ys)))
