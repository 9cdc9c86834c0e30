"""Where trials run: start (or connect to) the Dask cluster for a study and watch it deliver.

The plans (what to start for each backend, without I/O) are :mod:`search.clusters._plans`.
Here: the ``search run`` flags applied to the ``[cluster]`` table, the connected client, the
checks made before the first trial, and the watch on a cluster that must deliver workers.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import dask

from search._errors import StudyError
from search.clusters._base import (
    DEFAULT_WORKER_TIMEOUT,
    MPI,
    ClusterPlan,
    Options,
    _Options,
    trial_task_durations,
)
from search.clusters._plans import BACKENDS, plan_cluster
from search.clusters._watch import (
    PREFLIGHTS,
    ClusterHandle,
    recording_job_class,
)
from training.launch import LauncherNotFound, launcher_argv

if TYPE_CHECKING:
    from distributed import Client

    from search.studyfile._sections import Cluster


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

    from search.studyfile._sections import Cluster
    from search.studyfile._study_file import _format

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


def _checked_plan(
    cluster: Options, concurrency: int, max_ranks: int, launcher: str, study_name: str | None
) -> ClusterPlan:
    """The plan, and for a local cluster (whose workers are this machine) the launcher."""
    plan = plan_cluster(
        cluster, concurrency=concurrency, max_ranks=max_ranks, study_name=study_name
    )
    if plan.backend == "local":
        try:
            launcher_argv(launcher, max_ranks)
        except LauncherNotFound as exc:
            raise StudyError("launcher.command", str(exc)) from None
    return plan


def check_cluster(
    cluster: Options,
    *,
    concurrency: int,
    max_ranks: int,
    launcher: str,
    study_name: str | None = None,
) -> None:
    """What :func:`open_cluster` checks before the first trial, starting no worker: the plan,
    the launcher (local), the scheduler and its workers (address), and the batch system's
    verdict on the job script (SLURM: ``sbatch --test-only``, Grid Engine: ``qsub -w v``; see
    ``PREFLIGHTS``). PBS, Kubernetes and cloud plans are only built."""
    if cluster.backend == "address":
        connected = _connect(cluster, max_ranks, launcher)
        next(connected)  # connected, workers checked
        connected.close()  # disconnects
        return
    plan = _checked_plan(cluster, concurrency, max_ranks, launcher, study_name)
    preflight = PREFLIGHTS.get(plan.backend)
    if preflight is not None:
        with plan.cluster_class()(**plan.kwargs) as dask_cluster:  # a scheduler, no job
            preflight(dask_cluster)
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
    plan = _checked_plan(cluster, concurrency, max_ranks, launcher, study_name)
    durations = {
        **dask.config.get("distributed.scheduler.default-task-durations", {}),
        **trial_task_durations(study_name),
    }
    errors: list[str] = []
    extra: dict[str, Any] = {}
    if plan.job_queue:
        base: Any = plan.cluster_class()
        extra["job_cls"] = recording_job_class(base.job_cls, errors)
    # The in-process scheduler (local, slurm, sge, pbs) reads these when it first sees a trial
    # task.
    with (
        dask.config.set({"distributed.scheduler.default-task-durations": durations}),
        plan.start(preflight=PREFLIGHTS.get(plan.backend), **extra) as dask_cluster,
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
