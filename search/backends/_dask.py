"""The trial backend on Dask: what a Dask worker runs for one trial.

It wraps ``training.launch.run_trial`` with a stop check wired to Dask, so cancelling the
trial's future (driver interrupted, study stopping) kills its MPI job instead of letting it
train on unseen.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable
from typing import Any

from search.clusters._base import MPI
from training.contract import TrialSpec
from training.launch import never_started, node_lost, run_trial

_GONE = ("cancelled", "released", "forgotten")


def _dask_stop_check() -> Callable[[], bool]:
    try:
        from distributed import get_worker
        from distributed.core import Status
        from distributed.worker import thread_state

        worker = get_worker()
        key = thread_state.key
    except (ImportError, ValueError, AttributeError):  # not inside a Dask task
        return lambda: False
    live = (Status.running, Status.paused)

    def should_stop() -> bool:
        if worker.status not in live:
            return True
        task = worker.state.tasks.get(key)
        return task is None or task.state in _GONE

    return should_stop


# Where a batch system names the job a Dask worker runs in (SLURM, PBS/Torque, LSF, SGE).
BATCH_JOB_VARIABLES = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "JOB_ID")


def where_it_ran() -> dict[str, str]:
    """The worker's host, its Dask address and, inside a batch job, the job's id (trial
    attributes)."""
    out = {"host": socket.gethostname()}
    try:
        from distributed import get_worker

        out["dask_worker"] = get_worker().address
    except (ImportError, ValueError):  # not inside a Dask task
        pass
    job = next((os.environ[v] for v in BATCH_JOB_VARIABLES if os.environ.get(v)), None)
    if job:
        out["batch_job"] = job
    return out


LOST_NODE_CLOSE_S = 1.0  # the worker closes this long after answering (its answer goes first)


def run_trial_on_worker(spec: TrialSpec) -> dict[str, Any]:
    """Dask task for one trial: the MPI job, stopped if Dask cancels the task. A job that failed
    because its batch allocation lost a node (``training.launch.node_lost``) is answered as lost
    (the driver re-queues its parameters), and this worker then closes: its allocation is gone,
    and a trial sent here next would fail at once for the same reason."""
    result = {**run_trial(spec, should_stop=_dask_stop_check()), **where_it_ran()}
    if result.get("state") != "failed":
        return result
    line = node_lost(f"{result.get('exit_reason', '')}\n{result.get('log', '')}")
    if line:
        _close_worker_soon(f"its batch allocation lost a node ({line})")
        return {**result, "lost": True,
                "exit_reason": f"node lost: {line}\n{result.get('exit_reason', '')}"}
    if never_started(result) and "batch_job" in result:
        # Every launch in this allocation failed in MPI_Init (seen on a node just back from a
        # crash or a freeze: docs/clusters.md): nothing of the trial ran, and the allocation is
        # suspect. The parameters run again (budget.max_retries) in another allocation.
        _close_worker_soon("its batch allocation could not start an MPI job")
        return {**result, "lost": True}
    return result


def _close_worker_soon(reason: str) -> None:
    """No trial more for this worker (its MPI slots set to 0 at the scheduler, before this task
    answers), then, once it has answered, the worker closes."""
    try:
        from distributed import get_worker
        from distributed.utils import sync

        worker = get_worker()
    except (ImportError, ValueError):  # not inside a Dask task
        return
    with contextlib.suppress(Exception):  # a scheduler out of reach: the worker still closes
        sync(worker.loop, worker.set_resources, **{MPI: 0}, callback_timeout=10)

    async def close() -> None:
        await asyncio.sleep(LOST_NODE_CLOSE_S)
        await worker.close(reason=reason, nanny=False)

    worker.loop.add_callback(close)  # thread-safe: this task runs in the worker's thread
