"""Anytime benchmark: the best model found against simulated wall-clock time with N workers,
early stopping included, on recorded learning-curve tables (docs/anytime.md).

Every tool here is a study file run by the real driver (``search.Driver``) on the simulated
clock with ``objective = "curves:TABLE"`` (search.simulated._curves): the same samplers,
pruners, pause-and-promote and its promotion rule as ``search run``; an epoch takes its recorded
seconds, a trial's start its recorded start. Nothing of the driver's rules is copied here: the
benchmark only writes study files and reads what the driver's event queue reported, and when.

Tools (``TOOLS``): ``detol`` (the default: no strategy named, ``[pruner] name = "asha",
promote = true``; its first rung at a ninth of the training since 2026-12-03), ``detol-rung1``
(the default before: first rung at epoch 1), ``detol-partial`` and ``detol-partial-hb``, and
``detol-rung2``, ``detol-eta2``, ``detol-rung3-eta2``, ``detol-top-half`` (changes tried, not
adopted; ``detol-rung3`` is the adopted rule set by hand),
``random+asha`` (random search, Optuna's stop-only successive halving), ``random+promote``
and ``random+promote-rung1`` (random search with our pause-and-promote, the first rung of ours
and of ours before; ranked in our place, a diagnostic), ``one-epoch`` (random search, the one-epoch
top-half rule), ``tpe+hyperband`` (Optuna's TPE and HyperbandPruner), ``random`` (full
fidelity); the peers of ``benchmarks/_common/anytime_peers.py`` in their own environments.

Score: at each moment, the incumbent is the configuration whose latest report (the most epochs
the search trained it) is the best the search has seen; its *regret* is the table's last-epoch
value of the nearest recorded configuration, normalised: 0 = the table's best final value,
1 = the table's median final value (a configuration whose run diverged scores the table's
worst). Budget: ``--budget`` times the mean time of one full training (start included) on each
worker count's clock. Reported per table and worker count: mean and standard error over seeds of
the regret at 10, 25, 50 and 100 % of the budget; average rank of each tool there (1 = best,
per table, workers and seed); time to reach the best peer's final mean regret.

    python benchmarks/anytime.py [--table T] [--workers 1,8,32] [--seeds 20] [--seeds-at 32=10]
        [--budget 10] [--tools detol,dehb,...] [--peers-python .peers-venv/bin/python]
        [--runs R.jsonl --resume] [--jobs 2] [--json PATH] [--plot DIR]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

FRACTIONS = (0.10, 0.25, 0.50, 1.00)
TABLES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "benchmarks/tables").glob("*.jsonl.gz"))
# tool -> (strategy section, pruner section) of its study file
OURS = "detol"  # our default study, the one the goals are about
# ours, what it was and a candidate: each is ranked in our place (the others never see two of ours)
VARIANTS = ("detol", "detol-rung1", "detol-partial", "detol-partial-hb", "detol-rung3",
            "detol-eta2", "detol-top-half", "detol-rung2", "detol-rung3-eta2",
            "random+promote", "random+promote-rung1")
BASELINES = ("one-epoch", "random+asha")  # the goals: beaten on every task by more than an SE
TOOLS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "detol": ({}, {"name": "asha", "promote": True}),
    # the default until 2026-12-03: the first rung at epoch 1 (now epochs / r^2, rounded up)
    "detol-rung1": ({}, {"name": "asha", "promote": True, "min_epochs": 1}),
    # two candidates that were measured and not adopted (docs/anytime.md): the predictor on
    # partial curves (BOHB's rule), with ASHA and with asynchronous Hyperband (pause-and-promote)
    "detol-partial": ({"name": "predictor", "partial": True}, {"name": "asha", "promote": True}),
    "detol-partial-hb": ({"name": "predictor", "partial": True},
                         {"name": "hyperband", "promote": True}),
    # the first rung and the rate (epoch 1 ranks configurations poorly on two of three tables:
    # a later first rung, or half kept at each rung), and the default sampler with the
    # one-epoch rule's pruner (it ranked first)
    "detol-rung3": ({}, {"name": "asha", "promote": True, "min_epochs": 3}),
    "detol-eta2": ({}, {"name": "asha", "promote": True, "reduction_factor": 2}),
    "detol-top-half": ({}, {"name": "top-half"}),
    "detol-rung2": ({}, {"name": "asha", "promote": True, "min_epochs": 2}),
    "detol-rung3-eta2": ({}, {"name": "asha", "promote": True, "min_epochs": 3,
                              "reduction_factor": 2}),
    "random+asha": ({"name": "random"}, {"name": "asha"}),
    # random search with our pause-and-promote: which half of detol (the predictor or the
    # promotion) makes the difference; ranked in our place (a diagnostic, not a peer), with
    # the first rung of ours now and of ours until 2026-12-03
    "random+promote": ({"name": "random"}, {"name": "asha", "promote": True}),
    "random+promote-rung1": ({"name": "random"}, {"name": "asha", "promote": True,
                                                   "min_epochs": 1}),
    "one-epoch": ({"name": "random"}, {"name": "top-half"}),
    "tpe+hyperband": ({"name": "tpe"}, {"name": "hyperband"}),
    "random": ({"name": "random"}, {"name": "none"}),
}


def full_time(table: Any) -> float:
    """Mean seconds of one full training (start + every epoch) over the complete rows."""
    times = [s + sum(e) for s, e, st in zip(table.start_s, table.epoch_s, table.states,
                                             strict=True) if st == "complete"]
    return statistics.fmean(times)


def finals(table: Any) -> list[float]:
    """Each row's true score: its last epoch's value; a diverged row the table's worst."""
    done = [c[-1] for c, st in zip(table.curves, table.states, strict=True)
            if st == "complete" and len(c) == table.epochs]
    worst = min(done) if table.maximize else max(done)
    return [c[-1] if st == "complete" and len(c) == table.epochs else worst
            for c, st in zip(table.curves, table.states, strict=True)]


