"""What every figure shares: the template, the note that stands in for a figure that cannot be
drawn, and one report panel."""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

TEMPLATE = "plotly_white"


class CannotDraw(Exception):
    """A figure cannot be drawn for this study; the message says why (shown in its place)."""


@dataclass(frozen=True)
class Panel:
    """One figure of a report, or the note that stands in for it; ``note`` may also stand beside
    a figure that was drawn (how to read it)."""

    key: str
    title: str
    figure: go.Figure | None
    note: str = ""


def style(fig: go.Figure, title: str, height: int = 420) -> go.Figure:
    fig.update_layout(template=TEMPLATE, title=title, height=height,
                      margin={"l": 60, "r": 30, "t": 60, "b": 50})
    return fig
