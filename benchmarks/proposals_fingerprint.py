"""A fingerprint of what every strategy proposes on NAS-Bench-201, to prove that a change which
should not alter behaviour (issue 29's move of ``search/`` into folders) did not.

What runs: every strategy in ``search.strategies._registry.STRATEGIES`` searches the NAS-Bench-201
cell space through the real driver path, as ``benchmarks/nb201.py`` runs it -- ``search.Driver`` on
a ``distributed.Client`` (threads, one worker), Optuna in-memory storage, ``objective =
"nb201:cifar10"`` answered by the table, the driver's simulated clock advanced by the table's
training time -- once with one trial at a time and once with ``CONCURRENT`` trials running, for
``SEEDS`` strategy seeds each. Every trial's parameters (the proposal), in trial-number order, go
into one SHA-256 per strategy; the told values go into a second hash beside it.

This is not a speed benchmark: it prints and writes hashes, and ``--compare OLD.json`` says per
strategy whether the proposals are identical to an earlier run (exit 1 when any differs).

Command::

    python benchmarks/proposals_fingerprint.py [--quick] [--json PATH] [--compare OLD.json]
                                               [--strategies S ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from _common import machine, now_iso  # benchmarks/_common/ (the script directory)

SEEDS = (0, 1, 2)
TRIALS = 120
CONCURRENT = 4
# GP asks take ~0.3 s each at 100 trials: fewer of them, still a few hundred proposals.
SLOW = {"gp": ((0,), 80)}
QUICK = ((0,), 40)


def study_dict(strategy: str, seed: int, concurrency: int, trials: int) -> dict[str, Any]:
    return {
        "name": f"fingerprint-{strategy}-s{seed}-c{concurrency}",
        "objective": "nb201:cifar10",
        "metric": "val_accuracy",
        "budget": {"trials": trials, "concurrency": concurrency},
        "strategy": {"name": strategy, "seed": seed},
        "pruner": {"name": "none"},
        "space": {"genome": {"family": "cell"}},
    }


def run(strategy: str, seed: int, concurrency: int, trials: int, client: Any) -> list[Any]:
    """One search through the driver; ``(number, state, params, values)`` per trial."""
    import optuna

    from search import Driver, open_study, parse_study

    sf = parse_study(study_dict(strategy, seed, concurrency, trials))
    study = open_study(sf, optuna.storages.InMemoryStorage())
    Driver(sf, study, client, storage_url="").run(
        trials=trials, concurrency=concurrency, timeout=None
    )
    rows = []
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        params = {k: repr(v) for k, v in sorted(t.params.items())}
        rows.append([t.number, t.state.name, params, t.values])
    return rows


def fingerprint(strategy: str, seeds: tuple[int, ...], trials: int, client: Any) -> dict[str, Any]:
    proposals, values = hashlib.sha256(), hashlib.sha256()
    count = 0
    started = time.perf_counter()
    for concurrency in (1, CONCURRENT):
        for seed in seeds:
            for number, state, params, vals in run(strategy, seed, concurrency, trials, client):
                head = f"{concurrency}/{seed}/{number}/"
                proposals.update((head + json.dumps(params, sort_keys=True) + "\n").encode())
                values.update((head + state + json.dumps(vals) + "\n").encode())
                count += 1
    return {
        "proposals": count,
        "sha256": proposals.hexdigest(),
        "values_sha256": values.hexdigest(),
        "seeds": list(seeds),
        "trials_per_run": trials,
        "wall_s": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one seed, 40 trials per run")
    p.add_argument("--json", help="write the hashes to this JSON file")
    p.add_argument("--compare", help="an earlier --json file: exit 1 if any proposals differ")
    p.add_argument("--strategies", nargs="*", help="default: every registered strategy")
    args = p.parse_args(argv)

    import optuna
    from distributed import Client

    from search.strategies._registry import STRATEGIES

    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    names = args.strategies or list(STRATEGIES)
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        print(f"--strategies: unknown {unknown} (known: {sorted(STRATEGIES)})", file=sys.stderr)
        return 2
    old = json.loads(Path(args.compare).read_text())["strategies"] if args.compare else None

    result: dict[str, Any] = {}
    with Client(processes=False, n_workers=1, threads_per_worker=CONCURRENT,
                dashboard_address=None) as client:
        for name in names:
            seeds, trials = QUICK if args.quick else SLOW.get(name, (SEEDS, TRIALS))
            result[name] = fingerprint(name, tuple(seeds), trials, client)
            r = result[name]
            verdict = ""
            if old is not None:
                before = old.get(name, {}).get("sha256")
                verdict = "  identical" if before == r["sha256"] else f"  DIFFERS (was {before})"
            print(f"{name:10} {r['proposals']:5} proposals  {r['sha256'][:16]}  "
                  f"values {r['values_sha256'][:16]}  {r['wall_s']:6.1f} s{verdict}", flush=True)
    total = sum(r["proposals"] for r in result.values())
    print(f"total {total} proposals; load average {os.getloadavg()}")
    if args.json:
        doc = {"benchmark": "proposals_fingerprint", "date": now_iso(),
               "machine": machine("optuna", "torch", "numpy"), "strategies": result}
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    if old is not None:
        differ = [n for n in result if old.get(n, {}).get("sha256") != result[n]["sha256"]]
        if differ:
            print(f"proposals differ for {differ}", file=sys.stderr)
            return 1
        print(f"proposals identical for all {len(result)} strategies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
