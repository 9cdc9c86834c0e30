"""Benchmark the launch overhead of one MPI trial (2 ranks, digits dataset).

What is measured, side by side in one run, repeated R times (full R=5,
``--quick`` R=2, interleaved round robin so drift hits every row alike);
median and min are reported:

* yardstick A ``bare_mpi`` -- wall time of
  ``mpiexec -n 2 python -c "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"``
  (start MPI, start 2 interpreters, one collective, exit);
* yardstick B ``import_torch`` -- the same with ``import torch, numpy`` before
  the barrier (what importing the ML stack costs per rank, in parallel);
* subject ``trial_no_storage`` -- ``training.launch.run_trial(spec)`` with
  ``spec = {"config": {"dataset": "digits", "epochs": 1, "ranks": 2,
  "hidden": 32}, "ask_time": time.time()}``; the measurement is the result's
  ``launch_overhead_s`` (``ask_time`` to the first training step, stamped by
  the worker), the trial's ``wall_time_s`` is reported beside it;
* subject ``trial_study`` -- the same trial for a real Optuna study in a
  journal storage (``training.contract.open_storage(path)``): ``study.ask()``,
  ``ask_time = time.time()`` right after it (as ``search``'s driver does), a
  spec with ``study_name``, ``storage_url`` (the journal path), ``trial_id``,
  ``trial_number``, ``ask_time``; rank 0 loads the study and reports each
  epoch; the trial is told afterwards. This is the real ``search run`` path
  minus Dask. ``trial_launch_overhead_s`` in the JSON is this row's median.
* ``cold_cache`` -- one trial (no storage) with an empty dataset cache
  (``DETOL_CACHE``), so each rank imports scikit-learn and builds the arrays.

The yardsticks are whole-job wall times (launch to exit, teardown included);
the trial rows stop at the first training step, so they leave out training,
evaluation and teardown -- a trial's overhead above yardstick B is work the
worker does before its first step that the bare import does not. For each
trial the JSON also splits the wall time into launch (ask to first step),
train (first step to the result file) and teardown (result file to the
return of ``run_trial``).

Before timing, every command runs once untimed (OS page cache, and the
dataset cache of the timed trials). ``DETOL_CACHE`` points to a fresh
temporary directory for the benchmark; the cold-cache trial uses a second
empty one, after the warm-up, so only the dataset cache is cold, not the
OS page cache. Child processes get the environment ``run_trial`` gives its
job (``OMP_NUM_THREADS=1``, ``PYTHONUNBUFFERED=1``).

Command line::

    python benchmarks/launch_overhead.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
from _common import machine, now_iso  # benchmarks/_common/ (the script directory)

from training.contract import open_storage
from training.launch import DEFAULT_LAUNCHER, launcher_argv, run_trial

RANKS = 2
CONFIG: dict[str, Any] = {"dataset": "digits", "epochs": 1, "ranks": RANKS, "hidden": 32}
STUDY_NAME = "launch_overhead"
TRIAL_TIMEOUT_S = 300.0
YARDSTICK_TIMEOUT_S = 120.0

BARE_MPI = "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"
IMPORT_TORCH = "import torch, numpy; from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"

ROWS = (
    ("bare_mpi", "yardstick A: mpiexec + barrier"),
    ("import_torch", "yardstick B: + import torch, numpy"),
    ("trial_no_storage", "trial launch overhead, no storage"),
    ("trial_no_storage_wall", "  trial wall time, no storage"),
    ("trial_study", "trial launch overhead, journal study"),
    ("trial_study_wall", "  trial wall time, journal study"),
    ("cold_cache", "trial launch overhead, cold cache"),
    ("cold_cache_wall", "  trial wall time, cold cache"),
)


class BenchmarkError(RuntimeError):
    pass


def child_env() -> dict[str, str]:
    """The environment ``run_trial`` gives its MPI job (threads_per_rank = 1)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def time_yardstick(code: str) -> float:
    """Wall seconds of ``mpiexec -n 2 python -c CODE``."""
    argv = launcher_argv(DEFAULT_LAUNCHER, RANKS) + [sys.executable, "-c", code]
    t0 = time.perf_counter()
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=child_env(), timeout=YARDSTICK_TIMEOUT_S
    )
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise BenchmarkError(
            f"yardstick exited with {proc.returncode}: {(proc.stdout + proc.stderr)[-2000:]}"
        )
    return elapsed


