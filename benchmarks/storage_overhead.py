"""Benchmark Optuna's per-trial storage overhead.

What is measured: the cost of the storage round trips of one trial, i.e. one
``study.ask()``, ``trial.report(x, step)`` for 3 steps and one
``study.tell(trial, value)``. The objective does no work and suggests no
parameters, so the time is storage (plus Optuna bookkeeping) only.

Storages:

* ``inmemory`` -- ``optuna.storages.InMemoryStorage`` (yardstick),
* ``journal``  -- ``JournalStorage(JournalFileBackend(path))``,
* ``sqlite``   -- ``RDBStorage("sqlite:///path")``.

Scenarios:

(a) single process: N trials in one process (full 300, ``--quick`` 60),
    reported as ms per trial and as a ratio to the in-memory yardstick.
(b) multi process: P processes (``multiprocessing``, spawn context) write to the
    same study at once, each loading the study by name and running its own
    ask/report/tell loop (full 8 x 40 trials, ``--quick`` 4 x 15). Workers
    import Optuna and load the study first, then wait on a barrier; the wall
    time runs from the barrier release to the last worker's end, so process
    start-up is not counted. Per-trial exceptions (e.g. "database is locked")
    are counted, and the final study must hold exactly P x N COMPLETE trials.
    In-memory storage cannot be shared between processes, so (b) covers
    journal and sqlite only.

Every measurement uses a fresh ``tempfile.TemporaryDirectory``.

Command line::

    python benchmarks/storage_overhead.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import optuna
from _common import machine, now_iso  # benchmarks/_common/ (the script directory)
from optuna.storages import BaseStorage, InMemoryStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

STUDY_NAME = "storage_overhead"
REPORT_STEPS = 3
WARMUP_TRIALS = 5
BARRIER_TIMEOUT_S = 120.0
RESULT_TIMEOUT_S = 600.0

SINGLE_STORAGES = ("inmemory", "journal", "sqlite")
MULTI_STORAGES = ("journal", "sqlite")


def make_storage(name: str, workdir: str) -> BaseStorage:
    """Build the storage called ``name`` with its files under ``workdir``."""
    if name == "inmemory":
        return InMemoryStorage()
    if name == "journal":
        return JournalStorage(JournalFileBackend(os.path.join(workdir, "journal.log")))
    if name == "sqlite":
        return RDBStorage(f"sqlite:///{os.path.join(workdir, 'optuna.db')}")
    raise ValueError(f"unknown storage: {name}")


def new_sampler() -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=0)


def run_one_trial(study: optuna.Study) -> None:
    """One ask, REPORT_STEPS reports, one tell; no objective work."""
    trial = study.ask()
    for step in range(REPORT_STEPS):
        trial.report(float(step), step)
    study.tell(trial, 0.0)


def count_complete(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def measure_single(name: str, n_trials: int) -> dict[str, Any]:
    """Scenario (a): n_trials timed trials in this process (after a warm-up)."""
    with tempfile.TemporaryDirectory(prefix=f"bench_{name}_") as workdir:
        storage = make_storage(name, workdir)
        study = optuna.create_study(study_name=STUDY_NAME, storage=storage, sampler=new_sampler())
        for _ in range(WARMUP_TRIALS):
            run_one_trial(study)
        t0 = time.perf_counter()
        for _ in range(n_trials):
            run_one_trial(study)
        elapsed = time.perf_counter() - t0
        complete = count_complete(study)
        del study, storage
    return {
        "elapsed_s": elapsed,
        "ms_per_trial": elapsed * 1000.0 / n_trials,
        "complete": complete,
        "expected": n_trials + WARMUP_TRIALS,
    }


def _worker(
    name: str,
    workdir: str,
    n_trials: int,
    barrier: Any,
    results: Any,
) -> None:
    """Scenario (b) worker: load the study by name, wait, run its own loop."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    errors: Counter[str] = Counter()
    try:
        storage = make_storage(name, workdir)
        study = optuna.load_study(study_name=STUDY_NAME, storage=storage, sampler=new_sampler())
    except Exception as exc:  # a benchmark counts failures, it does not crash
        barrier.abort()
        results.put((os.getpid(), 0.0, 0.0, n_trials, {_describe(exc): n_trials}))
        return
    # Broken barrier (another worker failed): run anyway, the errors show up there.
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait(BARRIER_TIMEOUT_S)
    start = time.monotonic()
    for _ in range(n_trials):
        try:
            run_one_trial(study)
        except Exception as exc:  # errors are part of the measurement
            errors[_describe(exc)] += 1
    end = time.monotonic()
    results.put((os.getpid(), start, end, sum(errors.values()), dict(errors)))


