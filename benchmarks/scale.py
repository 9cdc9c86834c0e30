"""Driver saturation: how many trials a second one ``search.Driver`` finishes when trials cost
(almost) nothing, where its time goes per trial, and how many workers it can therefore feed.

What is measured, in one run:

* ``throughput`` -- function trials (``objective = "scale_obj:objective"``, random sampler, no
  pruner) that return at once (``zero``) or sleep 10 ms (``near_zero``), through the real
  driver with the real progress output (``search.driver._run.Display``, its lines sent to
  ``/dev/null``), at concurrency 8, 32, 64, 128 and 256, on a Dask LocalCluster whose workers
  are threads (one in-process worker with that many threads) or processes (2 worker processes,
  half the threads each: the machine has 2 cores), with the journal file and with PostgreSQL (a
  throwaway server, ``tests/pg_server.py``). Reported: sustained finished trials per second,
  between the 10th and the 90th percentile of the finishing times (the ramp-up and the drain
  left out), and the driver-loop wall time.
* ``profile`` -- one cell per storage (zero-work, threads, concurrency 64) again under cProfile
  (the driver's thread): per-trial milliseconds of ask (Optuna's ``study.ask`` and the space's
  suggestions), claim (the driver attribute), submit (``Client.submit``), the Dask round trip
  (``wait`` + ``Future.result``), tell (attributes + ``study.tell``), progress output, plus the
  profile's top lines by own time.
* ``bookkeeping`` -- ``benchmarks/overhead.py``'s figure, imported, not copied: 200 trials that
  sleep 0.5 s, 2 at a time, through the driver, beside the same sleeps on bare Dask in the same
  run (the floor). Goal: driver loop / floor <= 1.03.
* ``wall`` -- how many concurrent trials one driver keeps >= 95 % busy, for trials of 1 s,
  1 min and 10 min, per storage: the driver's seconds per finished trial, t = 1 / (sustained
  zero-work trials/s), fitted as a line in the number running (t(W) = a + b W: PostgreSQL's
  per-trial reads grow with it) over the ``threads`` cells (the full grid for both storages); a
  trial of d seconds then waits for the part of t(W) between its end and the next submission
  (ask, suggest, submit, result: the share comes from the profile) plus the other hand-overs
  queued before it (mean value analysis of the closed network of W workers and one driver),
  and W_max is the largest W whose busy share d / (d + wait) >= 0.95. Also given: W at which
  the driver saturates outright (W t(W) = d).

PostgreSQL runs beyond (threads, zero work) only at concurrency 8 and 64 (about 20x slower per
trial than the journal here); near-zero work runs on threads only. Each storage's profile and
the deterministic counts per trial (journal appends, SQL statements, ORM rows loaded,
best-value reads) come from ``cProfile`` (the driver's thread only).

Yardsticks: Ray Tune's published scalability release tests (10,000 one-second trials on 16 CPUs
in 1.14x the ideal time; "about 500 results/s" before logging), DeepHyper's > 95 % worker
utilisation at 1,920 workers, and bare Dask's own task round trip here (``dask_round_trip``: the
same zero-work function submitted and gathered with the same concurrency, no driver).

Command::

    python benchmarks/scale.py [--quick] [--json PATH] [--no-bookkeeping] [--no-postgres]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import math
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
from _common import machine, now_iso  # benchmarks/_common/ (the script directory)

REPO = Path(__file__).resolve().parents[1]  # tests/pg_server.py lives there

CONCURRENCY = (8, 32, 64, 128, 256)
WORK_S = {"zero": 0.0, "near_zero": 0.01}
KINDS = ("threads", "processes")
PROFILE_CONCURRENCY = 64
UTILISATION = 0.95
DURATIONS_S = {"1 s": 1.0, "1 min": 60.0, "10 min": 600.0}
RAY_TUNE = {
    "scalability_10k_1s_trials_16cpu_ratio": 1.14,
    "results_per_s_before_logging": 500,
    "source": "Ray Tune scalability release tests (published figures)",
}
DEEPHYPER = {"utilisation": 0.95, "workers": 1920,
             "source": "DeepHyper (Balaprakash et al.), published > 95 % at 1,920 workers"}
GOAL_BOOKKEEPING = 1.03

OBJECTIVE_MODULE = """import time