def _trial_sample(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
    """Run one trial; return its result and the timings taken from it."""
    result = run_trial(spec)
    returned = time.time()
    if result.get("state") != "complete" or "launch_overhead_s" not in result:
        reason = str(result.get("exit_reason", "no launch_overhead_s in the result"))
        raise BenchmarkError(f"trial did not complete: {reason[-2000:]}")
    first_step = spec["ask_time"] + result["launch_overhead_s"]
    return result, {
        "launch_overhead_s": result["launch_overhead_s"],
        "wall_time_s": result["wall_time_s"],
        "train_s": result["finish_time"] - first_step,
        "teardown_s": returned - result["finish_time"],
    }


def trial_no_storage() -> dict[str, float]:
    _, sample = _trial_sample({"config": dict(CONFIG), "ask_time": time.time(),
                               "timeout_s": TRIAL_TIMEOUT_S})
    return sample


def trial_study(study: optuna.Study, journal: str) -> dict[str, float]:
    """One trial of the real search path: ask, run (rank 0 loads the study), tell."""
    t0 = time.perf_counter()
    trial = study.ask()
    ask_time = time.time()
    ask_s = time.perf_counter() - t0
    spec = {
        "config": dict(CONFIG),
        "study_name": study.study_name,
        "storage_url": journal,
        "trial_id": trial._trial_id,  # noqa: SLF001 - rank 0 reopens this very trial
        "trial_number": trial.number,
        "ask_time": ask_time,
        "timeout_s": TRIAL_TIMEOUT_S,
    }
    try:
        result, sample = _trial_sample(spec)
    except BaseException:
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        raise
    study.tell(trial, result["values"]["val_accuracy"])
    return {**sample, "ask_s": ask_s}


@contextlib.contextmanager
def dataset_cache(path: str) -> Iterator[None]:
    """``DETOL_CACHE=path`` for this process and the jobs it launches."""
    old = os.environ.get("DETOL_CACHE")
    os.environ["DETOL_CACHE"] = path
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("DETOL_CACHE", None)
        else:
            os.environ["DETOL_CACHE"] = old


def summarise(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples)}


def format_table(stats: dict[str, dict[str, float]], samples: dict[str, list[float]]) -> str:
    a = stats["bare_mpi"]["median"]
    b = stats["import_torch"]["median"]
    header = (
        f"{'measurement':<38} {'n':>2} {'median s':>9} {'min s':>7} "
        f"{'/ A':>7} {'/ B':>6}"
    )
    lines = [header, "-" * len(header)]
    for key, label in ROWS:
        s = stats[key]
        lines.append(
            f"{label:<38} {len(samples[key]):>2} {s['median']:>9.3f} {s['min']:>7.3f} "
            f"{s['median'] / a:>7.1f} {s['median'] / b:>6.2f}"
        )
    lines.append(
        "/ A, / B: median relative to the median of yardstick A (bare MPI) and B (import torch)."
    )
    lines.append(
        "Yardsticks are launch-to-exit wall times; launch overhead is ask_time to the first "
        "training step."
    )
    return "\n".join(lines)


def format_breakdown(parts: dict[str, dict[str, list[float]]]) -> str:
    lines = ["trial wall time split (median s): launch + train + teardown"]
    for key, p in parts.items():
        launch, train, down = (statistics.median(p[k]) for k in ("launch", "train", "teardown"))
        extra = f", study.ask {statistics.median(p['ask']) * 1000:.1f} ms" if "ask" in p else ""
        lines.append(
            f"  {key:<17} {launch:.3f} + {train:.3f} + {down:.3f}{extra}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small run: 2 repeats instead of 5")
    parser.add_argument("--json", type=Path, default=None, help="write results as JSON here")
    return parser.parse_args(argv)