def study_dict(table: Any, tool: str, *, workers: int, seed: int, budget_s: float) -> dict:
    strategy, pruner = TOOLS[tool]
    space = tomllib.loads(table.study)["space"]
    return {
        "name": f"anytime-{table.name}-{tool.replace('+', '-')}-w{workers}-s{seed}",
        "objective": f"curves:{table.path}",
        "metric": table.metric,
        "direction": table.direction,
        "budget": {"trials": 1_000_000, "concurrency": workers, "timeout": budget_s},
        "strategy": {**strategy, "seed": seed},
        "pruner": pruner,
        "training": {"epochs": table.epochs},
        "space": space,
    }


def run_tool(table: Any, tool: str, *, workers: int, seed: int, budget_s: float,
             client: Any) -> dict[str, Any]:
    """One search; its incumbent's normalised regret at every report that changed it."""
    import optuna

    from search import Driver, open_study, parse_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sf = parse_study(study_dict(table, tool, workers=workers, seed=seed, budget_s=budget_s))
    study = open_study(sf, optuna.storages.InMemoryStorage())
    driver = Driver(sf, study, client, storage_url="")
    started = time.perf_counter()
    counts = driver.run(trials=1_000_000, concurrency=workers, timeout=budget_s)
    wall = time.perf_counter() - started
    rows = {t.number: t.user_attrs.get("curves_row") for t in study.get_trials(deepcopy=False)}
    seen = [(at, rows[n], e, v) for at, n, e, v in driver.events.reports
            if rows.get(n) is not None]
    return {"trace": incumbent_trace(table, seen),
            "trials": len(rows), "complete": counts.complete, "paused": counts.paused,
            "promoted": counts.promoted, "pruned": counts.pruned, "wall_s": round(wall, 2),
            "strategy": study.user_attrs.get("detol:strategy")}