def _describe(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:120]}"


def measure_multi(name: str, processes: int, trials_each: int) -> dict[str, Any]:
    """Scenario (b): `processes` spawned workers share one study."""
    ctx = multiprocessing.get_context("spawn")
    total = processes * trials_each
    with tempfile.TemporaryDirectory(prefix=f"bench_mp_{name}_") as workdir:
        storage = make_storage(name, workdir)
        optuna.create_study(study_name=STUDY_NAME, storage=storage, sampler=new_sampler())
        barrier = ctx.Barrier(processes + 1)
        results = ctx.Queue()
        procs = [
            ctx.Process(target=_worker, args=(name, workdir, trials_each, barrier, results))
            for _ in range(processes)
        ]
        for proc in procs:
            proc.start()
        # A broken barrier means a worker failed to load the study; it reports below.
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(BARRIER_TIMEOUT_S)
        reports = [results.get(timeout=RESULT_TIMEOUT_S) for _ in procs]
        for proc in procs:
            proc.join()

        timed = [r for r in reports if r[2] > 0.0]
        wall = max(r[2] for r in timed) - min(r[1] for r in timed) if timed else 0.0
        errors = sum(r[3] for r in reports)
        messages: Counter[str] = Counter()
        for r in reports:
            messages.update(r[4])
        study = optuna.load_study(study_name=STUDY_NAME, storage=make_storage(name, workdir))
        complete = count_complete(study)
        n_all = len(study.get_trials(deepcopy=False))
        del study, storage
    return {
        "wall_s": wall,
        "ms_per_trial": wall * 1000.0 / total,
        "errors": errors,
        "complete": complete,
        "all_trials": n_all,
        "expected": total,
        "messages": dict(messages),
        "exitcodes": [p.exitcode for p in procs],
    }


