"""Benchmark the driver's overhead: bookkeeping, MPI trial launch (cold vs warm), storage.

Three measurements, each beside its yardstick, in one run:

* ``bookkeeping`` -- N trials (full 200, ``--quick`` 20) whose objective just sleeps 0.5 s,
  2 at a time, through the real driver (``search.Driver`` on the 2-worker LocalCluster that
  ``search run`` starts, a function objective ``objective = "bk_sleep:objective"``, random
  sampler, no pruner, journal storage). Ideal wall time: N x 0.5 s / 2. Reported: the driver
  loop alone (first ask to the last tell) and including the cluster's start-up (and close).
  Yardstick: Ray Tune's published bookkeeping release test, 715 s for an ideal 625 s (1.14);
  goal <= 1.05. Floor: the same sleeps on a bare 2-worker Dask LocalCluster (no driver).
* ``mpi_launch`` -- one 2-rank, 1-epoch digits trial of a journal study, as the driver runs it
  minus Dask: ``study.ask()``, ``run_trial(spec)``, ``study.tell()``. Measured: ask -> first
  training step (the worker stamps it) and finish -> tell (rank 0's result written, after the
  last step and the final evaluation, to the end of ``study.tell``). Cold = today's
  ``mpiexec ... python -m training.jobs.worker``; warm = ``spec.warm`` on a pool started before the
  timing (``training.launch._warm_pool``). Median of R (full 5, ``--quick`` 2), cold and warm
  interleaved.
  Yardstick: the cold path (ratio warm / cold).
* ``storage`` -- ask+tell throughput with 8 concurrent client processes (spawned; they load
  the study, wait on a barrier, then each runs its share: full 8 x 50, ``--quick`` 8 x 10) on
  the journal file (the embedded default) and on PostgreSQL (a throwaway server, initdb +
  pg_ctl, skipped when those are not installed). Yardstick: the same loop in one process on
  Optuna's in-memory storage.

Command line::

    python benchmarks/overhead.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
from _common import machine, now_iso  # benchmarks/_common/ (the script directory)
from optuna.trial import TrialState

from training.contract import open_storage
from training.launch import run_trial, shutdown_pools

REPO = Path(__file__).resolve().parents[1]  # tests/pg_server.py lives there

SLEEP_S = 0.5
CONCURRENCY = 2
RAY_TUNE = {"wall_s": 715.0, "ideal_s": 625.0, "ratio": 715.0 / 625.0,
            "source": "Ray Tune release test 'bookkeeping overhead' (published figures)"}
GOAL_RATIO = 1.05
RANKS = 2
MPI_CONFIG: dict[str, Any] = {"dataset": "digits", "epochs": 1, "ranks": RANKS, "hidden": 32}
TRIAL_TIMEOUT_S = 300.0
CLIENTS = 8
BARRIER_TIMEOUT_S = 120.0

SLEEP_MODULE = f"import time\n\n\ndef objective(params):\n    time.sleep({SLEEP_S})\n" \
    "    return params['x']\n"
STUDY_TOML = """name = "overhead-bookkeeping"
objective = "bk_sleep:objective"
metric = "y"
direction = "minimize"
pruner = "none"
[strategy]
name = "random"
seed = 0
[budget]
trials = {trials}
concurrency = {concurrency}
[space]
x = {{ type = "float", low = -1, high = 1 }}
"""


class BenchmarkError(RuntimeError):
    pass


# ---------------------------------------------------------------- bookkeeping


def _sleep(i: int) -> int:
    time.sleep(SLEEP_S)
    return i


def dask_floor(trials: int) -> dict[str, Any]:
    """The same sleeps on a bare 2-worker LocalCluster, resubmitted as each ends: no Optuna, no
    storage, no driver. What Dask alone costs here (the floor under the driver's ratio)."""
    from distributed import Client, LocalCluster, wait

    with (
        LocalCluster(n_workers=CONCURRENCY, threads_per_worker=1, processes=True,
                     host="127.0.0.1", dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        client.run(lambda: None)
        t0 = time.perf_counter()
        running = {client.submit(_sleep, i, pure=False) for i in range(CONCURRENCY)}
        submitted = CONCURRENCY
        while running:
            done, _ = wait(list(running), return_when="FIRST_COMPLETED")
            for future in done:
                running.discard(future)
                if submitted < trials:
                    running.add(client.submit(_sleep, submitted, pure=False))
                    submitted += 1
        wall = time.perf_counter() - t0
    ideal = trials * SLEEP_S / CONCURRENCY
    return {"trials": trials, "wall_s": wall, "ideal_s": ideal, "ratio": wall / ideal}


@contextlib.contextmanager
def _cwd(path: str) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def bookkeeping(trials: int) -> dict[str, Any]:
    """The driver on a LocalCluster, as ``search run`` does it, with a sleeping objective."""
    import dask

    from search.driver._driver import Driver
    from search.driver._open_cluster import open_client
    from search.driver._study import open_study
    from search.studyfile._study_file import load_study_file

    dask.config.set({"distributed.scheduler.allowed-failures": 0})  # as search run
    ideal = trials * SLEEP_S / CONCURRENCY
    with tempfile.TemporaryDirectory(prefix="bench_bk_") as workdir, _cwd(workdir):
        Path("bk_sleep.py").write_text(SLEEP_MODULE)
        Path("study.toml").write_text(STUDY_TOML.format(trials=trials, concurrency=CONCURRENCY))
        url = os.path.join(workdir, "study.journal")
        t0 = time.perf_counter()
        sf = load_study_file("study.toml")
        storage = open_storage(url)
        with open_client(sf.cluster, concurrency=CONCURRENCY, max_ranks=sf.max_ranks,
                         launcher=sf.launcher.command, study_name=sf.name) as client:
            workers = len(client.scheduler_info()["workers"])
            t1 = time.perf_counter()
            study = open_study(sf, storage)
            counts = Driver(sf, study, client, storage_url=url).run(
                trials=trials, concurrency=CONCURRENCY, timeout=None
            )
            t2 = time.perf_counter()
        t3 = time.perf_counter()
        complete = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    if complete != trials or counts.failed:
        raise BenchmarkError(f"bookkeeping: {complete}/{trials} COMPLETE, {counts.failed} failed "
                             f"({counts.failures[:3]})")
    return {
        "trials": trials,
        "concurrency": CONCURRENCY,
        "workers": workers,
        "sleep_s": SLEEP_S,
        "ideal_s": ideal,
        "driver_loop_s": t2 - t1,
        "with_startup_s": t2 - t0,
        "with_startup_and_close_s": t3 - t0,
        "cluster_startup_s": t1 - t0,
        "ratio_driver_loop": (t2 - t1) / ideal,
        "ratio_with_startup": (t2 - t0) / ideal,
        "ratio_with_startup_and_close": (t3 - t0) / ideal,
    }


# ---------------------------------------------------------------- MPI launch


def _mpi_trial(study: optuna.Study, journal: str, warm: bool) -> dict[str, float]:
    trial = study.ask()
    ask_time = time.time()
    spec = {
        "config": dict(MPI_CONFIG),
        "study_name": study.study_name,
        "storage_url": journal,
        "trial_id": trial._trial_id,  # noqa: SLF001 - rank 0 reopens this very trial
        "trial_number": trial.number,
        "ask_time": ask_time,
        "timeout_s": TRIAL_TIMEOUT_S,
        "warm": warm,
    }
    result = run_trial(spec)
    if result.get("state") != "complete":
        study.tell(trial, state=TrialState.FAIL)
        raise BenchmarkError(f"trial did not complete: {str(result.get('exit_reason'))[-2000:]}")
    study.tell(trial, result["values"]["val_accuracy"])
    told = time.time()
    return {
        "ask_to_first_step_s": result["launch_overhead_s"],
        "finish_to_tell_s": told - result["finish_time"],
        "train_s": result["finish_time"] - (ask_time + result["launch_overhead_s"]),
        "wall_s": told - ask_time,
        "fresh_pool": float(bool(result.get("pool", {}).get("fresh"))),
    }


def mpi_launch(repeats: int) -> dict[str, Any]:
    samples: dict[str, list[dict[str, float]]] = {"cold": [], "warm": []}
    with tempfile.TemporaryDirectory(prefix="bench_mpi_") as workdir:
        os.environ.setdefault("DETOL_CACHE", os.path.join(workdir, "cache"))
        journal = os.path.join(workdir, "study.journal")
        study = optuna.create_study(study_name="overhead-mpi", storage=open_storage(journal),
                                    direction="maximize",
                                    sampler=optuna.samplers.RandomSampler(seed=0))
        try:
            _mpi_trial(study, journal, warm=False)  # untimed: page cache, dataset cache
            first_warm = _mpi_trial(study, journal, warm=True)  # untimed: starts the pool
            for _ in range(repeats):
                samples["cold"].append(_mpi_trial(study, journal, warm=False))
                samples["warm"].append(_mpi_trial(study, journal, warm=True))
        finally:
            shutdown_pools()
    if any(s["fresh_pool"] for s in samples["warm"]):
        raise BenchmarkError("a timed warm trial started a fresh pool")
    keys = ("ask_to_first_step_s", "finish_to_tell_s", "train_s", "wall_s")
    med = {path: {k: statistics.median(s[k] for s in samples[path]) for k in keys}
           for path in samples}
    return {
        "repeats": repeats,
        "config": MPI_CONFIG,
        "cold": med["cold"],
        "warm": med["warm"],
        "pool_start_trial": {k: first_warm[k] for k in keys},
        "ratio_warm_to_cold": {k: med["warm"][k] / med["cold"][k] for k in keys},
        "samples": samples,
    }


# ---------------------------------------------------------------- storage


def _ask_tell(study: optuna.Study) -> None:
    trial = study.ask()
    study.tell(trial, 0.0)


def _client(url: str, n: int, barrier: Any, results: Any) -> None:
    """One client process: load the study, wait for the others, n x (ask, tell)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    errors = 0
    try:
        study = optuna.load_study(study_name="overhead-storage", storage=open_storage(url),
                                  sampler=optuna.samplers.RandomSampler(seed=0))
    except Exception as exc:  # counted, not raised: the benchmark reports it
        barrier.abort()
        results.put((0.0, 0.0, n, f"{type(exc).__name__}: {exc}"))
        return
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait(BARRIER_TIMEOUT_S)
    start = time.monotonic()
    message = ""
    for _ in range(n):
        try:
            _ask_tell(study)
        except Exception as exc:  # noqa: BLE001 - errors are part of the measurement
            errors += 1
            message = f"{type(exc).__name__}: {str(exc)[:200]}"
    results.put((start, time.monotonic(), errors, message))


def storage_throughput(url: str, each: int) -> dict[str, Any]:
    optuna.create_study(study_name="overhead-storage", storage=open_storage(url))
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(CLIENTS + 1)
    results = ctx.Queue()
    procs = [ctx.Process(target=_client, args=(url, each, barrier, results))
             for _ in range(CLIENTS)]
    for p in procs:
        p.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait(BARRIER_TIMEOUT_S)
    reports = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    timed = [r for r in reports if r[1] > 0]
    wall = max(r[1] for r in timed) - min(r[0] for r in timed) if timed else float("nan")
    study = optuna.load_study(study_name="overhead-storage", storage=open_storage(url))
    complete = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    errors = sum(r[2] for r in reports)
    return {
        "clients": CLIENTS,
        "trials": CLIENTS * each,
        "complete": complete,
        "errors": errors,
        "messages": sorted({r[3] for r in reports if r[3]}),
        "wall_s": wall,
        "trials_per_s": complete / wall if wall > 0 else 0.0,
    }


def inmemory_throughput(n: int) -> dict[str, Any]:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    t0 = time.perf_counter()
    for _ in range(n):
        _ask_tell(study)
    wall = time.perf_counter() - t0
    return {"clients": 1, "trials": n, "wall_s": wall, "trials_per_s": n / wall}


@contextlib.contextmanager
def postgres() -> Iterator[str | None]:
    """A throwaway PostgreSQL server's URL (tests/pg_server.py, as the tests start it), or None
    when PostgreSQL is not installed."""
    if str(REPO) not in sys.path:  # `python benchmarks/X.py` puts only benchmarks/ on the path
        sys.path.insert(0, str(REPO))
    from tests.pg_server import PostgresMissing, throwaway_postgres

    try:
        server = contextlib.ExitStack()
        url = server.enter_context(throwaway_postgres()).url
    except PostgresMissing:
        yield None
        return
    with server:
        yield url


def storage(each: int) -> dict[str, Any]:
    out: dict[str, Any] = {"inmemory_1_client": inmemory_throughput(CLIENTS * each)}
    with tempfile.TemporaryDirectory(prefix="bench_storage_") as workdir:
        out["journal"] = storage_throughput(os.path.join(workdir, "s.journal"), each)
    with postgres() as url:
        out["postgresql"] = None if url is None else storage_throughput(url, each)
    return out


# ---------------------------------------------------------------- report


def format_table(bk: dict[str, Any], mpi: dict[str, Any], st: dict[str, Any]) -> str:
    lines = [
        f"bookkeeping: {bk['trials']} trials x {bk['sleep_s']} s sleep, {bk['concurrency']} at a "
        f"time, ideal {bk['ideal_s']:.1f} s",
        f"  {'measurement':<34} {'wall s':>8} {'ratio':>7} {'Ray Tune':>9} {'goal':>6}",
    ]
    for label, wall, ratio in (
        ("bare Dask, same sleeps (floor)", bk["dask_floor"]["wall_s"], bk["dask_floor"]["ratio"]),
        ("driver loop only", bk["driver_loop_s"], bk["ratio_driver_loop"]),
        ("including cluster start-up", bk["with_startup_s"], bk["ratio_with_startup"]),
        ("including start-up and close", bk["with_startup_and_close_s"],
         bk["ratio_with_startup_and_close"]),
    ):
        lines.append(f"  {label:<34} {wall:>8.2f} {ratio:>7.3f} {RAY_TUNE['ratio']:>9.3f} "
                     f"{GOAL_RATIO:>6.2f}")
    lines += [
        "",
        f"MPI trial launch ({RANKS} ranks, 1 epoch digits, journal study), median of "
        f"{mpi['repeats']}",
        f"  {'measurement':<24} {'cold s':>8} {'warm s':>8} {'warm/cold':>10}",
    ]
    for key, label in (("ask_to_first_step_s", "ask -> first step"),
                       ("finish_to_tell_s", "finish -> tell"),
                       ("train_s", "first step -> finish"),
                       ("wall_s", "ask -> tell")):
        lines.append(f"  {label:<24} {mpi['cold'][key]:>8.3f} {mpi['warm'][key]:>8.3f} "
                     f"{mpi['ratio_warm_to_cold'][key]:>10.3f}")
    lines.append(f"  (the trial that starts a pool: ask -> first step "
                 f"{mpi['pool_start_trial']['ask_to_first_step_s']:.3f} s)")
    base = st["inmemory_1_client"]["trials_per_s"]
    lines += ["", f"storage: ask+tell throughput, {CLIENTS} concurrent client processes",
              f"  {'storage':<22} {'trials':>6} {'errors':>6} {'trials/s':>9} {'/ inmemory':>11}"]
    for name in ("inmemory_1_client", "journal", "postgresql"):
        r = st[name]
        if r is None:
            lines.append(f"  {name:<22} skipped (initdb/pg_ctl not installed)")
            continue
        lines.append(f"  {name:<22} {r['trials']:>6} {r.get('errors', 0):>6} "
                     f"{r['trials_per_s']:>9.1f} {r['trials_per_s'] / base:>11.3f}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="small run: 20 bookkeeping trials, 2 MPI repeats, 8 x 10 storage")
    parser.add_argument("--json", type=Path, default=None, help="write results as JSON here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    trials, repeats, each = (20, 2, 10) if args.quick else (200, 5, 50)
    started = time.perf_counter()
    load_before = os.getloadavg()  # the machine may be shared: timings scale with its load
    try:
        st = storage(each)
        mpi = mpi_launch(repeats)
        bk = bookkeeping(trials)
        bk["dask_floor"] = dask_floor(trials)
        bk["ratio_driver_loop_to_dask_floor"] = bk["driver_loop_s"] / bk["dask_floor"]["wall_s"]
    except BenchmarkError as exc:
        print(f"FAILURE {exc}")
        return 1
    runtime = time.perf_counter() - started
    print(format_table(bk, mpi, st))
    print(f"runtime {runtime:.1f} s; load average (1, 5, 15 min) before "
          f"{', '.join(f'{x:.1f}' for x in load_before)}, after "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    failures = [f"{name}: {r['complete']}/{r['trials']} COMPLETE, {r['errors']} errors"
                for name, r in st.items()
                if r is not None and "complete" in r and r["complete"] != r["trials"]]
    for line in failures:
        print(f"FAILURE {line}")
    if args.json is not None:
        payload = {
            "benchmark": "overhead",
            "date": now_iso(),
            "machine": machine("optuna", "dask", "distributed", "torch", "mpi4py", "mpich",
                               load_average_before=load_before,
                               load_average_after=os.getloadavg()),
            "quick": args.quick,
            "bookkeeping_ratio": {
                "driver_loop": bk["ratio_driver_loop"],
                "with_cluster_startup": bk["ratio_with_startup"],
                "with_cluster_startup_and_close": bk["ratio_with_startup_and_close"],
                "bare_dask_floor": bk["dask_floor"]["ratio"],
                "driver_loop_over_bare_dask": bk["ratio_driver_loop_to_dask_floor"],
            },
            "bookkeeping_yardstick": RAY_TUNE,
            "bookkeeping_goal_ratio": GOAL_RATIO,
            "bookkeeping": bk,
            "mpi_launch_cold_s": {k: mpi["cold"][k]
                                  for k in ("ask_to_first_step_s", "finish_to_tell_s")},
            "mpi_launch_warm_s": {k: mpi["warm"][k]
                                  for k in ("ask_to_first_step_s", "finish_to_tell_s")},
            "mpi_launch": mpi,
            "storage_trials_per_s": {name: (None if r is None else r["trials_per_s"])
                                     for name, r in st.items()},
            "storage": st,
            "runtime_s": runtime,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