def incumbent_trace(table: Any, reports: list[tuple[float, int, int, float]],
                    ) -> list[tuple[float, float]]:
    """[(simulated time, normalised regret of the incumbent from then on)] from what a search
    saw: ``reports`` of (simulated time, table row, epoch, value), ours and the peers' alike."""
    true = finals(table)
    ordered = sorted(true, reverse=table.maximize)
    best, median = ordered[0], statistics.median(true)
    sign = 1.0 if table.maximize else -1.0
    latest: dict[int, tuple[int, float]] = {}  # row -> (most epochs seen, value then)
    trace: list[tuple[float, float]] = []
    incumbent = None
    for at, row, epoch, value in sorted(reports):
        if not math.isfinite(value):
            continue
        if epoch >= latest.get(row, (0, 0.0))[0]:
            latest[row] = (epoch, value)
        pick = max(latest, key=lambda r: (sign * latest[r][1], -r))
        if pick != incumbent:
            incumbent = pick
            trace.append((at, (best - true[pick]) / (best - median) + 0.0))
    return trace


def run_peer(table: Any, tool: str, *, workers: int, seed: int, budget_s: float,
             peers_python: str | None) -> dict[str, Any]:
    """One peer's search (benchmarks/_common/anytime_peers.py), in the peers' environment when
    given (their pins clash with ours), else in this Python."""
    from training.launch import die_with_parent

    command = [peers_python or sys.executable,
               str(ROOT / "benchmarks" / "_common" / "anytime_peers.py"), tool, table.path,
               str(workers), str(seed), repr(budget_s)]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600,
                          preexec_fn=die_with_parent)  # a killed benchmark leaves no peer
    if proc.returncode != 0:
        raise RuntimeError(f"{tool}: {proc.stderr.strip()[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])  # (a library may print before it)
    reports = [tuple(r) for r in out["reports"]]
    return {"trace": incumbent_trace(table, reports), "trials": out["jobs"],
            "wall_s": out["wall_s"], "versions": out["versions"]}


def regret_at(trace: list[tuple[float, float]], t: float) -> float | None:
    """The incumbent's regret at time ``t``; None before the first report."""
    out = None
    for at, r in trace:
        if at > t:
            break
        out = r
    return out


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per table and workers: each tool's mean and SE regret at each fraction, its average
    rank there, and how much sooner ours reaches the best peer's final mean regret."""
    out: dict[str, Any] = {}
    keys = sorted({(r["table"], r["workers"]) for r in runs})
    for table, workers in keys:
        mine = [r for r in runs if r["table"] == table and r["workers"] == workers]
        budget = mine[0]["budget_s"]
        tools = sorted({r["tool"] for r in mine})
        # the seeds every tool of the cell finished (a run cut short stays paired)
        seeds = sorted(set.intersection(*({r["seed"] for r in mine if r["tool"] == t}
                                          for t in tools)))
        mine = [r for r in mine if r["seed"] in seeds]
        cell_seeds = len(seeds)
        cell: dict[str, Any] = {"budget_s": budget, "seeds": cell_seeds, "tools": {}}
        at: dict[tuple[str, int, float], float] = {}
        for r in mine:
            for f in FRACTIONS:
                v = regret_at(r["trace"], f * budget)
                at[(r["tool"], r["seed"], f)] = math.inf if v is None else v
        for tool in tools:
            stats = {}
            for f in FRACTIONS:
                vals = [at[(tool, s, f)] for s in seeds if (tool, s, f) in at]
                finite = [v for v in vals if math.isfinite(v)]
                stats[f"{int(f * 100)}%"] = {
                    "mean": statistics.fmean(finite) if len(finite) == len(vals) else None,
                    "se": (statistics.stdev(finite) / math.sqrt(len(finite))
                           if len(finite) == len(vals) > 1 else None)}
            cell["tools"][tool] = {"regret": stats}
        for f in FRACTIONS:  # average rank over seeds (ties share the mean rank)
            for tool in tools:
                # a variant of ours is ranked in our place: the others never see two of ours
                field = [t for t in tools if t not in VARIANTS] + (
                    [tool] if tool in VARIANTS else [OURS] if OURS in tools else [])
                ranks = []
                for s in seeds:
                    vals = {t: at.get((t, s, f), math.inf) for t in field}
                    mine_v = vals[tool]
                    below = sum(v < mine_v for v in vals.values())
                    equal = sum(v == mine_v for v in vals.values())
                    ranks.append(below + (equal + 1) / 2)
                cell["tools"][tool].setdefault("rank", {})[f"{int(f * 100)}%"] = (
                    statistics.fmean(ranks))
        peers = [t for t in tools if t not in TOOLS] or [t for t in tools if t != OURS]
        finals_ = {t: cell["tools"][t]["regret"]["100%"]["mean"] for t in peers}
        finals_ = {t: v for t, v in finals_.items() if v is not None}
        if OURS in tools and finals_:
            best = min(finals_, key=lambda t: finals_[t])
            traces = {t: [r["trace"] for r in mine if r["tool"] == t] for t in (OURS, best)}
            cell["speedup"] = {"ours": OURS, "best_peer": best, "goal": finals_[best],
                               **speedup(traces[OURS], traces[best], budget)}
        if OURS in tools:  # ours minus each baseline, paired by seed (< 0: ours better)
            for base in [b for b in BASELINES if b in tools]:
                cell.setdefault("against", {})[base] = {
                    f"{int(f * 100)}%": paired([at[(OURS, s, f)] - at[(base, s, f)]
                                                for s in seeds
                                                if (OURS, s, f) in at and (base, s, f) in at])
                    for f in FRACTIONS}
            # each other variant minus ours, paired by seed (< 0: it is better)
            for other in [v for v in VARIANTS if v != OURS and v in tools]:
                cell.setdefault("variants", {})[other] = {
                    f"{int(f * 100)}%": [at[(other, s, f)] - at[(OURS, s, f)] for s in seeds
                                         if (OURS, s, f) in at and (other, s, f) in at]
                    for f in FRACTIONS}
        out[f"{table} w{workers}"] = cell
    pooled: dict[str, Any] = {}  # the variants' paired differences over every cell
    for cell in out.values():
        for other, by_f in cell.get("variants", {}).items():
            for f, diffs in by_f.items():
                pooled.setdefault(other, {}).setdefault(f, []).extend(diffs)
            cell["variants"][other] = {f: paired(d) for f, d in by_f.items()}
    cells = list(out.values())
    tools_all = sorted({t for c in cells for t in c["tools"]})
    out["average rank"] = {  # over every table and worker count (the goals' table)
        t: {f: statistics.fmean(c["tools"][t]["rank"][f] for c in cells if t in c["tools"])
            for f in (f"{int(x * 100)}%" for x in FRACTIONS)} for t in tools_all}
    out["variants against ours"] = {v: {f: paired(d) for f, d in by_f.items()}
                                    for v, by_f in pooled.items()}
    return out


def paired(diffs: list[float]) -> dict[str, Any]:
    """Mean and standard error of paired differences (None where a side had no incumbent)."""
    finite = [d for d in diffs if math.isfinite(d)]
    if len(finite) < 2 or len(finite) != len(diffs):
        return {"mean": None, "se": None, "n": len(diffs)}
    return {"mean": statistics.fmean(finite),
            "se": statistics.stdev(finite) / math.sqrt(len(finite)), "n": len(finite)}


def markdown(summary: dict[str, Any]) -> str:
    """The docs' tables: average rank, then each table and worker count's regret and the
    speed-up against the best peer."""
    cols = [f"{int(x * 100)}%" for x in FRACTIONS]
    ranks = summary["average rank"]
    lines = ["| tool | " + " | ".join(f"rank at {c}" for c in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for t in sorted(ranks, key=lambda t: ranks[t]["100%"]):
        lines.append(f"| {t} | " + " | ".join(f"{ranks[t][c]:.2f}" for c in cols) + " |")
    for key, cell in summary.items():
        if key in ("average rank", "variants against ours"):
            continue
        lines += ["", f"**{key}** (budget {cell['budget_s']:.3g} simulated s, "
                  f"{cell['seeds']} seeds)", "",
                  "| tool | " + " | ".join(f"regret at {c}" for c in cols) + " |",
                  "|---|" + "---|" * len(cols)]
        for t, st in sorted(cell["tools"].items(), key=lambda kv: kv[1]["rank"]["100%"]):
            vals = [st["regret"][c] for c in cols]
            lines.append(f"| {t} | " + " | ".join(
                "-" if v["mean"] is None else f"{v['mean']:.3f} ± {v['se'] or 0:.3f}"
                for v in vals) + " |")
        sp = cell.get("speedup")
        if sp:
            ratio = "not reached" if sp["ratio"] is None else (
                f"{sp['ratio']:.2f} ± {sp['se'] or 0:.2f}")
            lines += ["", f"time for {sp['ours']} to reach {sp['best_peer']}'s final regret "
                      f"({sp['goal']:.3f}) / {sp['best_peer']}'s own: {ratio} (reached in "
                      f"{sp['reached']:.0%} of bootstrap resamples)"]
        for base, diff in cell.get("against", {}).items():
            end = diff["100%"]
            if end["mean"] is not None:
                lines += ["", f"{OURS} minus {base}, final regret paired by seed: "
                          f"{end['mean']:+.3f} ± {end['se']:.3f}"]
    for v, by_f in summary.get("variants against ours", {}).items():
        lines += ["", f"{v} minus {OURS}, regret paired by seed over every table and worker "
                  "count: " + ", ".join(
                      f"{f} {d['mean']:+.3f} ± {d['se']:.3f}" for f, d in by_f.items()
                      if d["mean"] is not None)]
    return "\n".join(lines)


def _grid(budget: float, traces: list[list[tuple[float, float]]], points: int = 400) -> list:
    first = min((t[0][0] for t in traces if t), default=budget)
    return [first * (budget / first) ** (k / (points - 1)) for k in range(points)]


def reach_time(traces: list[list[tuple[float, float]]], goal: float,
               grid: list[float]) -> float | None:
    """The first moment the mean regret over ``traces`` (seeds) is at most ``goal``; a seed
    without an incumbent yet counts as not there. None: never within the budget."""
    for t in grid:
        vals = [regret_at(tr, t) for tr in traces]
        if all(v is not None for v in vals) and statistics.fmean(vals) <= goal + 1e-12:
            return t
    return None


def speedup(ours: list[list[tuple[float, float]]], peer: list[list[tuple[float, float]]],
            budget: float, resamples: int = 200) -> dict[str, Any]:
    """How much sooner our mean regret reaches the best peer's final mean regret than the
    peer's own mean does: ``ratio`` = our time / the peer's time (<= 0.5: >= 2x faster), with a
    bootstrap standard error over seeds (each tool's seeds resampled); ``reached``: the share
    of resamples in which ours got there within the budget."""
    import random

    grid = _grid(budget, ours + peer)

    def ratio(a: list, b: list) -> float | None:
        ends = [regret_at(tr, budget) for tr in b]
        goal = statistics.fmean(v for v in ends if v is not None)
        tb, ta = reach_time(b, goal, grid), reach_time(a, goal, grid)
        return None if ta is None or tb is None else ta / tb

    point = ratio(ours, peer)
    rng = random.Random(0)
    boot = [ratio([rng.choice(ours) for _ in ours], [rng.choice(peer) for _ in peer])
            for _ in range(resamples)]
    got = [b for b in boot if b is not None]
    return {"ratio": point, "se": statistics.stdev(got) if len(got) > 1 else None,
            "reached": len(got) / len(boot)}


def plot(runs: list[dict[str, Any]], directory: str) -> list[str]:
    """One PNG per table (``DIR/anytime-TABLE.png``): a panel per worker count, each tool's mean
    normalised regret over seeds against simulated time (log scale), its standard error as a
    band, from the moment every seed of that tool has an incumbent. The paths written."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    written = []
    for table in sorted({r["table"] for r in runs}):
        mine = [r for r in runs if r["table"] == table]
        workers = sorted({r["workers"] for r in mine})
        fig = make_subplots(rows=1, cols=len(workers), shared_yaxes=True,
                            subplot_titles=[f"{w} worker{'s' if w > 1 else ''}" for w in workers])
        for col, w in enumerate(workers, start=1):
            cell = [r for r in mine if r["workers"] == w]
            budget = cell[0]["budget_s"]
            names = sorted({r["tool"] for r in mine})  # one colour per tool, every panel
            for tool in sorted({r["tool"] for r in cell}):
                i = names.index(tool)
                traces = [r["trace"] for r in cell if r["tool"] == tool]
                first = max((t[0][0] for t in traces if t), default=budget)
                grid = [first * (budget / first) ** (k / 60) for k in range(61)]
                means, ses = [], []
                for t in grid:
                    vals = [regret_at(tr, t) for tr in traces]
                    vals = [v for v in vals if v is not None]
                    means.append(statistics.fmean(vals))
                    ses.append(statistics.stdev(vals) / math.sqrt(len(vals))
                               if len(vals) > 1 else 0.0)
                color = f"hsl({i * 360 // len(names)},{70 - 25 * (i % 2)}%,{40 + 12 * (i % 3)}%)"
                fig.add_trace(go.Scatter(x=grid + grid[::-1],
                                         y=[m + e for m, e in zip(means, ses, strict=True)] +
                                         [m - e for m, e in zip(means, ses, strict=True)][::-1],
                                         fill="toself", line={"width": 0}, fillcolor=color,
                                         opacity=0.15, showlegend=False, hoverinfo="skip"),
                              row=1, col=col)
                fig.add_trace(go.Scatter(x=grid, y=means, name=tool, legendgroup=tool,
                                         showlegend=col == 1, line={"color": color}),
                              row=1, col=col)
            fig.update_xaxes(type="log", title_text="simulated seconds", row=1, col=col)
        fig.update_yaxes(title_text="normalised regret (mean, SE band)", row=1, col=1)
        fig.update_layout(title=f"{table}: the incumbent's regret against time",
                          width=420 * len(workers) + 220, height=560, template="plotly_white")
        path = str(Path(directory) / f"anytime-{table}.png")
        fig.write_image(path)
        written.append(path)
    return written


@dataclass(frozen=True)
class Job:
    table: str  # the table's path
    workers: int
    seed: int
    tool: str
    budget: float  # in mean full trainings


@functools.lru_cache(maxsize=8)
def _table(path: str) -> Any:
    from search.simulated._curves import load_table

    return load_table(path)


def run_job(job: Job, peers_python: dict[str, str]) -> dict[str, Any]:
    """One run (ours in this process, a peer in its environment), with its trace; a run that
    failed carries its error (never raised: the other runs go on)."""
    import nb201  # benchmarks/nb201.py: the in-process Dask client of the table benchmarks

    table = _table(job.table)
    budget_s = job.budget * full_time(table)
    out: dict[str, Any] = {"table": table.name, "path": job.table, "workers": job.workers,
                           "seed": job.seed, "tool": job.tool, "budget": job.budget,
                           "budget_s": budget_s, "error": None}
    try:
        if job.tool in TOOLS:
            out |= run_tool(table, job.tool, workers=job.workers, seed=job.seed,
                            budget_s=budget_s, client=nb201._client())
        else:
            out |= run_peer(table, job.tool, workers=job.workers, seed=job.seed,
                            budget_s=budget_s,
                            peers_python=peers_python.get(job.tool, peers_python.get("")))
    except Exception as exc:  # noqa: BLE001 -- reported, and the run is left out of the tables
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["load1"] = round(os.getloadavg()[0], 2)
    return out


def _describe(r: dict[str, Any]) -> str:
    if r["error"]:
        return f"{r['table']} w{r['workers']} s{r['seed']} {r['tool']} ERROR {r['error']}"
    final = regret_at(r["trace"], r["budget_s"])
    return (f"{r['table']} w{r['workers']} s{r['seed']} {r['tool']:20s} regret "
            f"{'-' if final is None else f'{final:.3f}'} trials {r['trials']} "
            f"({r['wall_s']} s, load {r['load1']})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--table", action="append", help="a detol-curves table (repeatable; "
                   "default: every benchmarks/tables/*.jsonl.gz)")
    p.add_argument("--workers", default="1,8,32", help="simulated worker counts (1,8,32)")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--seeds-at", action="append", default=[], metavar="WORKERS=N",
                   help="fewer seeds at one worker count (its runs cost the most), e.g. 32=10")
    p.add_argument("--tools", default=",".join(TOOLS),
                   help="ours and peers (benchmarks/_common/anytime_peers.py), comma-separated")
    p.add_argument("--budget", type=float, default=20.0,
                   help="simulated budget in full trainings (mean, start included) per worker "
                        "count's clock (20)")
    p.add_argument("--json", help="write runs and summary here")
    p.add_argument("--runs", help="append each finished run here (JSON lines)")
    p.add_argument("--resume", action="store_true", help="skip the runs already in --runs")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (processes; 1)")
    p.add_argument("--max-minutes", type=float, help="start no run after this many minutes")
    p.add_argument("--peers-python", help="the peers' Python (benchmarks/peers_venv.sh)")
    p.add_argument("--peer-python", action="append", default=[], metavar="TOOL=PATH",
                   help="one peer's own Python (synetune-mobster and synetune-hypertune need "
                        "Syne Tune 0.13: benchmarks/peers_venv.sh makes "
                        ".peers-venv-synetune013)")
    p.add_argument("--plot", metavar="DIR", help="write DIR/anytime-TABLE.png per table")
    p.add_argument("--replot", metavar="JSON", help="only plot the runs of a written --json")
    args = p.parse_args(argv)
    if args.replot:
        if not args.plot:
            p.error("--replot needs --plot DIR")
        print("\n".join(plot(json.loads(Path(args.replot).read_text())["runs"], args.plot)))
        return 0
    import nb201
    from _common import job_pool
    from _common.anytime_peers import PEERS

    tables = args.table or TABLES
    if not tables:
        p.error("no table: record one (benchmarks/record_curves.py) or pass --table")
    for path in tables:
        if not Path(path).is_file():
            p.error(f"--table: no such file {path!r}")
    tools = args.tools.split(",")
    unknown = [t for t in tools if t not in TOOLS and t not in PEERS]
    if unknown:
        p.error(f"--tools: unknown {unknown} (known: {list(TOOLS)} and peers {list(PEERS)})")
    pythons: dict[str, str] = {}  # tool -> its Python ("": every other peer's)
    for tool, path in [("", args.peers_python)] + [
            tuple(x.partition("=")[::2]) for x in args.peer_python]:
        if path is None:
            continue
        if tool and tool not in PEERS:
            p.error(f"--peer-python: unknown peer {tool!r} (known: {list(PEERS)})")
        if not os.path.isfile(path):
            p.error(f"--peer{'s' if not tool else ''}-python: no such file {path!r} "
                    "(benchmarks/peers_venv.sh makes it)")
        pythons[tool] = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    if args.resume and not args.runs:
        p.error("--resume needs --runs PATH")
    runs_path = Path(args.runs) if args.runs else None
    old: list[dict[str, Any]] = []
    if runs_path and args.resume and runs_path.exists():
        old = [json.loads(line) for line in runs_path.read_text().splitlines() if line.strip()]
        old = [r for r in old if not r.get("error") and r["budget"] == args.budget
               and r["path"] in tables]
    have = {(r["path"], r["workers"], r["seed"], r["tool"], r["budget"]) for r in old}
    workers = [int(w) for w in args.workers.split(",")]
    # Seed by seed, every tool, table and worker count: a run cut short stays balanced.
    seeds_at = {int(w): int(n) for w, _, n in (x.partition("=") for x in args.seeds_at)}
    jobs = [Job(path, w, s, t, args.budget) for s in range(args.seeds) for w in workers
            for path in tables for t in tools if s < seeds_at.get(w, args.seeds)]
    jobs = [j for j in jobs if (j.table, j.workers, j.seed, j.tool, j.budget) not in have]
    new = job_pool.run_jobs(jobs, functools.partial(run_job, peers_python=pythons),
                            workers=args.jobs, initializer=nb201._pool_init,
                            runs_path=runs_path, max_minutes=args.max_minutes,
                            describe=_describe)
    runs = [r for r in old + new if not r["error"]]
    errors = [r for r in new if r["error"]]
    for r in errors:
        print(_describe(r), file=sys.stderr)
    summary = summarise(runs)
    print(markdown(summary))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "runs": runs}, indent=1))
    if args.plot:
        print("\n".join(plot(runs, args.plot)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
