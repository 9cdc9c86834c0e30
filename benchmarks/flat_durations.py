"""What 8 running costs on the flat tables, and why: the same runs with each evaluation's
training time drawn independently of its configuration.

What is measured: ``benchmarks/flat.py``'s protocol (the real driver, the simulated clock, one
noisy training seed per evaluation, normalised regret at 100 evaluations) with one change, the
*durations*: an evaluation observes its configuration's metric exactly as in ``flat.py``, but
the simulated clock advances by the training time of another row and seed of the same table,
drawn from the evaluation's noise seed (so independent of the configuration, from the same
distribution of times). On five of the six HPOBench tables the best configurations train 5 to 44
times longer than the median one (``credit_g``: 1.3; printed per table: Spearman's rho of a
configuration's mean training time and its seed mean, and the top 1 %'s median time over the
median); with 8 running their results arrive last, so the model learns late where the good
region is. If the 8-running gap of
``flat.py`` is that and not the strategy's handling of running trials, it vanishes here.

Reported per table and over them, paired by seed (``flat.paired``) with ``flat.py``'s stored runs
(``--stored``, the same strategy, seeds and tables): independent durations with 8 running minus
sequential, the stored 8 running minus sequential, and independent minus stored 8 running.

Command::

    python benchmarks/flat_durations.py [--strategy predictor] [--tables T ...] [--seeds 30]
        [--runs results/flat_durations.runs.jsonl [--resume]] [--json PATH] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import flat
import nb201
import numpy as np
from _common import job_pool, machine, now_iso

HPOBENCH_UNTIED = ("australian", "blood_transfusion", "credit_g", "kc1", "phoneme")
VARIANT = "independent_durations"


def independent_durations(
    observe: Callable[[str, str, int], tuple[float, float]],
) -> Callable[[str, str, int], tuple[float, float]]:
    """``observe`` (``search.simulated._flat.observe``) with the time replaced: the metric of
    ``key`` as before, the training time of a row and seed drawn from the noise seed alone."""
    from search.simulated import _flat

    def wrapped(key: str, dataset: str, noise_seed: int) -> tuple[float, float]:
        value, _ = observe(key, dataset, noise_seed)
        times = _flat.table(dataset).train_time_s
        rng = np.random.default_rng([noise_seed, 7])
        row, seed = int(rng.integers(times.shape[0])), int(rng.integers(times.shape[1]))
        return value, float(times[row, seed])

    return wrapped


def _pool_init() -> None:
    from search.simulated import _flat

    nb201._pool_init()
    _flat.observe = independent_durations(_flat.observe)


def _run(job: flat.Job) -> dict[str, Any]:
    return {**flat.run_job(job, None), "variant": VARIANT}


def time_quality(table: str) -> dict[str, float]:
    """Spearman's rho of each configuration's mean training time and its seed mean (higher =
    better), and the top 1 %'s median time over the median time."""
    from scipy.stats import spearmanr

    from search.simulated import _flat

    t = _flat.table(table)
    time_s = t.train_time_s.mean(axis=1)
    score = t.mean if t.direction == "maximize" else -t.mean
    top = score >= np.quantile(score, 0.99)
    return {"rho": float(spearmanr(time_s, score)[0]),
            "top_1pct_time_over_median": float(np.median(time_s[top]) / np.median(time_s))}


def compare(variant: list[dict[str, Any]], stored: list[dict[str, Any]], strategy: str,
            tables: list[str]) -> dict[str, Any]:
    """Per table and over ``tables``, paired by seed: independent 8 running minus stored
    sequential, stored 8 running minus stored sequential, independent minus stored 8 running."""
    def regrets(runs: list[dict[str, Any]], conc: int) -> dict[tuple[str, int], float]:
        return flat._regrets([r for r in runs if r["optimizer"] == strategy], conc)  # noqa: SLF001

    ind, seq, c8 = regrets(variant, flat.CONCURRENT), regrets(stored, 1), regrets(
        stored, flat.CONCURRENT)
    pairs = {"independent_minus_sequential": (ind, seq), "stored_minus_sequential": (c8, seq),
             "independent_minus_stored": (ind, c8)}
    return {name: {"mean": flat.paired(a, b, tables),
                   **{tb: flat.paired(a, b, [tb]) for tb in tables}}
            for name, (a, b) in pairs.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--strategy", default="predictor")
    p.add_argument("--tables", nargs="+", choices=flat.TABLES, default=list(HPOBENCH_UNTIED))
    p.add_argument("--seeds", type=int, default=flat.SEEDS)
    p.add_argument("--stored", default=str(flat.ROOT / "benchmarks/results/flat.runs.jsonl"),
                   help="flat.py's runs (sequential and 8 running of --strategy)")
    p.add_argument("--runs", help="append every finished run here (JSON lines)")
    p.add_argument("--resume", action="store_true", help="skip runs already in --runs")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--workers", type=int, default=1)
    args = p.parse_args(argv)

    runs_path = Path(args.runs) if args.runs else None
    old = ([json.loads(x) for x in runs_path.read_text().splitlines() if x.strip()]
           if runs_path and args.resume and runs_path.exists() else [])
    have = {(r["optimizer"], r["table"], r["seed"]) for r in old if not r["error"]}
    jobs = [flat.Job(args.strategy, tb, s, flat.CONCURRENT, flat.EVALUATIONS)
            for s in range(args.seeds) for tb in args.tables
            if (args.strategy, tb, s) not in have]
    runs = old + job_pool.run_jobs(
        jobs, _run, workers=args.workers, initializer=_pool_init, runs_path=runs_path,
        max_minutes=None,
        describe=lambda r: f"{r['table']} s{r['seed']} " + (
            f"ERROR {r['error']}" if r["error"] else f"regret {r['regret']:.3f}"))
    stored = [json.loads(x) for x in Path(args.stored).read_text().splitlines() if x.strip()]
    figures = compare(runs, stored, args.strategy, args.tables)
    times = {tb: time_quality(tb) for tb in args.tables}
    for name, per in figures.items():
        cells = [f"{k} {v['regret']:+.2f} ± {v['stderr']:.2f}" for k, v in per.items() if v]
        print(f"{name} ({per['mean']['seeds'] if per['mean'] else 0} seeds): " + "; ".join(cells))
    for tb, tq in times.items():
        print(f"{tb}: rho {tq['rho']:+.2f}, "
              f"top 1 % time / median {tq['top_1pct_time_over_median']:.1f}")
    if args.json:
        doc = {"benchmark": "flat_durations", "date": now_iso(),
               "machine": machine(*flat.PACKAGES, workers=args.workers),
               "settings": {"strategy": args.strategy, "tables": args.tables,
                            "seeds": args.seeds, "stored": args.stored,
                            "protocol": __doc__.split("\n\n")[1]},
               "time_quality": times, "results": figures}
        Path(args.json).write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
