"""Where trials run: start (or connect to) the Dask cluster for a study and watch it deliver.

The plans (what to start for each backend, without I/O) are :mod:`search._cluster_plans`.
Here: the ``search run`` flags applied to the ``[cluster]`` table, the connected client, the
checks made before the first trial, and the watch on a cluster that must deliver workers.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dask

from search._cluster_plans import (
    BACKENDS,
    DEFAULT_WORKER_TIMEOUT,
    MPI,
    Options,
    _Options,
    plan_cluster,
    trial_task_durations,
)
from search._errors import StudyError
from training.launch import LauncherNotFound, launcher_argv

if TYPE_CHECKING:
    from distributed import Client

    from search._study_file import Cluster


def with_overrides(
    opts: Cluster,
    *,
    backend: str | None = None,
    scheduler: str | None = None,
    adapt_min: int | None = None,
    adapt_max: int | None = None,
) -> Cluster:
    """``opts`` with the ``search run`` flags applied, validated again (StudyError if unfit).

    ``--scheduler ADDRESS`` means the address backend and keeps only its options.
    """
    from pydantic import ValidationError

    from search._study_file import Cluster, _format

    data = opts.model_dump(exclude_unset=True)
    if scheduler is not None:
        keep = BACKENDS["address"].options
        data = {k: v for k, v in data.items() if k in keep}
        data.update(backend="address", address=scheduler)
    elif backend is not None:
        data["backend"] = backend
        if backend != "address":
            data.pop("address", None)
    if adapt_min is not None or adapt_max is not None:
        adapt = dict(data.get("adapt") or {})
        if adapt_min is not None:
            adapt["minimum"] = adapt_min
        if adapt_max is not None:
            adapt["maximum"] = adapt_max
        data["adapt"] = adapt
    try:
        return Cluster.model_validate(data)
    except ValidationError as exc:
        err = _format(exc)
        raise StudyError(
            err.where if err.where.startswith("cluster") else f"cluster.{err.where}", err.message
        ) from None


class ClusterFailed(StudyError):
    """The cluster cannot deliver workers (a rejected job, none arrived in time): stop the run."""

    def __init__(self, where: str, message: str, *, exit_code: int = 1) -> None:
        super().__init__(where, message)
        self.exit_code = exit_code


# Words in a batch system's refusal -> the [cluster] key that most likely caused it.
_SUBMIT_KEYS = (
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


def _submit_error(backend: str, command: str, error: str) -> ClusterFailed:
    """One line for a batch system that refused the worker job: the likely key, its words."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    quoted = " / ".join(lines[-3:]) or "no message"
    lowered = quoted.lower()
    where = next((key for word, key in _SUBMIT_KEYS if word in lowered), "cluster")
    return ClusterFailed(
        where,
        f"{command} rejected the {backend!r} worker job: {quoted!r} (check the [cluster] "
        "options queue, account, walltime, memory, nodes, job_extra_directives)",
        exit_code=2,
    )


def _stderr_of(exc: BaseException) -> str:
    """The stderr part of dask-jobqueue's 'Command exited with non-zero exit code' error."""
    text = str(exc)
    return text.split("stderr:", 1)[1] if "stderr:" in text else text


def _recording_job_class(base: type, errors: list[str]) -> type:
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
    if backend != "slurm" or not shutil.which("squeue"):
        return ""
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", ",".join(jobs), "-o", "%i %T (%r)"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return "; ".join(line.strip() for line in out.splitlines() if line.strip())


def _preflight_slurm(cluster: Any) -> None:
    """``sbatch --test-only`` on the worker job script: SLURM's refusal before anything starts."""
    if not shutil.which("sbatch"):
        raise StudyError(
            "cluster.backend", "the 'slurm' backend needs SLURM's sbatch on PATH (not found)"
        )
    with tempfile.NamedTemporaryFile("w", suffix=".sh", prefix="detol-job-") as script:
        script.write(cluster.job_script())
        script.flush()
        try:
            proc = subprocess.run(
                ["sbatch", "--test-only", script.name],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return  # a slow controller is not a refusal; the run's own watch takes over
    if proc.returncode != 0:
        raise _submit_error("slurm", "sbatch", proc.stderr or proc.stdout)


def _probe(address: str, timeout: float) -> None:
    """StudyError at once when nothing listens at ``address`` (Dask retries until its timeout)."""
    scheme, _, rest = address.rpartition("://")
    if scheme not in ("", "tcp", "tls"):
        return
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=min(timeout, 3.0)):
            pass
    except ConnectionRefusedError:
        raise StudyError(
            "cluster.address", f"no Dask scheduler at {address}: connection refused"
        ) from None
    except OSError:
        return  # unreachable or slow: let Dask's own connect (and its timeout) decide


