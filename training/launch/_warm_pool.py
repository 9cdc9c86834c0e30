"""Warm pools of MPI ranks on the Dask worker side: one long-lived job serves many trials.

A cold trial is ``mpiexec -n R python -m training.jobs.worker SPEC``: every launch pays ~3 s of
Python, torch and Optuna imports. With ``[launcher] warm = true`` a Dask worker process keeps,
per launcher line (so per rank count) and ``[launcher] env``, idle pools of
``mpiexec -n R python -m training.jobs.warm_worker SOCKET PID`` (see
:mod:`training.jobs.warm_worker`)
whose ranks have imported everything once; ``run_warm_trial`` checks one out, sends it the
trial on a Unix socket, waits for the result and checks it back in.

Isolation: a Python exception fails only its trial (the pool goes on, or is retired when the
exception came during training). A rank that dies, a trial past its timeout, a cancelled trial
(``should_stop``) or a pool that stops answering: the whole job is killed, the trial fails as a
cold one would, and the next trial starts a fresh pool.

Per trial, the pool resets: seeds (the Trainer seeds torch from the config; numpy generators are
per call), torch threads (``threads_per_rank``), the trial's communicator (a ``Dup``, freed), its
sync requests and ASGD window (freed by ``finish``; after an exception the pool is retired),
garbage (``gc.collect``). Not reset: imported modules (a user module edited between trials is not
re-imported), Python's ``random`` state, the process environment (the worker's at the pool's
start plus ``[launcher] env``, which is part of the pool's key), threads or files a trial left
open.

Idle pools close when the Dask worker process exits (``atexit``), when
:func:`shutdown_pools` is called, and their rank 0 exits if the worker process dies. Rank 0 must
run on the Dask worker's machine (it connects to a Unix socket and watches the worker's pid), as
``mpiexec`` and ``srun`` place it when the worker runs inside the allocation.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training._config import TrainConfig
from training._spec import TrialSpec
from training.launch._line import (
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
    still_queued,
    sweep_dead_dirs,
    sweep_mpich_leftovers,
    tail,
)

__all__ = ["WarmPool", "idle_pools", "run_warm_trial", "shutdown_pools", "sweep_pool_dirs"]

_CLOSE_WAIT_S = 10.0
MAX_IDLE_POOLS = 4  # per Dask worker process; the least recently used one closes first

PoolKey = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]


class WarmPool:
    """One long-lived MPI job: ``launcher`` (filled in) + ``python -m training.jobs.warm_worker``.

    The constructor does no I/O; :meth:`start` launches the job, :meth:`run` sends one trial.
    """

    def __init__(self, *, launcher: list[str], env: dict[str, str]) -> None:
        if not launcher:
            raise ValueError("launcher must be a non-empty argv list, e.g. ['mpiexec', '-n', '2']")
        self.launcher = list(launcher)
        self.env = dict(env)
        self.trials_served = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None
        self._listener: socket.socket | None = None
        self._conn: socket.socket | None = None
        self._buffer = b""
        self._log: Any = None
        self._started = 0.0
        self._watch = StartWatch(0.0)
        # The job ended before rank 0 connected: its ranks never got through MPI_Init (and the
        # collective Dup after it), so no trial ran on it (run_warm_trial starts another).
        self.never_started = False

    @property
    def argv(self) -> list[str]:
        return [*self.launcher, sys.executable, "-m", "training.jobs.warm_worker"]

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Launch the job; its ranks connect back when their imports are done."""
        sweep_pool_dirs()
        sweep_mpich_leftovers()  # killed jobs' (shared memory breaks a new MPI_Init)
        self._dir = Path(owned_dir("pool"))
        path = str(self._dir / "s")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(1)
        self._log = open(self._dir / "output.log", "ab")  # noqa: SIM115 - lives with the pool
        self._started = time.time()
        self._watch = StartWatch(self._started)
        self.proc = subprocess.Popen(
            [*self.argv, path, str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,  # its own process group: killed as one
            # The Dask worker killed: the launcher gets SIGTERM (srun releases its allocation).
            preexec_fn=die_with_parent if sys.platform == "linux" else None,
        )

    def _output(self) -> str:
        assert self._dir is not None
        return (self._dir / "output.log").read_text(errors="replace")

    def _trial_log(self, traceback: str = "") -> str:
        """This trial's output (the pool's log is emptied at each trial's start) and the
        failing rank's traceback, as a cold job's log holds them: detol-logs/STUDY/trial-N.log."""
        try:
            output = self._output()
        except (OSError, AssertionError):
            output = ""
        if traceback and traceback not in output:
            output = f"{output}\n{traceback}" if output else traceback
        return output[-LOG_LIMIT:]

    def run(
        self,
        message: dict[str, Any],
        *,
        deadline: float | None,
        should_stop: Callable[[], bool] | None,
        timeout_s: float | None,
    ) -> dict[str, Any]:
        """Send one trial and wait for its reply; on any failure the pool is killed."""
        assert self._dir is not None and self._listener is not None and self.proc is not None
        os.truncate(self._dir / "output.log", 0)  # this trial's output only (append mode)
        error_dir = Path(tempfile.mkdtemp(prefix="trial-", dir=self._dir))
        data = json.dumps({**message, "error_dir": str(error_dir)}).encode() + b"\n"
        sent = False
        stopped = ""
        self._watch.trial_timeout_s = timeout_s  # a start may take a third of it at most
        try:
            while True:
                if self._conn is not None and not sent:
                    self._conn.sendall(data)
                    sent = True
                waiting = self._conn if self._conn is not None else self._listener
                ready, _, _ = select.select([waiting], [], [], 0.5)
                if ready and self._conn is None:
                    self._conn, _ = self._listener.accept()
                    continue
                if ready:
                    chunk = self._conn.recv(1 << 20)  # type: ignore[union-attr]
                    self._buffer += chunk
                    if b"\n" in self._buffer:
                        line, _, self._buffer = self._buffer.partition(b"\n")
                        self.trials_served += 1
                        reply: dict[str, Any] = json.loads(line)
                        if reply.get("state") == "failed":  # kept as a cold trial's is
                            reply["log"] = self._trial_log(reply.get("traceback", ""))
                        if reply.pop("retire", False):
                            self.kill()
                        return reply
                    if chunk:
                        continue
                    self.proc.wait(timeout=_CLOSE_WAIT_S)  # rank 0 closed its end: job ending
                if self.proc.poll() is not None:
                    self.never_started = self._conn is None and self.trials_served == 0
                    return self._died(error_dir)
                if deadline is not None and time.time() > deadline:
                    stopped = f"trial timeout: still running after {timeout_s:g} s, MPI job killed"
                elif should_stop is not None and should_stop():
                    stopped = "cancelled: the trial was stopped from outside, MPI job killed"
                elif self._conn is None and os.path.basename(self.launcher[0]) == "srun":
                    stopped = still_queued(self._output(), self._started)
                if not stopped and self._conn is None:  # stuck before MPI_Init is through?
                    stopped = self._watch.stuck(self._output())
                    self.never_started = bool(stopped) and self.trials_served == 0
                if stopped:
                    log = self._trial_log()
                    self.kill()
                    return {"state": "failed", "exit_reason": stopped, "log": log}
        except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
            log = self._trial_log()
            self.kill()
            return {"state": "failed", "exit_reason": f"warm pool broke: {exc}", "log": log}
        finally:
            shutil.rmtree(error_dir, ignore_errors=True)

    def _died(self, error_dir: Path) -> dict[str, Any]:
        """The job ended in the middle of a trial: a rank's own error file, else its output."""
        assert self.proc is not None
        code = self.proc.returncode
        output = self._output()
        errors = []
        for path in sorted(error_dir.glob("rank*.json")):
            with contextlib.suppress(OSError, ValueError):
                errors.append(json.loads(path.read_text()))
        self.kill()
        if errors:
            return {"state": "failed", **errors[0], "log": output[-LOG_LIMIT:]}
        return failed_job(code, output)

    def kill(self) -> None:
        """Kill the job (the launcher's group; srun first gets SIGTERM, so that it releases its
        allocation) and remove its files."""
        if self.proc is not None:
            end_job(self.proc, self.launcher)
            sweep_mpich_leftovers()  # what its killed ranks left
        self._cleanup()

    def close(self, timeout: float = _CLOSE_WAIT_S) -> None:
        """Ask the ranks to exit (closing the socket), kill them if they do not."""
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.shutdown(socket.SHUT_RDWR)
        if self.proc is not None and self._conn is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout)
        self.kill()

    def _cleanup(self) -> None:
        for handle in (self._conn, self._listener, self._log):
            if handle is not None:
                with contextlib.suppress(OSError):
                    handle.close()
        self._conn = self._listener = self._log = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def sweep_pool_dirs(root: str | None = None) -> list[str]:
    """Remove the folders (socket, launcher log) of this host's pools whose worker is gone."""
    return sweep_dead_dirs("pool", root)