def objective(params):
    if {work_s}:
        time.sleep({work_s})
    return params["x"]
"""
STUDY_TOML = """name = "{name}"
objective = "scale_obj:objective"
metric = "y"
direction = "minimize"
pruner = "none"
[strategy]
name = "random"
seed = 0
[budget]
trials = {trials}
concurrency = {concurrency}
max_failures = 1
[space]
x = {{ type = "float", low = -1, high = 1 }}
"""


class BenchmarkError(RuntimeError):
    pass


@contextlib.contextmanager
def _cwd(path: str) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


@contextlib.contextmanager
def _cluster(kind: str, concurrency: int) -> Iterator[Any]:
    """A LocalCluster with ``concurrency`` worker threads: in this process, or in 2 processes."""
    from distributed import Client, LocalCluster

    if kind == "threads":
        options = {"n_workers": 1, "threads_per_worker": concurrency, "processes": False}
    else:
        options = {"n_workers": 2, "threads_per_worker": max(1, concurrency // 2),
                   "processes": True, "host": "127.0.0.1"}
    with (
        LocalCluster(dashboard_address=None, **options) as cluster,
        Client(cluster) as client,
    ):
        client.run(lambda: None)
        yield client


class _Recorder:
    """The real progress display, plus the time each trial finished."""

    def __init__(self, display: Any) -> None:
        self.display = display
        self.finished: list[float] = []

    def __call__(self, kind: str, trial: Any, counts: Any, result: Any) -> None:
        if kind in ("complete", "pruned", "failed"):
            self.finished.append(time.perf_counter())
        self.display(kind, trial, counts, result)


def driver_run(client: Any, url: str, *, name: str, trials: int, concurrency: int,
               work_s: float, profile: bool = False) -> dict[str, Any]:
    """One driver run of ``trials`` function trials on ``client``; its figures."""
    import dask

    from search.driver._driver import Driver
    from search.driver._run import Display
    from search.driver._study import open_study
    from search.studyfile._study_file import load_study_file
    from training.contract import open_storage

    dask.config.set({"distributed.scheduler.allowed-failures": 0})  # as search run
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as workdir, _cwd(workdir):
        Path("scale_obj.py").write_text(OBJECTIVE_MODULE.format(work_s=work_s))
        Path("study.toml").write_text(STUDY_TOML.format(name=name, trials=trials,
                                                        concurrency=concurrency))
        if "://" not in url:
            url = os.path.join(workdir, url)
        sf = load_study_file("study.toml")
        study = open_study(sf, open_storage(url))
        with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
            recorder = _Recorder(Display(study, trials, show_bar=False))
            driver = Driver(sf, study, client, storage_url=url, on_event=recorder)
            profiler = cProfile.Profile() if profile else None
            t0 = time.perf_counter()
            if profiler is not None:
                profiler.enable()
            counts = driver.run(trials=trials, concurrency=concurrency, timeout=None)
            if profiler is not None:
                profiler.disable()
            wall = time.perf_counter() - t0
    if counts.complete != trials or counts.failed:
        raise BenchmarkError(f"{name}: {counts.complete}/{trials} complete, {counts.failed} "
                             f"failed ({counts.failures[:3]})")
    ends = sorted(recorder.finished)
    lo, hi = ends[len(ends) // 10], ends[(9 * len(ends)) // 10]
    between = (9 * len(ends)) // 10 - len(ends) // 10
    row: dict[str, Any] = {
        "trials": trials,
        "concurrency": concurrency,
        "work_s": work_s,
        "wall_s": wall,
        "trials_per_s_overall": trials / wall,
        "trials_per_s": between / (hi - lo) if hi > lo else float("nan"),
        "driver_s_per_trial": wall / trials,
    }
    if profiler is not None:
        row["profile"] = breakdown(profiler, trials, wall)
    return row


# Where a trial's driver time goes: profile entries (file, function, calling function or None)
# whose cumulative time is counted under each heading (they do not nest in one another).
PHASES: dict[str, tuple[tuple[str, str, str | None], ...]] = {
    "ask": (("optuna/study/study.py", "ask", None),),
    "suggest": (("spaces/_space.py", "suggest", None),),
    "claim": (("optuna/trial/_trial.py", "set_user_attr", "_submit"),
              ("optuna/trial/_trial.py", "set_user_attr", "_claim")),
    "submit": (("distributed/client.py", "submit", None),),
    "dask_wait": (("distributed/client.py", "wait", None),
                  ("search/driver/_driver.py", "_ended_now", None)),
    "result": (("search/driver/_driver.py", "_result", None),),
    "tell": (("search/driver/_driver.py", "_finish", None),),
    "progress": (("benchmarks/scale.py", "__call__", None),),
}


# Calls per trial that do not depend on the machine's load: what the driver asks of the storage.
COUNTS: dict[str, tuple[str, str]] = {
    "journal_appends (fsync)": ("~", "<built-in method posix.fsync>"),
    "journal_log_reads": ("optuna/storages/journal/_file.py", "read_logs"),
    "sql_statements": ("psycopg/cursor.py", "execute"),
    "orm_rows_loaded": ("sqlalchemy/orm/loading.py", "_populate_full"),
    "best_trial_reads": ("study.py", "best_value"),
    "frozen_trial_value_reads": ("optuna/trial/_frozen.py", "value"),
}


def breakdown(profiler: cProfile.Profile, trials: int, wall: float) -> dict[str, Any]:
    """Per-trial milliseconds of each phase, and the top of the profile by own time."""
    stats = pstats.Stats(profiler)
    raw: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]
    phases: dict[str, float] = {}
    for phase, entries in PHASES.items():
        total = 0.0
        for (path, _line, fn), (_cc, _nc, _tt, ct, callers) in raw.items():
            for frag, want, caller in entries:
                if not (path.endswith(frag) and fn == want):
                    continue
                if caller is None:
                    total += ct
                else:
                    total += sum(c[3] for (_p, _l, f), c in callers.items() if f == caller)
        phases[phase] = 1000.0 * total / trials
    phases["other"] = 1000.0 * wall / trials - sum(phases.values())
    counts = {name: sum(v[1] for (path, _l, fn), v in raw.items()
                        if path.endswith(frag) and fn == want) / trials
              for name, (frag, want) in COUNTS.items()}
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)
    cum = io.StringIO()
    pstats.Stats(profiler, stream=cum).sort_stats("cumulative").print_stats(25)
    return {"ms_per_trial": phases, "calls_per_trial": counts,
            "wall_ms_per_trial": 1000.0 * wall / trials,
            "top_tottime": _trim(text.getvalue()), "top_cumulative": _trim(cum.getvalue())}


def _trim(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    return [line.replace(sys.prefix, "<venv>") for line in lines[start:]]


def _zero(_i: int) -> float:
    return 0.0


def dask_round_trip(client: Any, trials: int, concurrency: int) -> dict[str, Any]:
    """Bare Dask on the same cluster: the zero-work function, ``concurrency`` in flight,
    resubmitted as each ends (no Optuna, no storage, no driver): Dask's own ceiling."""
    from distributed import wait

    t0 = time.perf_counter()
    running = {client.submit(_zero, i, pure=False) for i in range(min(concurrency, trials))}
    submitted = len(running)
    while running:
        done, _ = wait(list(running), return_when="FIRST_COMPLETED")
        for future in done:
            running.discard(future)
            future.result()
            if submitted < trials:
                running.add(client.submit(_zero, submitted, pure=False))
                submitted += 1
    wall = time.perf_counter() - t0
    return {"trials": trials, "concurrency": concurrency, "wall_s": wall,
            "trials_per_s": trials / wall}


