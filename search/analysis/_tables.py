"""What `search status` and `search best` print (and the end of `search run`), read from
storage."""

from __future__ import annotations

from collections import Counter
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState
from rich import box
from rich.markup import escape
from rich.table import Table

from search.analysis._columns import format_seconds, format_total, objective_kind
from search.pruners._promotion import LINEAGE_EPOCHS_ATTR, LINEAGE_WALL_ATTR, RESUME_OF_ATTR


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


# Per kind of objective (see search.analysis._columns), the trial attributes a best-trials table
# shows where a trial has them: (label, user attribute).
_EXTRAS = {
    "training": (("test_acc", "test_accuracy"), ("epochs", "epochs_run"),
                 ("time s", "wall_time_s")),
    # The lookup's own wall time (microseconds) says nothing; the table's training time does.
    "table": (("sim time s", "sim_time_s"),),
    "function": (("time s", "wall_time_s"),),
    "other": (("test_acc", "test_accuracy"), ("epochs", "epochs_run"), ("time s", "wall_time_s")),
}


# A promoted trial's own epochs and time are its last segment's; the table shows its lineage's
# (search.pruners._promotion.LINEAGE_TOTALS), beside an unpruned trial's whole run.
_WHOLE_LINEAGE = {"epochs_run": LINEAGE_EPOCHS_ATTR, "wall_time_s": LINEAGE_WALL_ATTR}


def _lineage_or_own(t: FrozenTrial, key: str) -> Any:
    whole = _WHOLE_LINEAGE.get(key)
    if whole is not None and whole in t.user_attrs:
        return t.user_attrs[whole]
    return t.user_attrs.get(key, "")


def _cell(key: str, value: Any) -> str:
    return format_seconds(value) if key.endswith("_s") and value != "" else _fmt(value)


def objective_names(study: optuna.Study) -> list[str]:
    return study.metric_names or [f"value{i}" for i in range(len(study.directions))]


def best_trials(study: optuna.Study, n: int) -> list[FrozenTrial]:
    """Single objective: the n best COMPLETE trials. Several: the Pareto front (up to n)."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(study.directions) > 1:
        return study.best_trials[:n]
    sign = -1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else 1.0
    return sorted(complete, key=lambda t: sign * float(t.value))[:n]  # type: ignore[arg-type]


def best_table(study: optuna.Study, n: int = 5) -> Table:
    names = objective_names(study)
    trials = best_trials(study, n)
    params = sorted({p for t in trials for p in t.params if not p.startswith("genome")})
    genomes = any("genome_summary" in t.user_attrs for t in trials)
    title = "Pareto front" if len(names) > 1 else f"best {len(trials)} trials"
    # Laid out for 80 columns: no vertical rules, and headers fold onto a second line rather
    # than being cut to "val_acc…".
    table = Table(title=f"{study.study_name}: {title}", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
    table.add_column("trial", justify="right")
    for name in names:
        table.add_column(name, justify="right")
    for p in params:
        table.add_column(p, justify="right")
    if genomes:
        table.add_column("genome")
    extras = [(label, key) for label, key in _EXTRAS[objective_kind(study)]
              if any(key in t.user_attrs or _WHOLE_LINEAGE.get(key) in t.user_attrs
                     for t in trials)]
    for label, _ in extras:
        table.add_column(label, justify="right")
    # Where the ranks ran, once a trial's span several hosts (a one-node study keeps 80 columns).
    hosts = any(len(t.user_attrs.get("hosts") or ()) > 1 for t in trials)
    if hosts:
        table.add_column("hosts")
    for column in table.columns:
        column.overflow = "fold"
    for t in trials:
        table.add_row(
            str(t.number),
            *[_fmt(v) for v in t.values],
            *[_fmt(t.params.get(p, "")) for p in params],
            *([escape(str(t.user_attrs.get("genome_summary", "")))] if genomes else []),
            *[_cell(key, _lineage_or_own(t, key)) for _, key in extras],
            *([escape(",".join(t.user_attrs.get("hosts") or ()))] if hosts else []),
        )
    return table


def status_table(study: optuna.Study, storage_label: str) -> Table:
    trials = study.get_trials(deepcopy=False)
    counts = Counter(t.state.name for t in trials)
    table = Table(title=f"study {study.study_name}", show_header=False)
    table.add_column("what")
    table.add_column("value")
    table.add_row("storage", storage_label)
    names = objective_names(study)
    dirs = [d.name.lower() for d in study.directions]
    table.add_row("objectives", ", ".join(f"{n} ({d})" for n, d in zip(names, dirs, strict=True)))
    table.add_row("trials", str(len(trials)))
    paused = sum(1 for t in trials if "detol:paused_at" in t.user_attrs)
    for state in ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING"):
        table.add_row(f"  {state.lower()}", str(counts.get(state, 0)))
        if state == "PRUNED" and paused:  # pause-and-promote: a paused trial is PRUNED
            # A continuation that failed (it could not restore, its job crashed) promoted
            # nothing: its parent is promotable again (search.pruners._promotion.continued_parents).
            resumed = sum(1 for t in trials if RESUME_OF_ATTR in t.user_attrs
                          and t.state != TrialState.FAIL)
            table.add_row("    paused", f"{paused} (promoted: {resumed} continuations)")
    best = best_trials(study, 1)
    if best and len(names) == 1:
        table.add_row("best", f"{_fmt(best[0].value)} (trial {best[0].number})")
    elif best:
        table.add_row("pareto front", f"{len(study.best_trials)} trials")
    kind = objective_kind(study)
    if kind == "table":
        total = sum(float(t.user_attrs.get("sim_time_s", 0.0)) for t in trials)
        table.add_row("simulated training", f"{format_total(total)} (table lookups)")
    elif kind == "function":
        total = sum(float(t.user_attrs.get("wall_time_s", 0.0)) for t in trials)
        table.add_row("time in the objective", format_total(total))
    else:
        epochs = sum(int(t.user_attrs.get("epochs_run", 0)) for t in trials)
        table.add_row("epochs trained", str(epochs))
        hosts = Counter(h for t in trials for h in t.user_attrs.get("hosts") or ())
        if hosts:  # where ranks ran: trials per host (a multi-node trial counts on each)
            spanning = sum(1 for t in trials if len(t.user_attrs.get("hosts") or ()) > 1)
            across = f"; {spanning} across several" if spanning else ""
            table.add_row("hosts", ", ".join(f"{h} ({n})" for h, n in sorted(hosts.items()))
                          + f" trials{across}")
    return table
