"""``search report``: one self-contained HTML file (plotly.js inlined, no server, no network).

The page records any JavaScript error in ``#js-errors`` (a ``window.onerror`` hook that runs
before plotly.js), and says how many figures it holds in ``<meta name="detol-figures">``, so a
headless browser can check that every figure rendered.
"""

from __future__ import annotations

import datetime as _dt
import html
import os
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import optuna
import plotly.offline

from search.analysis._columns import SUMMARY, format_cell, format_total, objective_kind
from search.analysis._figures import Panel, objective_names, strategy_of, study_panels, trials_frame

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1200px; color: #222;
       padding: 0 1rem; }
h1 { margin-bottom: 0.2rem; } h2 { margin: 2rem 0 0.5rem; font-size: 1.2rem; }
.meta { color: #555; margin: 0.2rem 0; }
.note { background: #fff8e1; border-left: 4px solid #ffb300; padding: 0.6rem 1rem; }
table.best { border-collapse: collapse; font-size: 0.85rem; margin-top: 0.5rem; }
table.best th, table.best td { border-bottom: 1px solid #ddd; padding: 0.25rem 0.6rem;
                               text-align: right; }
table.best td.text { text-align: left; }
#js-errors:empty { display: none; }
#js-errors { color: #b00020; white-space: pre-wrap; border: 1px solid #b00020; padding: 1rem; }
"""

_ERROR_HOOK = """
window.onerror = function (message, source, line, column, error) {
  var box = document.getElementById("js-errors");
  var text = message + " (" + source + ":" + line + ":" + column + ")\\n";
  if (box) { box.textContent += text; }
  else { (window.detolErrors = window.detolErrors || []).push(text); }
};
window.addEventListener("unhandledrejection", function (event) {
  window.onerror("unhandled rejection: " + event.reason, "", 0, 0, null);
});
document.addEventListener("DOMContentLoaded", function () {
  var box = document.getElementById("js-errors");
  (window.detolErrors || []).forEach(function (t) { box.textContent += t; });
});
"""


@dataclass(frozen=True)
class ReportSummary:
    figures: int
    skipped: list[str]  # "title: why it was not drawn"
    notes: list[str]  # "title: note" beside a figure that was drawn


def _best_table(study: optuna.Study, n: int = 10) -> str:
    df = trials_frame(study)
    if df.empty or "COMPLETE" not in set(df["state"]):
        return '<p class="note">no complete trial yet</p>'
    names = objective_names(study)
    done = df[df["state"] == "COMPLETE"]
    if len(names) == 1:
        ascending = study.direction == optuna.study.StudyDirection.MINIMIZE
        done = done.sort_values(names[0], ascending=ascending)
        caption = f"best {min(n, len(done))} trials"
    else:
        front = {t.number for t in study.best_trials}
        done = done[done["number"].isin(front)]
        caption = f"Pareto front ({len(done)} trials)"
    # A promoted trial's epochs and rank-seconds: its whole lineage's (issue 28).
    for own, whole in (("epochs", "lineage_epochs"), ("rank_seconds", "lineage_rank_seconds"),
                       ("wall_time_s", "lineage_wall_time_s")):
        if whole in done.columns and own in done.columns:
            done = done.assign(**{own: done[whole].fillna(done[own])})
    params = [c for c in done.columns if c.startswith("params_") and "genome." not in c]
    searched = {c.removeprefix("params_") for c in params}
    attrs = [c for c in SUMMARY[objective_kind(study)] if c not in searched]
    columns = ["number", *names, *params, *attrs]
    shown = done[[c for c in columns if c in done.columns]].head(n)
    shown = shown.dropna(axis=1, how="all").rename(columns=lambda c: c.removeprefix("params_"))
    rows = []
    for _, row in shown.iterrows():
        cells = []
        for col, value in row.items():
            klass = ' class="text"' if col in ("genome_summary", "algorithm") else ""
            cells.append(f"<td{klass}>{html.escape(format_cell(str(col), value))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in shown.columns)
    return (f"<p class=\"meta\">{html.escape(caption)}</p><table class=\"best\"><tr>{head}</tr>"
            + "".join(rows) + "</table>")


def _header(study: optuna.Study, storage_label: str) -> str:
    names = objective_names(study)
    counts = Counter(t.state.name.lower() for t in study.get_trials(deepcopy=False))
    dirs = [d.name.lower() for d in study.directions]
    objectives = ", ".join(f"{n} ({d})" for n, d in zip(names, dirs, strict=True))
    states = ", ".join(f"{counts.get(s, 0)} {s}" for s in ("complete", "pruned", "fail",
                                                           "running"))
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"storage {storage_label} &middot; strategy {strategy_of(study)} &middot; generated {now}",
        f"objectives: {objectives}",
        f"{sum(counts.values())} trials: {states} &middot; {html.escape(work_done(study))}",
    ]
    return "".join(f'<p class="meta">{line}</p>' for line in lines)


def work_done(study: optuna.Study) -> str:
    """What the trials did, in the objective's terms: epochs trained (MPI training), simulated
    training time (a benchmark table), wall time (a function)."""
    trials = study.get_trials(deepcopy=False)
    kind = objective_kind(study)
    if kind == "table":
        total = sum(float(t.user_attrs.get("sim_time_s", 0.0)) for t in trials)
        return f"{format_total(total)} of simulated training (table lookups, not trained)"
    if kind == "function":
        total = sum(float(t.user_attrs.get("wall_time_s", 0.0)) for t in trials)
        return f"{format_total(total)} in the objective function"
    epochs = sum(int(t.user_attrs.get("epochs_run", 0)) for t in trials)
    return f"{epochs} epochs trained"


def _section(panel: Panel) -> str:
    title = html.escape(panel.title)
    if panel.figure is None:
        return (f'<section class="panel skipped" data-panel="{panel.key}"><h2>{title}</h2>'
                f'<p class="note">not drawn: {html.escape(panel.note)}</p></section>')
    if panel.figure.layout.title.text == panel.title:  # the section heading says it already
        panel.figure.update_layout(title=None, margin_t=30)
    figure = panel.figure.to_html(
        full_html=False, include_plotlyjs=False, div_id=f"figure-{panel.key}",
        config={"displaylogo": False, "responsive": True},
    )
    note = f'<p class="note">{html.escape(panel.note)}</p>' if panel.note else ""
    return (f'<section class="panel figure" data-panel="{panel.key}"><h2>{title}</h2>'
            f"{note}{figure}</section>")


def render_report(study: optuna.Study, *, storage_label: str,
                  compare: Sequence[optuna.Study] = (),
                  chosen: bool = False) -> tuple[str, ReportSummary]:
    """The report page for ``study`` (and a comparison with ``compare``, which the user
    ``chosen`` by name or the storage's other studies), and what it holds."""
    panels = study_panels(study, compare, chosen=chosen)
    figures = sum(p.figure is not None for p in panels)
    skipped = [f"{p.title}: {p.note}" for p in panels if p.figure is None]
    notes = [f"{p.title}: {p.note}" for p in panels if p.figure is not None and p.note]
    name = html.escape(study.study_name)
    body = "".join(_section(p) for p in panels)
    page = (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"detol-figures\" content=\"{figures}\">"
        f"<title>detol report: {name}</title><style>{_STYLE}</style>"
        f"<script>{_ERROR_HOOK}</script>"
        f"<script type=\"text/javascript\">{plotly.offline.get_plotlyjs()}</script>"
        "</head><body>"
        f"<h1>Study {name}</h1>{_header(study, html.escape(storage_label))}"
        '<pre id="js-errors"></pre>'
        f"<h2>Best trials</h2>{_best_table(study)}{body}"
        "</body></html>\n"
    )
    return page, ReportSummary(figures, skipped, notes)


def write_report(study: optuna.Study, path: str | os.PathLike[str], *, storage_label: str,
                 compare: Sequence[optuna.Study] = (), chosen: bool = False) -> ReportSummary:
    """Write the report atomically (a half-written page never replaces a good one).

    Raises ``OSError`` when ``path`` cannot be written.
    """
    page, summary = render_report(study, storage_label=storage_label, compare=compare,
                                  chosen=chosen)
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return summary
