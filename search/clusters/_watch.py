"""Watching a cluster deliver workers: a batch system's refusal, and trials that wait for ever.

Dask submits batch jobs in its event loop and only logs a refused ``sbatch``/``qsub``; nothing
reaches the client. :func:`recording_job_class` records the refusal, :class:`ClusterHandle`
turns it (or ``worker_timeout`` seconds without any worker while trials wait) into
:class:`ClusterFailed`, and :data:`PREFLIGHTS` ask the batch system (SLURM, Grid Engine) about
the worker job script before anything starts.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from search._errors import StudyError

if TYPE_CHECKING:
    from distributed import Client


class ClusterFailed(StudyError):
    """The cluster cannot deliver workers (a rejected job, none arrived in time): stop the run."""

    def __init__(self, where: str, message: str, *, exit_code: int = 1) -> None:
        super().__init__(where, message)
        self.exit_code = exit_code


# Words in a batch system's refusal -> the [cluster] key that most likely caused it.
_SUBMIT_KEYS = (
    # Grid Engine's words first: its refusals end in 'verification: no suitable queues'.
    ("parallel environment", "cluster.parallel_environment"),
    ("only offers", "cluster.slots_per_worker"),
    ("unknown resource", "cluster.resource_spec"),
    ("unknown queue", "cluster.queue"),
    ("project", "cluster.account"),
    ("partition", "cluster.queue"),
    ("queue", "cluster.queue"),
    ("account", "cluster.account"),
    ("time limit", "cluster.walltime"),
    ("walltime", "cluster.walltime"),
    ("memory", "cluster.memory"),
    ("node count", "cluster.nodes"),
    ("nodes", "cluster.nodes"),
    ("cpu", "cluster.cpus_per_slot"),
    ("task", "cluster.slots_per_worker"),
)


# The [cluster] options that shape a worker job, per backend ('' for the others).
_SUBMIT_OPTIONS = {
    "": "queue, account, walltime, memory, nodes, job_extra_directives",
    "sge": "queue, account, walltime, resource_spec, parallel_environment, "
    "slots_per_worker, job_extra_directives",
}


def _submit_error(backend: str, command: str, error: str) -> ClusterFailed:
    """One line for a batch system that refused the worker job: the likely key, its words."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    quoted = " / ".join(lines[-3:]) or "no message"
    lowered = quoted.lower()
    where = next((key for word, key in _SUBMIT_KEYS if word in lowered), "cluster")
    return ClusterFailed(
        where,
        f"{command} rejected the {backend!r} worker job: {quoted!r} (check the [cluster] "
        f"options {_SUBMIT_OPTIONS.get(backend, _SUBMIT_OPTIONS[''])})",
        exit_code=2,
    )


def _stderr_of(exc: BaseException) -> str:
    """The stderr part of dask-jobqueue's 'Command exited with non-zero exit code' error."""
    text = str(exc)
    return text.split("stderr:", 1)[1] if "stderr:" in text else text


def recording_job_class(base: type, errors: list[str]) -> type:
    """``base`` (a dask-jobqueue Job) that also records why a submission failed.

    Dask starts jobs in its event loop and only logs a failed ``sbatch``/``qsub``; nothing reaches
    the client, so the driver reads ``errors`` instead (``ClusterHandle.check``).
    """

    from distributed.core import Status

    class RecordingJob(base):  # type: ignore[misc,valid-type]
        async def start(self) -> None:
            try:
                await super().start()
            except Exception as exc:
                errors.append(_stderr_of(exc))
                # Failed, not 'created': SpecCluster.close() asserts that of every job it made.
                self.status = Status.failed
                raise

    RecordingJob.__name__ = RecordingJob.__qualname__ = base.__name__
    return RecordingJob