@contextlib.contextmanager
def _storages(postgres: bool) -> Iterator[dict[str, str]]:
    urls = {"journal": "study.journal"}  # a fresh file in each run's directory
    if not postgres:
        yield urls
        return
    if str(REPO) not in sys.path:  # `python benchmarks/X.py` puts only benchmarks/ on the path
        sys.path.insert(0, str(REPO))
    from tests.pg_server import PostgresMissing, throwaway_postgres

    try:
        stack = contextlib.ExitStack()
        urls["postgresql"] = stack.enter_context(throwaway_postgres(max_connections=400)).url
    except PostgresMissing as exc:
        print(f"postgresql skipped: {exc}", file=sys.stderr)
        yield urls
        return
    with stack:
        yield urls


# Cells left out of a full run to keep it under half an hour on 2 loaded cores: PostgreSQL is
# ~20x slower per trial than the journal here, so beyond (threads, zero work) it runs only at
# concurrency 8 and 64.
PG_FULL_GRID = {("threads", "zero")}
PG_SPOT_CONCURRENCY = (8, 64)


def _runs(kind: str, storage: str, work: str, concurrency: int) -> bool:
    if kind == "processes" and work != "zero":
        return False  # near-zero work is the threads' cell: a sleep is the same in both
    return (storage != "postgresql" or (kind, work) in PG_FULL_GRID
            or concurrency in PG_SPOT_CONCURRENCY)


