"""Launching one trial: build its ``mpiexec`` line, run the job, read its result.

``run_trial`` is what a Dask worker executes (a fresh job, or a warm pool's with ``spec.warm``).
No torch or mpi4py here, so the Dask workers stay light. What the driver and the job share
(trial spec, training config, storage, pruner spec) is :mod:`training.contract`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from training._spec import TrialSpec, started_marker
from training.launch._line import (
    DEFAULT_LAUNCHER,
    LAUNCH_ATTEMPTS,
    LAUNCH_RETRY_WAIT_S,
    LOG_LIMIT,
    START_FAILED,
    LauncherNotFound,
    StartWatch,
    die_with_parent,
    end_job,
    failed_job,
    first_error,
    job_env,
    launcher_argv,
    owned_dir,
    rank_threads,
    resolve_program,
    still_queued,
    sweep_dead_dirs,
    sweep_mpich_leftovers,
    tail,
)
from training.launch._warm_pool import run_warm_trial

__all__ = [
    "DEFAULT_LAUNCHER",
    "LauncherNotFound",
    "launcher_argv",
    "resolve_program",
    "run_trial",
]


def _kill_group(proc: subprocess.Popen[bytes], argv: list[str]) -> None:
    end_job(proc, argv)  # srun gets SIGTERM first, so that it releases its allocation


def _exited(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Whether ``proc`` has exited, waiting up to ``timeout`` s, without reaping it."""
    end = time.monotonic() + timeout
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= end:
            return False
        time.sleep(0.02)
    return True


def _run_job(
    argv: list[str],
    env: dict[str, str],
    log_path: Path,
    started: float,
    deadline: float | None,
    should_stop: Callable[[], bool] | None,
    timeout_s: float | None,
    started_path: str,
) -> tuple[subprocess.Popen[bytes], str, bool]:
    """Run the MPI job until it ends, its deadline passes, ``should_stop()`` or it is stuck
    before its ranks are through MPI_Init (``started_path`` not written in time); the process,
    why it was stopped ("" when it ended by itself) and whether it was stuck starting."""
    stopped = ""
    watch = StartWatch(time.time(), timeout_s)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: killed as one
            preexec_fn=die_with_parent if sys.platform == "linux" else None,
        )
        while True:
            if _exited(proc, timeout=0.5):
                # Not reaped yet, so its pid (the group's id) cannot be reused: what the
                # launcher started and left behind (a launcher that was killed leaves its
                # ranks training, or waiting for a dead peer, for ever) ends with it.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return proc, "", False
            if not os.path.exists(started_path):  # not through MPI_Init yet: stuck there?
                hung = watch.stuck(log_path.read_text(errors="replace"))
                if hung:
                    _kill_group(proc, argv)
                    return proc, hung, True
            if deadline is not None and time.time() > deadline:
                stopped = f"trial timeout: still running after {timeout_s:g} s, MPI job killed"
            elif should_stop is not None and should_stop():
                stopped = "cancelled: the trial was stopped from outside, MPI job killed"
            elif os.path.basename(argv[0]) == "srun":  # waiting on resources forever?
                stopped = still_queued(log_path.read_text(errors="replace"), started)
            if stopped:
                _kill_group(proc, argv)
                return proc, stopped, False


def _rank_errors(directory: Path) -> list[dict[str, Any]]:
    """What each failing rank wrote before it aborted the job, lowest rank first."""
    found = []
    for path in directory.glob("result.json.rank*"):
        try:
            found.append((int(path.name.rpartition("rank")[2]), json.loads(path.read_text())))
        except (OSError, ValueError):
            continue
    return [error for _, error in sorted(found, key=lambda item: item[0])]


def _start_failure(proc: subprocess.Popen[bytes], stopped: str, output: str) -> str:
    """One line of ``launch_failures``: how a launch that never started the trial ended."""
    return f"{stopped or f'exit {proc.returncode}'}: {first_error(output) or tail(output)}"