def check_cluster(
    cluster: Options,
    *,
    concurrency: int,
    max_ranks: int,
    launcher: str,
    study_name: str | None = None,
) -> None:
    """What :func:`open_cluster` checks before the first trial, starting no worker: the plan,
    the launcher (local), the scheduler and its workers (address), and SLURM's verdict on the
    job script (``sbatch --test-only``). Kubernetes and cloud plans are only built."""
    if cluster.backend == "address":
        connected = _connect(cluster, max_ranks, launcher)
        next(connected)  # connected, workers checked
        connected.close()  # disconnects
        return
    plan = plan_cluster(
        cluster, concurrency=concurrency, max_ranks=max_ranks, study_name=study_name
    )
    if plan.backend == "local":
        try:
            launcher_argv(launcher, max_ranks)
        except LauncherNotFound as exc:
            raise StudyError("launcher.command", str(exc)) from None
    elif plan.backend == "slurm":
        with plan.cluster_class()(**plan.kwargs) as dask_cluster:  # a scheduler, no job
            _preflight_slurm(dask_cluster)
    elif plan.job_queue:
        plan.cluster_class()  # the package is there


@contextlib.contextmanager
def open_cluster(
    cluster: Options,
    *,
    concurrency: int,
    max_ranks: int,
    launcher: str,
    study_name: str | None = None,
) -> Iterator[ClusterHandle]:
    """Start (or connect to) the cluster for a study; StudyError for anything found unfit."""
    from distributed import Client

    worker_timeout = float(getattr(cluster, "worker_timeout", DEFAULT_WORKER_TIMEOUT))
    if cluster.backend == "address":
        for client in _connect(cluster, max_ranks, launcher):
            yield ClusterHandle(client, "address", worker_timeout)
        return
    plan = plan_cluster(
        cluster, concurrency=concurrency, max_ranks=max_ranks, study_name=study_name
    )
    if plan.backend == "local":
        try:
            launcher_argv(launcher, max_ranks)
        except LauncherNotFound as exc:
            raise StudyError("launcher.command", str(exc)) from None
    durations = {
        **dask.config.get("distributed.scheduler.default-task-durations", {}),
        **trial_task_durations(study_name),
    }
    errors: list[str] = []
    extra: dict[str, Any] = {}
    if plan.job_queue:
        base: Any = plan.cluster_class()
        extra["job_cls"] = _recording_job_class(base.job_cls, errors)
    # The in-process scheduler (local, slurm, pbs) reads these when it first sees a trial task.
    with (
        dask.config.set({"distributed.scheduler.default-task-durations": durations}),
        plan.start(
            preflight=_preflight_slurm if plan.backend == "slurm" else None, **extra
        ) as dask_cluster,
        Client(dask_cluster) as client,
    ):
        yield ClusterHandle(client, plan.backend, worker_timeout, dask_cluster, errors)


@contextlib.contextmanager
def open_client(
    cluster: Options | None = None,
    *,
    concurrency: int,
    max_ranks: int,
    launcher: str,
    study_name: str | None = None,
    address: str | None = None,
    workers: int | None = None,
    slots_per_worker: int | None = None,
    connect_timeout: float = 10.0,
) -> Iterator[Client]:
    """A connected client whose workers can run this study's trials, or StudyError.

    ``cluster`` is the study file's ``[cluster]`` table; without it, the other keywords describe
    a local cluster (or ``address``), as before tables had backends.
    """
    if cluster is None:
        cluster = _Options(
            backend="address" if address else "local",
            address=address,
            connect_timeout=connect_timeout,
            workers=workers,
            slots_per_worker=slots_per_worker,
        )
    with open_cluster(
        cluster,
        concurrency=concurrency,
        max_ranks=max_ranks,
        launcher=launcher,
        study_name=study_name,
    ) as handle:
        yield handle.client


def _connect(cluster: Options, max_ranks: int, launcher: str) -> Generator[Client, None, None]:
    from distributed import Client

    address, timeout = cluster.address, cluster.connect_timeout
    _probe(address, timeout)
    try:
        client = Client(address, timeout=f"{timeout}s")
    except (OSError, TimeoutError) as exc:
        raise StudyError(
            "cluster.address",
            f"no Dask scheduler answered at {address} within {timeout:g} s ({exc})",
        ) from None
    with client:
        _check_remote_workers(client, max_ranks, launcher)
        yield client


def _check_remote_workers(client: Client, max_ranks: int, launcher: str) -> None:
    workers = client.scheduler_info(n_workers=-1)["workers"]
    slots = [w.get("resources", {}).get(MPI, 0) for w in workers.values()]
    if workers and max(slots) < max_ranks:
        raise StudyError(
            "cluster.address",
            f"no worker offers {max_ranks} '{MPI}' slots (largest: {max(slots):g}); start workers "
            f"with '--resources {MPI}={max_ranks}'",
        )

    def check() -> str:
        try:
            launcher_argv(launcher, max_ranks)
            return ""
        except LauncherNotFound as exc:
            return str(exc)

    for worker, problem in client.run(check).items():
        if problem:
            raise StudyError("launcher.command", f"on worker {worker}: {problem}")