def run(repeats: int) -> tuple[dict[str, list[float]], dict[str, dict[str, list[float]]], int]:
    samples: dict[str, list[float]] = {key: [] for key, _ in ROWS}
    parts: dict[str, dict[str, list[float]]] = {
        name: {"launch": [], "train": [], "teardown": []}
        for name in ("trial_no_storage", "trial_study", "cold_cache")
    }
    parts["trial_study"]["ask"] = []

    def add(name: str, s: dict[str, float]) -> None:
        samples[name].append(s["launch_overhead_s"])
        samples[f"{name}_wall"].append(s["wall_time_s"])
        parts[name]["launch"].append(s["launch_overhead_s"])
        parts[name]["train"].append(s["train_s"])
        parts[name]["teardown"].append(s["teardown_s"])
        if "ask_s" in s:
            parts[name]["ask"].append(s["ask_s"])

    with tempfile.TemporaryDirectory(prefix="bench_launch_") as workdir:
        warm_cache = os.path.join(workdir, "cache-warm")
        cold_cache = os.path.join(workdir, "cache-cold")
        journal = os.path.join(workdir, "study.journal")
        study = optuna.create_study(
            study_name=STUDY_NAME,
            storage=open_storage(journal),
            direction="maximize",
            sampler=optuna.samplers.RandomSampler(seed=0),
        )
        with dataset_cache(warm_cache):
            # Untimed warm-up: OS page cache for every command, dataset cache for the trials.
            time_yardstick(BARE_MPI)
            time_yardstick(IMPORT_TORCH)
            trial_no_storage()
            trial_study(study, journal)
            if not (Path(warm_cache) / "digits-v1.npz").exists():
                raise BenchmarkError(f"warm-up trial left no dataset cache in {warm_cache}")
        with dataset_cache(cold_cache):
            add("cold_cache", trial_no_storage())
            if not (Path(cold_cache) / "digits-v1.npz").exists():
                raise BenchmarkError(f"cold-cache trial left no dataset cache in {cold_cache}")
        with dataset_cache(warm_cache):
            for _ in range(repeats):
                samples["bare_mpi"].append(time_yardstick(BARE_MPI))
                samples["import_torch"].append(time_yardstick(IMPORT_TORCH))
                add("trial_no_storage", trial_no_storage())
                add("trial_study", trial_study(study, journal))
        complete = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
        reported = [t for t in study.get_trials(deepcopy=False) if t.intermediate_values]
        if complete != repeats + 1 or len(reported) != complete:
            raise BenchmarkError(
                f"study holds {complete} COMPLETE trials ({len(reported)} with reports), "
                f"expected {repeats + 1}"
            )
        del study
    return samples, parts, complete


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    repeats = 2 if args.quick else 5
    started = time.perf_counter()
    try:
        samples, parts, complete = run(repeats)
    except BenchmarkError as exc:
        print(f"FAILURE {exc}")
        return 1
    runtime = time.perf_counter() - started

    stats = {key: summarise(values) for key, values in samples.items()}
    print(format_table(stats, samples))
    print(format_breakdown(parts))
    print(f"study: {complete} COMPLETE trials with per-epoch reports; runtime {runtime:.1f} s")

    if args.json is not None:
        b = stats["import_torch"]["median"]
        payload = {
            "benchmark": "launch_overhead",
            "date": now_iso(),
            "machine": machine("torch", "mpi4py", "mpich", "optuna"),
            "quick": args.quick,
            "repeats": repeats,
            "ranks": RANKS,
            "config": CONFIG,
            "yardstick_bare_mpi_s": stats["bare_mpi"]["median"],
            "yardstick_import_torch_s": b,
            "trial_launch_overhead_s": stats["trial_study"]["median"],
            "trial_launch_overhead_no_storage_s": stats["trial_no_storage"]["median"],
            "cold_cache_launch_overhead_s": stats["cold_cache"]["median"],
            "ratio_to_import_torch": stats["trial_study"]["median"] / b,
            "trial_wall_time_s": stats["trial_study_wall"]["median"],
            "trial_wall_time_no_storage_s": stats["trial_no_storage_wall"]["median"],
            "min_s": {key: s["min"] for key, s in stats.items()},
            "samples_s": samples,
            "wall_split_s": parts,
            "runtime_s": runtime,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