def trials_for(concurrency: int, storage: str, quick: bool) -> int:
    """Enough trials for a steady stretch past the ramp (the first ``concurrency`` asks)."""
    if storage == "postgresql":
        return max(40 if quick else 60, 2 * concurrency)
    return max(100 if quick else 300, 3 * concurrency)


def throughput(urls: dict[str, str], concurrencies: tuple[int, ...], kinds: tuple[str, ...],
               quick: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for kind in kinds:
        for concurrency in concurrencies:
            with _cluster(kind, concurrency) as client:
                floor = dask_round_trip(client, trials_for(concurrency, "journal", quick),
                                        concurrency)
                floor["load"] = list(os.getloadavg())
                rows.append({"storage": "bare_dask", "kind": kind, "work": "zero", **floor})
                print(f"{kind:9} c={concurrency:3} bare dask          "
                      f"{floor['trials_per_s']:8.1f} trials/s", flush=True)
                for storage, url in urls.items():
                    for work, work_s in WORK_S.items():
                        if not _runs(kind, storage, work, concurrency):
                            continue
                        n = trials_for(concurrency, storage, quick)
                        name = f"scale-{kind}-{concurrency}-{work}-{time.time_ns()}"
                        row = driver_run(client, url, name=name, trials=n,
                                         concurrency=concurrency, work_s=work_s)
                        row.update(storage=storage, kind=kind, work=work,
                                   load=list(os.getloadavg()))
                        rows.append(row)
                        print(f"{kind:9} c={concurrency:3} {storage:10} {work:9} "
                              f"{row['trials_per_s']:8.1f} trials/s ({n} trials, "
                              f"{row['wall_s']:.1f} s, load {row['load'][0]:.1f})", flush=True)
    return rows


def profiles(urls: dict[str, str], trials: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with _cluster("threads", PROFILE_CONCURRENCY) as client:
        for storage, url in urls.items():
            name = f"scale-profile-{storage}-{time.time_ns()}"
            n = trials if storage == "journal" else max(60, trials // 4)  # PostgreSQL: slower
            row = driver_run(client, url, name=name, trials=n,
                             concurrency=PROFILE_CONCURRENCY, work_s=0.0, profile=True)
            row["load"] = list(os.getloadavg())
            out[storage] = row
            phases = row["profile"]["ms_per_trial"]
            print(f"profile {storage}: {row['profile']['wall_ms_per_trial']:.2f} ms/trial: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()), flush=True)
            print("  per trial: " + ", ".join(
                f"{k} {v:.1f}" for k, v in row["profile"]["calls_per_trial"].items()), flush=True)
            print("\n".join(row["profile"]["top_tottime"][:12]), flush=True)
    return out


def fit_driver_cost(rows: list[dict[str, Any]], storage: str, kind: str) -> dict[str, float]:
    """Seconds of driver per finished trial as a line in the number running, t(W) = a + b W,
    fitted (least squares) to the sustained zero-work throughput at each concurrency."""
    points = [(r["concurrency"], 1.0 / r["trials_per_s"]) for r in rows
              if (r["storage"], r["kind"], r["work"]) == (storage, kind, "zero")]
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    if len(points) < 2:
        return {"a_s": ys[0] if ys else float("nan"), "b_s_per_running": 0.0,
                "points": len(points)}
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs)
    b = max(b, 0.0)  # a cost that falls with load is noise: take it as flat
    return {"a_s": my - b * mx, "b_s_per_running": b, "points": len(points)}


def max_workers(duration_s: float, a: float, b: float, share: float, cap: int = 10**6) -> int:
    """The most workers one driver keeps >= UTILISATION busy: a closed queueing network (mean
    value analysis) of W workers, each running a trial of ``duration_s`` and then waiting at
    the driver, one server that spends t = a + b W per trial, ``share`` of it before the next
    trial's submission (ask, suggest, submit, result; the tell comes after). With n trials:
    R_full(n) = t (1 + Q(n-1)), a worker waits R(n) = R_full(n) - (1 - share) t,
    X(n) = n / (d + R(n)), Q(n) = X(n) R_full(n); busy share u = X(n) d / n."""
    queue = 0.0
    for n in range(1, cap + 1):
        t = a + b * n
        full = t * (1.0 + queue)
        throughput = n / (duration_s + full - (1.0 - share) * t)
        queue = throughput * full
        if throughput * duration_s / n < UTILISATION:
            return n - 1
    return cap


CRITICAL = ("ask", "suggest", "submit", "dask_wait", "result")


def wall_table(rows: list[dict[str, Any]], kind: str,
               profile: dict[str, Any]) -> dict[str, Any]:
    """How many concurrent trials one driver keeps >= 95 % busy, per storage and trial length,
    from the driver's measured seconds per trial, how they grow with the trials running, and
    the share of them a worker waits for (from the storage's profile)."""
    table: dict[str, Any] = {}
    for storage in sorted({r["storage"] for r in rows if r["storage"] != "bare_dask"}):
        fit = fit_driver_cost(rows, storage, kind)
        a, b = fit["a_s"], fit["b_s_per_running"]
        phases = profile[storage]["profile"]["ms_per_trial"]
        share = sum(phases[p] for p in CRITICAL) / profile[storage]["profile"][
            "wall_ms_per_trial"]
        table[storage] = {
            "kind": kind,
            "driver_s_per_trial_fit": fit,
            "critical_share": share,
            "driver_ms_per_trial_at": {str(w): 1000.0 * (a + b * w) for w in (64, 256, 1024)},
            "workers_at_95pct": {label: max_workers(d, a, b, share)
                                 for label, d in DURATIONS_S.items()},
            # Without the queueing model: the driver's own ceiling, W t(W) = duration.
            "workers_driver_saturated": {
                label: int((math.sqrt(a * a + 4 * b * d) - a) / (2 * b)) if b > 0 else int(d / a)
                for label, d in DURATIONS_S.items()},
        }
    return table


def bookkeeping(trials: int) -> dict[str, Any]:
    """``benchmarks/overhead.py``'s bookkeeping figure and its bare-Dask floor, in this run."""
    import overhead  # benchmarks/overhead.py (the script directory)

    bk = overhead.bookkeeping(trials)
    bk["dask_floor"] = overhead.dask_floor(trials)
    bk["ratio_driver_loop_to_dask_floor"] = bk["driver_loop_s"] / bk["dask_floor"]["wall_s"]
    bk["load"] = list(os.getloadavg())
    bk["goal_ratio_to_floor"] = GOAL_BOOKKEEPING
    bk["goal_met"] = bk["ratio_driver_loop_to_dask_floor"] <= GOAL_BOOKKEEPING
    return bk


def format_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'kind':9} {'storage':10} {'work':9} "
             + " ".join(f"{'c=' + str(c):>9}" for c in sorted({r['concurrency'] for r in rows}))]
    keys = sorted({(r["kind"], r["storage"], r["work"]) for r in rows})
    for kind, storage, work in keys:
        cells = {r["concurrency"]: r["trials_per_s"] for r in rows
                 if (r["kind"], r["storage"], r["work"]) == (kind, storage, work)}
        lines.append(f"{kind:9} {storage:10} {work:9} "
                     + " ".join(f"{cells.get(c, float('nan')):9.1f}"
                                for c in sorted({r['concurrency'] for r in rows})))
    return "\n".join(lines)


def _commit() -> str | None:
    """The checkout's commit (and whether it has local changes), for the record."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, cwd=Path(__file__).parent).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + (" (modified)" if dirty.strip() else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="concurrency 8 and 32, threads only, few trials, 20 bookkeeping "
                        "trials (under 2 minutes)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--no-bookkeeping", action="store_true")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--only-profile", action="store_true",
                        help="the profiles (and the wall table) only")
    parser.add_argument("--before", type=Path, default=None,
                        help="a JSON this script wrote on older code (e.g. --only-profile): its "
                        "profiles are kept as profile_before, beside this run's")
    parser.add_argument("--concurrency", type=int, nargs="+", help="instead of the default list")
    parser.add_argument("--profile-trials", type=int, default=None,
                        help="trials per profiled run (default 1,000; --quick 150)")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    concurrencies = tuple(args.concurrency or ((8, 32) if args.quick else CONCURRENCY))
    kinds = ("threads",) if args.quick else KINDS

    started = time.perf_counter()
    load_before = os.getloadavg()
    result: dict[str, Any] = {}
    try:
        with _storages(not args.no_postgres) as urls:
            result["profile"] = profiles(urls, args.profile_trials or (100 if args.quick else 1000))
            if not args.only_profile:
                result["throughput"] = throughput(urls, concurrencies, kinds, args.quick)
                result["wall"] = wall_table(result["throughput"], "threads", result["profile"])
        if not args.no_bookkeeping and not args.only_profile:
            result["bookkeeping"] = bookkeeping(20 if args.quick else 200)
    except BenchmarkError as exc:
        print(f"FAILURE {exc}")
        return 1
    runtime = time.perf_counter() - started
    if "throughput" in result:
        print("sustained finished trials per second (10th to 90th percentile of finishing "
              "times)")
        print(format_table(result["throughput"]))
    for storage, row in result.get("wall", {}).items():
        at = row["driver_ms_per_trial_at"]
        print(f"wall, {storage} ({row['kind']}): driver ms per trial at 64 / 256 / 1,024 running "
              f"{at['64']:.1f} / {at['256']:.1f} / {at['1024']:.1f}; workers kept >= 95 % busy: "
              + ", ".join(f"{k} trials {v:,}" for k, v in row["workers_at_95pct"].items()))
    if "bookkeeping" in result:
        bk = result["bookkeeping"]
        print(f"bookkeeping: {bk['trials']} x {bk['sleep_s']} s, 2 at a time: driver loop "
              f"{bk['ratio_driver_loop']:.3f} x ideal, bare Dask {bk['dask_floor']['ratio']:.3f}"
              f", driver / floor {bk['ratio_driver_loop_to_dask_floor']:.3f} (goal <= "
              f"{GOAL_BOOKKEEPING}: {'met' if bk['goal_met'] else 'not met'})")
    load_after = os.getloadavg()
    print(f"runtime {runtime:.0f} s; load average before "
          f"{', '.join(f'{x:.1f}' for x in load_before)}, after "
          f"{', '.join(f'{x:.1f}' for x in load_after)} on {os.cpu_count()} cores")
    if args.json is not None:
        payload = {
            "benchmark": "scale",
            "date": now_iso(),
            "machine": machine("optuna", "dask", "distributed", "sqlalchemy", "psycopg",
                               load_average_before=load_before, load_average_after=load_after),
            "quick": args.quick,
            "code": _commit(),
            "settings": {"concurrency": list(concurrencies), "kinds": list(kinds),
                         "work_s": WORK_S, "profile_concurrency": PROFILE_CONCURRENCY,
                         "utilisation": UTILISATION, "durations_s": DURATIONS_S},
            "yardsticks": {"ray_tune": RAY_TUNE, "deephyper": DEEPHYPER},
            **result,
            "runtime_s": runtime,
        }
        if args.before is not None:
            before = json.loads(args.before.read_text())
            payload["profile_before"] = {"date": before["date"], "machine": before["machine"],
                                         "code": before.get("code"), **before["profile"]}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
