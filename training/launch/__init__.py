"""Launching a trial's MPI job from a Dask worker (host side: no torch, no mpi4py): the launcher
line (``mpiexec``/``srun``, its environment, processes that end with their parent), the cold
job, and warm pools of ranks that serve trial after trial. Add a launcher here.

``run_trial(spec)`` is what a Dask worker executes.
"""

from training.launch._cold import run_trial
from training.launch._line import (
    DEFAULT_LAUNCHER,
    SINGLE_NODE_ENV,
    TRIAL_CORES_ENV,
    LauncherNotFound,
    die_with_parent,
    end_job,
    end_with_launcher,
    job_env,
    launcher_argv,
    never_started,
    node_lost,
    pid_alive,
    rank_threads,
    resolve_program,
    still_queued,
    threads_here,
)
from training.launch._warm_pool import idle_pools, run_warm_trial, shutdown_pools

__all__ = [
    "DEFAULT_LAUNCHER", "SINGLE_NODE_ENV", "TRIAL_CORES_ENV", "LauncherNotFound",
    "die_with_parent", "end_job", "end_with_launcher", "idle_pools", "job_env", "launcher_argv",
    "never_started", "node_lost", "pid_alive", "rank_threads", "resolve_program", "run_trial",
    "run_warm_trial", "shutdown_pools", "still_queued", "threads_here",
]