def choose(multi: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """Pick the storage with the lower multi-process wall time and zero errors."""
    clean = [
        n
        for n in MULTI_STORAGES
        if multi[n]["errors"] == 0 and multi[n]["complete"] == multi[n]["expected"]
    ]
    j, s = multi["journal"]["wall_s"], multi["sqlite"]["wall_s"]
    if clean:
        best = min(clean, key=lambda n: multi[n]["wall_s"])
        other = "sqlite" if best == "journal" else "journal"
        if other in clean:
            ratio = multi[other]["wall_s"] / multi[best]["wall_s"]
            reason = (
                f"both error-free with all {multi[best]['expected']} trials complete; "
                f"{best} is {ratio:.2f}x faster in wall time "
                f"(journal {j:.2f} s vs sqlite {s:.2f} s)"
            )
        else:
            reason = (
                f"{best} is the only storage with zero errors and all trials complete "
                f"({other}: {multi[other]['errors']} errors, "
                f"{multi[other]['complete']}/{multi[other]['expected']} complete)"
            )
        return best, reason
    best = min(MULTI_STORAGES, key=lambda n: (multi[n]["errors"], multi[n]["wall_s"]))
    return best, (
        f"no storage was error-free; {best} had the fewest errors ({multi[best]['errors']})"
    )


def format_table(
    single: dict[str, dict[str, Any]],
    multi: dict[str, dict[str, Any]],
    processes: int,
    trials_each: int,
) -> str:
    header = (
        f"{'scenario':<22} {'storage':<9} {'trials':>6} {'ms/trial':>9} "
        f"{'trials/s':>9} {'errors':>6} {'complete':>9} {'ratio':>7}"
    )
    lines = [header, "-" * len(header)]
    base = single["inmemory"]["ms_per_trial"]
    for name in SINGLE_STORAGES:
        r = single[name]
        ms = r["ms_per_trial"]
        lines.append(
            f"{'(a) 1 process':<22} {name:<9} {r['expected'] - WARMUP_TRIALS:>6} "
            f"{ms:>9.3f} {1000.0 / ms:>9.1f} {0:>6} "
            f"{str(r['complete']) + '/' + str(r['expected']):>9} {ms / base:>7.2f}"
        )
    sqlite_wall = multi["sqlite"]["wall_s"]
    for name in MULTI_STORAGES:
        r = multi[name]
        ms = r["ms_per_trial"]
        ratio = r["wall_s"] / sqlite_wall if sqlite_wall > 0 else float("nan")
        lines.append(
            f"{f'(b) {processes} procs x {trials_each}':<22} {name:<9} "
            f"{r['expected']:>6} {ms:>9.3f} {1000.0 / ms if ms else 0.0:>9.1f} "
            f"{r['errors']:>6} {str(r['complete']) + '/' + str(r['expected']):>9} "
            f"{ratio:>7.2f}"
        )
    lines.append(
        "ratio: (a) ms/trial relative to inmemory; (b) wall time relative to sqlite "
        "(journal row = journal/sqlite)."
    )
    lines.append(
        f"(a) excludes {WARMUP_TRIALS} warm-up trials (counted in 'complete'); "
        "(b) ms/trial = wall time / total trials, process start-up excluded."
    )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small run: 60 trials, 4 x 15 in (b)")
    parser.add_argument("--json", type=Path, default=None, help="write results as JSON here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    n_single = 60 if args.quick else 300
    processes, trials_each = (4, 15) if args.quick else (8, 40)

    single = {name: measure_single(name, n_single) for name in SINGLE_STORAGES}
    multi = {name: measure_multi(name, processes, trials_each) for name in MULTI_STORAGES}

    print(format_table(single, multi, processes, trials_each))
    # Warnings are findings (e.g. "database is locked"); failures mean the
    # benchmark itself is inconsistent and make the exit status 1.
    warnings: list[str] = []
    failures: list[str] = []
    for name, r in single.items():
        if r["complete"] != r["expected"]:
            failures.append(f"(a) {name}: {r['complete']}/{r['expected']} COMPLETE")
    for name, r in multi.items():
        if r["complete"] != r["expected"]:
            target = failures if r["complete"] != r["expected"] - r["errors"] else warnings
            target.append(
                f"(b) {name}: {r['complete']}/{r['expected']} COMPLETE "
                f"({r['all_trials']} trials in study, {r['errors']} errors)"
            )
        for msg, count in r["messages"].items():
            warnings.append(f"(b) {name}: {count} x {msg}")
        if any(code != 0 for code in r["exitcodes"]):
            failures.append(f"(b) {name}: worker exit codes {r['exitcodes']}")
    for line in warnings:
        print(f"WARNING {line}")
    for line in failures:
        print(f"FAILURE {line}")

    choice, reason = choose(multi)
    print(f"choice: {choice} ({reason})")

    if args.json is not None:
        base = single["inmemory"]["ms_per_trial"]
        multi_out: dict[str, Any] = {
            "processes": processes,
            "trials": processes * trials_each,
        }
        for name, r in multi.items():
            multi_out[name] = {
                "wall_s": r["wall_s"],
                "ms_per_trial": r["ms_per_trial"],
                "errors": r["errors"],
                "complete": r["complete"],
            }
        payload = {
            "benchmark": "storage_overhead",
            "date": now_iso(),
            "machine": machine("optuna"),
            "quick": args.quick,
            "single_process": {
                name: {
                    "ms_per_trial": r["ms_per_trial"],
                    "ratio_to_inmemory": r["ms_per_trial"] / base,
                }
                for name, r in single.items()
            },
            "multi_process": multi_out,
            "choice": choice,
            "reason": reason,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