_IDLE: dict[PoolKey, list[WarmPool]] = {}
_ORDER: list[WarmPool] = []  # idle pools, least recently used first
_LOCK = threading.Lock()
_ATEXIT = False


def _check_out(key: PoolKey) -> WarmPool | None:
    with _LOCK:
        pools = _IDLE.get(key, [])
        while pools:
            pool = pools.pop()
            _ORDER.remove(pool)
            if pool.alive:
                return pool
            pool.kill()
    return None


def _check_in(key: PoolKey, pool: WarmPool) -> None:
    global _ATEXIT
    evicted: list[WarmPool] = []
    with _LOCK:
        if not _ATEXIT:
            atexit.register(shutdown_pools)
            _ATEXIT = True
        _IDLE.setdefault(key, []).append(pool)
        _ORDER.append(pool)
        while len(_ORDER) > MAX_IDLE_POOLS:
            old = _ORDER.pop(0)
            for pools in _IDLE.values():
                if old in pools:
                    pools.remove(old)
            evicted.append(old)
    for old in evicted:
        old.close()


def idle_pools() -> list[WarmPool]:
    """The idle pools of this process, least recently used first."""
    with _LOCK:
        return list(_ORDER)


def shutdown_pools() -> None:
    """Close every idle pool of this process (busy ones close when their trial ends)."""
    with _LOCK:
        pools = list(_ORDER)
        _ORDER.clear()
        _IDLE.clear()
    for pool in pools:
        pool.close()