@dataclass
class ClusterHandle:
    """A connected client, and the watch that the cluster keeps delivering workers.

    The driver calls :meth:`check` on every turn of its loop: it raises ClusterFailed when the
    batch system refused a worker job, or when trials have waited ``worker_timeout`` seconds
    with no worker connected at all (a busy cluster whose workers all run trials is fine).
    """

    client: Client
    backend: str
    worker_timeout: float
    cluster: Any = None  # the cluster we started (None: an existing scheduler)
    submit_errors: list[str] = field(default_factory=list)
    _waiting_since: float | None = None
    _next_look: float = 0.0

    def check(self, *, waiting: bool) -> None:
        if self.submit_errors:
            command = (
                getattr(getattr(self.cluster, "job_cls", None), "submit_command", "")
                or "the batch system"
            )
            raise _submit_error(self.backend, command.split()[0], self.submit_errors[0])
        now = time.monotonic()
        if not waiting:
            self._waiting_since = None
            return
        if now < self._next_look:  # one scheduler round trip a second at most
            return
        self._next_look = now + 1.0
        if self.client.scheduler_info(n_workers=-1)["workers"]:
            self._waiting_since = None
            return
        if self._waiting_since is None:
            self._waiting_since = now
        elif now - self._waiting_since > self.worker_timeout:
            raise ClusterFailed(
                "cluster.worker_timeout",
                f"trials waited {self.worker_timeout:g} s and no Dask worker connected "
                f"({self._what_was_waited_for()}); if the queue is merely busy, raise "
                "cluster.worker_timeout",
            )

    def _what_was_waited_for(self) -> str:
        if self.cluster is None:
            return f"the scheduler at {self.client.scheduler.address} has no workers"
        started = getattr(self.cluster, "workers", {}).values()
        jobs = [str(job.job_id) for job in started if getattr(job, "job_id", None)]
        if not jobs:
            return f"the {self.backend!r} cluster started no worker"
        states = _queue_states(self.backend, jobs)
        return f"{self.backend} jobs {', '.join(jobs)} submitted" + (
            f": {states}" if states else ""
        )


def _queue_states(backend: str, jobs: list[str]) -> str:
    """What the batch system says about ``jobs`` (best effort, e.g. 'PENDING (Resources)')."""
    if backend == "slurm" and shutil.which("squeue"):
        out = _output(["squeue", "-h", "-j", ",".join(jobs), "-o", "%i %T (%r)"])
    elif backend == "sge" and shutil.which("qstat"):  # job-ID prior name user state ...
        rows = [line.split() for line in _output(["qstat", "-u", "*"]).splitlines()]
        out = "\n".join(f"{r[0]} {r[4]}" for r in rows if len(r) > 4 and r[0] in jobs)
    else:
        return ""
    return "; ".join(line.strip() for line in out.splitlines() if line.strip())


def _output(argv: list[str]) -> str:
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _preflight(backend: str, argv: list[str], cluster: Any) -> None:
    """``argv`` + the worker job script's path: the batch system's refusal, before any job."""
    if not shutil.which(argv[0]):
        raise StudyError(
            "cluster.backend", f"the {backend!r} backend needs {argv[0]} on PATH (not found)"
        )
    with tempfile.NamedTemporaryFile("w", suffix=".sh", prefix="detol-job-") as script:
        script.write(cluster.job_script())
        script.flush()
        try:
            proc = subprocess.run(
                [*argv, script.name], capture_output=True, text=True, timeout=60, check=False
            )
        except subprocess.TimeoutExpired:
            return  # a slow controller is not a refusal; the run's own watch takes over
    if proc.returncode != 0:
        raise _submit_error(backend, argv[0], proc.stderr or proc.stdout)


def preflight_slurm(cluster: Any) -> None:
    """``sbatch --test-only`` on the worker job script: SLURM's refusal before anything starts."""
    _preflight("slurm", ["sbatch", "--test-only"], cluster)


def preflight_sge(cluster: Any) -> None:
    """``qsub -w v`` (verify against an empty cluster, submit nothing) on the worker job script:
    Grid Engine's refusal (unknown queue, parallel environment or resource; more slots than
    any queue offers) before anything starts."""
    _preflight("sge", ["qsub", "-w", "v"], cluster)


# backend -> its check of the worker job script, run before any worker is asked for
PREFLIGHTS: dict[str, Callable[[Any], None]] = {
    "slurm": preflight_slurm,
    "sge": preflight_sge,
}