@contextlib.contextmanager
def _trial_dir() -> Iterator[str]:
    """The job's folder (spec, result, log), named for this host and worker: removed when the
    trial ends, or by the next trial on this host once its worker was killed."""
    path = owned_dir("trial")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run_trial(
    spec_data: TrialSpec | dict[str, Any], *, should_stop: Callable[[], bool] | None = None
) -> dict[str, Any]:
    """Run one trial as an MPI job and return its result dict (never raises for trial errors).
    ``spec_data``: the driver's :class:`TrialSpec`, or its JSON form.

    The result always has ``state`` (complete / pruned / failed) and ``exit_reason``. The job is
    killed when ``spec.timeout_s`` passes or when ``should_stop()`` turns true (checked twice a
    second; the Dask backend uses it to stop a cancelled trial).
    """
    spec = spec_data if isinstance(spec_data, TrialSpec) else TrialSpec.from_json(spec_data)
    config = spec.config
    if spec.warm:  # one long-lived MPI job per Dask worker and launcher line serves many trials
        return run_warm_trial(spec, config, should_stop=should_stop)
    started = time.time()
    deadline = None if spec.timeout_s is None else started + spec.timeout_s
    sweep_dead_dirs("trial")  # the folders of trials whose worker was killed on this host
    with _trial_dir() as tmp:
        result_path = str(Path(tmp) / "result.json")
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps({**spec.to_json(), "result_path": result_path,
                                         "deadline": deadline}))
        try:
            argv = launcher_argv(spec.launcher, config.ranks, spec.env)
        except LauncherNotFound as exc:
            return {"state": "failed", "exit_reason": str(exc), "wall_time_s": 0.0}
        argv += [sys.executable, "-m", "training.jobs.worker", str(spec_path)]
        env = job_env(rank_threads(config.threads_per_rank, config.ranks, spec.env),
                  config.mpi_async_progress, spec.env)
        log_path = Path(tmp) / "output.log"
        start_failures: list[str] = []
        sweep_mpich_leftovers()  # killed jobs' (shared memory breaks a new MPI_Init)
        while True:
            proc, stopped, hung = _run_job(argv, env, log_path, started, deadline, should_stop,
                                           spec.timeout_s, started_marker(result_path))
            output = log_path.read_text(errors="replace")
            result: dict[str, Any] = {}
            if os.path.exists(result_path):
                with open(result_path) as f:
                    result = json.load(f)
            errors = _rank_errors(Path(tmp))
            never_started = hung or (
                not stopped and proc.returncode != 0 and not result and not errors
                and not os.path.exists(started_marker(result_path))
            )
            if not never_started or len(start_failures) + 1 >= LAUNCH_ATTEMPTS:
                break
            # The job died or hung before every rank got through MPI_Init (a transport that
            # failed to come up, a launcher hiccup): nothing of the trial ran, so launch it again.
            start_failures.append(_start_failure(proc, stopped, output))
            time.sleep(LAUNCH_RETRY_WAIT_S)
    wall = time.time() - started
    if stopped or proc.returncode != 0:
        sweep_mpich_leftovers()  # what its killed ranks left
    if never_started:
        start_failures.append(_start_failure(proc, stopped, output))
        result = {
            "state": "failed",
            "exit_reason": (
                f"{START_FAILED}: not all {config.ranks} ranks got through MPI_Init "
                f"(it ended or was stuck), {len(start_failures)} times\n{tail(output)}"
            ),
            "log": output[-LOG_LIMIT:],
        }
    elif stopped:  # with what the job printed (a rank near the timeout prints its stack)
        result = {"state": "failed", "exit_reason": stopped, "log": output[-LOG_LIMIT:]}
    elif proc.returncode != 0 and result.get("state") != "failed":
        if errors:  # the first failing rank's error, even when Abort cut its output
            output = "\n".join([output, *(e.get("traceback", "") for e in errors)])
        result = failed_job(proc.returncode, output,
                            errors[0].get("error", "") if errors else "")
    elif not result:
        result = {"state": "failed", "exit_reason": f"no result written: {tail(output)}",
                  "log": output[-LOG_LIMIT:]}
    elif result.get("state") == "failed":
        result["log"] = output[-LOG_LIMIT:]
    if result.get("state") == "failed" and "traceback" in result:
        result["exit_reason"] = f"{result['exit_reason']}\n{tail(result.pop('traceback'))}"
    if start_failures:  # what went wrong before the launch that counted
        result["launch_failures"] = start_failures
    result["wall_time_s"] = wall
    result["rank_seconds"] = wall * config.ranks  # what the trial cost, for budget accounting
    result["command"] = shlex.join(argv[:-1] + ["SPEC.json"])
    if spec.ask_time is not None and result.get("first_step_time"):
        result["launch_overhead_s"] = result["first_step_time"] - spec.ask_time
    return result