def run_warm_trial(
    spec: TrialSpec,
    config: TrainConfig,
    *,
    should_stop: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """``training.launch.run_trial`` for ``spec.warm``: the same result dict, from a warm pool."""
    started = time.time()
    # A pool wider than the trial runs it on a sub-communicator (training.jobs._regroup).
    pool_ranks = max(config.ranks, spec.pool_ranks or 0)
    try:
        launcher = launcher_argv(spec.launcher, pool_ranks, spec.env)
    except LauncherNotFound as exc:
        return {"state": "failed", "exit_reason": str(exc), "wall_time_s": 0.0}
    # Threads by the pool's width, not the trial's: one pool (one environment) serves every
    # width of a [resize]d trial.
    env = job_env(rank_threads(config.threads_per_rank, pool_ranks, spec.env),
                  config.mpi_async_progress, spec.env)  # as cold
    # The pool's environment is the worker's at the pool's start, plus what the spec sets.
    pooled = ("OMP_NUM_THREADS", "MPIR_CVAR_ASYNC_PROGRESS", "MPI4PY_RC_THREAD_LEVEL")
    keyed: dict[str, str] = {k: env[k] for k in pooled if k in env}
    keyed.update(spec.env)
    key: PoolKey = (tuple(launcher), tuple(sorted(keyed.items())))
    deadline = None if spec.timeout_s is None else started + spec.timeout_s
    start_failures: list[str] = []
    while True:
        pool = _check_out(key)
        fresh = pool is None
        if pool is None:
            pool = WarmPool(launcher=launcher, env=env)
            try:
                pool.start()
            except OSError as exc:
                pool.kill()
                return {
                    "state": "failed",
                    "exit_reason": f"cannot start a warm pool: {exc}",
                    "wall_time_s": time.time() - started,
                }
        result = pool.run(
            {"spec": spec.to_json(), "deadline": deadline},
            deadline=deadline,
            should_stop=should_stop,
            timeout_s=spec.timeout_s,
        )
        if pool.alive:
            _check_in(key, pool)
        else:
            pool.kill()
        if not (fresh and pool.never_started):
            break
        # As for a fresh job (training.launch): nothing of the trial ran, so start another pool.
        log = str(result.get("log", ""))
        start_failures.append(f"{str(result.get('exit_reason', '')).splitlines()[0]}: "
                              f"{first_error(log) or tail(log)}")
        if len(start_failures) >= LAUNCH_ATTEMPTS:
            result = {**result, "exit_reason": (
                f"{START_FAILED}: not all {pool_ranks} ranks of the warm pool got "
                f"through MPI_Init (it ended or was stuck), {len(start_failures)} times\n"
                f"{result.get('exit_reason', '')}")}
            break
        time.sleep(LAUNCH_RETRY_WAIT_S)
    if start_failures:
        result["launch_failures"] = start_failures
    if result.get("state") == "failed" and "traceback" in result:
        result["exit_reason"] = f"{result['exit_reason']}\n{tail(result.pop('traceback'))}"
    wall = time.time() - started
    result["wall_time_s"] = wall
    result["rank_seconds"] = wall * config.ranks  # the trial's ranks (a wider pool's others idle)
    result["command"] = shlex.join([*pool.argv, "SOCKET", "PID"])
    result["pool"] = {"pid": pool.pid, "trial": pool.trials_served, "fresh": fresh}
    if spec.ask_time is not None and result.get("first_step_time"):
        result["launch_overhead_s"] = result["first_step_time"] - spec.ask_time
    return result
