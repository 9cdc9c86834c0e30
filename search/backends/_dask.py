"""The trial backend on Dask: what a Dask worker runs for one trial.

It wraps ``training.launch.run_trial`` with a stop check wired to Dask, so cancelling the
trial's future (driver interrupted, study stopping) kills its MPI job instead of letting it
train on unseen.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

from training.contract import TrialSpec
from training.launch import run_trial

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


def run_trial_on_worker(spec: TrialSpec) -> dict[str, Any]:
    """Dask task for one trial: the MPI job, stopped if Dask cancels the task."""
    return {**run_trial(spec, should_stop=_dask_stop_check()), **where_it_ran()}
