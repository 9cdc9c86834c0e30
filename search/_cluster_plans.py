"""What to start for the study file's ``[cluster]`` table: a plan per backend, built without I/O.

Backends (``BACKENDS``): ``local`` (a LocalCluster, the default), ``address`` (an existing
scheduler), ``slurm`` / ``pbs`` (dask-jobqueue), ``kubernetes`` (dask-kubernetes) and ``cloud``
(dask-cloudprovider: EC2, GCP, Azure). Each backend turns the table into a ``ClusterPlan``: the
class to construct and its keyword arguments, built without any I/O, so the plan can be checked
(and tested) before anything is started, submitted or paid for.

Every Dask worker runs one trial at a time (one thread) and offers ``MPI`` slots as a worker
resource; a trial asks for ``ranks`` of them, so all ranks of a trial land on one worker: one
process on the local machine, one batch job (possibly spanning nodes) on SLURM/PBS, one pod on
Kubernetes, one VM in the cloud. A trial whose rank count no worker can hold would wait forever,
so that is checked before the first trial is asked for.

>>> plan = BACKENDS["local"].plan(_Options(), slots=2, workers=1, adapt=None)
>>> plan.factory, plan.kwargs["resources"]
('distributed:LocalCluster', {'MPI': 2})
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dask
from pydantic import BaseModel, ConfigDict, Field, model_validator

from search._errors import StudyError

MPI = "MPI"  # the Dask worker resource that counts MPI slots
LOCALHOST = "127.0.0.1"
# Adaptive scaling assumes 500 ms for a task it has not seen finish, so it would start one worker
# for a queue of hour-long trials. Until a trial has finished, assume trials are this long.
TRIAL_DURATION_ESTIMATE = "1h"
# Task-name prefixes of trial tasks (``dask.utils.key_split`` of their keys).
TRIAL_TASK_PREFIXES = ("run_trial_on_worker", "run_function_trial", "trial")
# Seconds trials may wait with no Dask worker connected before the run stops.
DEFAULT_WORKER_TIMEOUT = 300.0


class Adapt(BaseModel):
    """``adapt = { minimum = 0, maximum = 4 }``: workers follow the queue of trials."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    minimum: int = Field(0, ge=0, description="workers kept when idle")
    maximum: int = Field(ge=1, description="workers at most")
    interval: float = Field(1.0, gt=0, description="seconds between scaling decisions")
    wait_count: int = Field(3, ge=1, description="idle decisions in a row before a worker goes")

    @model_validator(mode="after")
    def _ordered(self) -> Adapt:
        if self.minimum > self.maximum:
            raise StudyError(
                "cluster.adapt",
                f"minimum ({self.minimum}) must not exceed maximum ({self.maximum})",
            )
        return self


class _Options(BaseModel):
    """Defaults of the ``[cluster]`` options a backend reads (doctests and legacy callers)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    backend: str = "local"
    address: str | None = None
    workers: int | None = None
    slots_per_worker: int | None = None
    adapt: Adapt | None = None
    connect_timeout: float = 10.0
    worker_timeout: float = DEFAULT_WORKER_TIMEOUT
    dashboard: bool | str = False
    scheduler_host: str | None = None
    interface: str | None = None
    queue: str | None = None
    account: str | None = None
    walltime: str | None = None
    memory: str | None = None
    cpus_per_slot: int = 1
    nodes: int | None = None
    job_extra_directives: list[str] = Field(default_factory=list)
    job_script_prologue: list[str] = Field(default_factory=list)
    python: str | None = None
    log_directory: str | None = None
    resource_spec: str | None = None
    name: str = "detol"
    image: str | None = None
    namespace: str | None = None
    resources: dict[str, dict[str, Any]] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    provider: str | None = None
    instance_type: str | None = None
    region: str | None = None
    provider_options: dict[str, Any] = Field(default_factory=dict)


Options = Any  # a search._study_sections.Cluster (or _Options): the [cluster] table


@dataclass(frozen=True)
class ClusterPlan:
    """What to start: ``factory`` ("module:Class") called with ``kwargs``. Building a plan does no
    I/O; ``start`` constructs the cluster (which starts a scheduler, and may contact a cloud)."""

    backend: str
    factory: str
    kwargs: dict[str, Any]
    slots: int
    workers: int = 0
    adapt: Adapt | None = None
    pip_extra: str = ""
    # Backends whose adapt() takes only minimum/maximum (scaling runs in the operator).
    adapt_bounds_only: bool = False
    scheduler_env: dict[str, str] = field(default_factory=dict)
    job_queue: bool = False  # a dask-jobqueue cluster: workers are batch jobs

    def cluster_class(self) -> type:
        """The class ``factory`` names, imported now; a missing package is a StudyError."""
        module, _, attr = self.factory.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]
        except ImportError as exc:
            hint = f" (pip install 'detol[{self.pip_extra}]')" if self.pip_extra else ""
            raise StudyError(
                "cluster.backend",
                f"the {self.backend!r} backend needs {module.split('.')[0]}{hint}: {exc}",
            ) from None

    def start(self, *, preflight: Callable[[Any], None] | None = None, **extra: Any) -> Any:
        """Construct the cluster, scale it (fixed or adaptive) and return it (a context manager).

        ``extra`` keyword arguments go to the cluster class too; ``preflight(cluster)`` runs
        before any worker is asked for (the cluster is closed if it raises).
        """
        cluster = self.cluster_class()(**self.kwargs, **extra)
        if preflight is not None:
            try:
                preflight(cluster)
            except BaseException:
                cluster.close()
                raise
        if self.adapt is not None:
            bounds = {"minimum": self.adapt.minimum, "maximum": self.adapt.maximum}
            if self.adapt_bounds_only:
                cluster.adapt(**bounds)
            else:
                cluster.adapt(
                    **bounds, interval=f"{self.adapt.interval}s", wait_count=self.adapt.wait_count
                )
        elif self.backend != "local" and self.workers:
            cluster.scale(self.workers)
        return cluster


@dataclass(frozen=True)
class Backend:
    """A way to get Dask workers: the ``[cluster]`` options it reads, and how it builds a plan."""

    options: frozenset[str]
    plan: Callable[..., ClusterPlan]
    description: str = ""


def _dashboard_address(opts: Options, host: str) -> str | None:
    """Where the scheduler's HTTP server binds. Dask starts one even without a dashboard (health
    and metrics routes), by default on port 8787: off means an ephemeral port on ``host``, so
    no well-known port is taken and a second study never collides with the first."""
    if opts.dashboard is False:  # no host (an interface): Dask binds to the scheduler's address
        return f"{host}:0" if host else None
    if opts.dashboard is True:
        return f"{host}:8787"
    return str(opts.dashboard)


def _task_durations() -> dict[str, str]:
    return {prefix: TRIAL_DURATION_ESTIMATE for prefix in TRIAL_TASK_PREFIXES}


def trial_task_durations(study_name: str | None = None) -> dict[str, str]:
    """``distributed.scheduler.default-task-durations`` entries for this study's trial tasks."""
    from dask.utils import key_split

    durations = _task_durations()
    if study_name:  # the driver's keys are f"trial-{study}-{number}-{owner}"
        durations[key_split(f"trial-{study_name}-0-x")] = TRIAL_DURATION_ESTIMATE
    return durations


def _remote_scheduler_env(study_name: str | None) -> dict[str, str]:
    # Dask parses environment values with ast.literal_eval, so a dict literal becomes a dict.
    return {
        # A lost trial is the driver's to re-queue (a new trial number), never Dask's to re-run.
        "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0",
        "DASK_DISTRIBUTED__SCHEDULER__DEFAULT_TASK_DURATIONS": repr(
            trial_task_durations(study_name)
        ),
    }


# --- local -----------------------------------------------------------------------------------


WORKER_PRELOAD = ("search._backend", "search._objectives")


def _plan_local(
    opts: Options, *, slots: int, workers: int, adapt: Adapt | None, **_: Any
) -> ClusterPlan:
    host = opts.scheduler_host or LOCALHOST
    kwargs = {
        "n_workers": adapt.minimum if adapt else workers,
        "threads_per_worker": 1,
        "processes": True,
        "resources": {MPI: slots},
        "host": host,
        "dashboard_address": _dashboard_address(opts, host),
        "scheduler_kwargs": {"dashboard": opts.dashboard is not False},
        "silence_logs": logging.ERROR,
        # Workers import the trial code when they start, not during the first trial.
        "preload": list(WORKER_PRELOAD),
    }
    return ClusterPlan("local", "distributed:LocalCluster", kwargs, slots, workers, adapt)


# --- slurm and pbs (dask-jobqueue) ---------------------------------------------------------------


def _jobqueue_common(opts: Options, backend: str, slots: int) -> dict[str, Any]:
    memory = opts.memory or dask.config.get(f"jobqueue.{backend}.memory", None)
    if not memory:
        raise StudyError(
            "cluster.memory",
            f"required for the {backend!r} backend: memory per job (per node), e.g. '16GB'",
        )
    if not (
        opts.scheduler_host
        or opts.interface
        or dask.config.get(f"jobqueue.{backend}.interface", None)
    ):
        raise StudyError(
            "cluster.scheduler_host",
            f"required for the {backend!r} backend: the address compute nodes reach this "
            "machine on (or cluster.interface, e.g. 'ib0'); the scheduler binds to it",
        )
    if opts.nodes and slots % opts.nodes:
        raise StudyError(
            "cluster.nodes",
            f"{slots} MPI slots per job do not split evenly over {opts.nodes} nodes",
        )
    # No dashboard unless asked; even then it binds where the scheduler does (jobqueue's own
    # default is ':8787' on every interface).
    host = opts.scheduler_host or ""
    scheduler: dict[str, Any] = {
        "dashboard": opts.dashboard is not False,
        "dashboard_address": _dashboard_address(opts, host),
    }
    if opts.scheduler_host:
        scheduler["host"] = opts.scheduler_host
    kwargs: dict[str, Any] = {
        # One Dask worker per job with one thread: one trial per job, its ranks are the job's tasks.
        "cores": 1,
        "processes": 1,
        "memory": memory,
        "queue": opts.queue,
        "account": opts.account,
        "walltime": opts.walltime,
        "worker_extra_args": ["--resources", f"{MPI}={slots}"],
        "job_script_prologue": list(opts.job_script_prologue),
        "scheduler_options": scheduler,
        "n_workers": 0,
    }
    for key in ("python", "log_directory", "interface"):
        if getattr(opts, key) is not None:
            kwargs[key] = getattr(opts, key)
    return {k: v for k, v in kwargs.items() if v is not None or k == "scheduler_options"}


def _plan_slurm(
    opts: Options, *, slots: int, workers: int, adapt: Adapt | None, **_: Any
) -> ClusterPlan:
    kwargs = _jobqueue_common(opts, "slurm", slots)
    directives = [f"--ntasks={slots}", f"--cpus-per-task={opts.cpus_per_slot}"]
    if opts.nodes:
        directives.append(f"--nodes={opts.nodes}")
    kwargs["job_directives_skip"] = ["-n 1", "--cpus-per-task"]  # jobqueue's one-task header
    kwargs["job_extra_directives"] = [*directives, *opts.job_extra_directives]
    return ClusterPlan(
        "slurm",
        "dask_jobqueue:SLURMCluster",
        kwargs,
        slots,
        workers,
        adapt,
        pip_extra="slurm",
        job_queue=True,
    )


def _plan_pbs(
    opts: Options, *, slots: int, workers: int, adapt: Adapt | None, **_: Any
) -> ClusterPlan:
    kwargs = _jobqueue_common(opts, "pbs", slots)
    nodes = opts.nodes or 1
    per_node = slots // nodes
    spec = opts.resource_spec or (
        f"select={nodes}:ncpus={per_node * opts.cpus_per_slot}:mpiprocs={per_node}"
        f":mem={kwargs['memory']}"
    )
    kwargs["resource_spec"] = spec
    kwargs["job_extra_directives"] = list(opts.job_extra_directives)
    return ClusterPlan(
        "pbs",
        "dask_jobqueue:PBSCluster",
        kwargs,
        slots,
        workers,
        adapt,
        pip_extra="pbs",
        job_queue=True,
    )


# --- kubernetes (dask-kubernetes operator) ------------------------------------------------------


def _plan_kubernetes(
    opts: Options,
    *,
    slots: int,
    workers: int,
    adapt: Adapt | None,
    study_name: str | None = None,
    **_: Any,
) -> ClusterPlan:
    try:
        from dask_kubernetes.operator import make_cluster_spec
    except ImportError as exc:
        raise StudyError(
            "cluster.backend",
            f"the 'kubernetes' backend needs dask-kubernetes (pip install "
            f"'detol[kubernetes]'): {exc}",
        ) from None
    resources = opts.resources or {
        "requests": {"cpu": str(slots * opts.cpus_per_slot)},
        "limits": {"cpu": str(slots * opts.cpus_per_slot)},
    }
    env = {
        **opts.env,
        # Dask lower-cases names in DASK_A__B__NAME variables ('mpi' != 'MPI'), but a dict
        # literal as the value keeps the resource name as written.
        "DASK_DISTRIBUTED__WORKER__RESOURCES": repr({MPI: slots}),
        **_remote_scheduler_env(study_name),
    }
    spec = make_cluster_spec(
        name=opts.name,
        image=opts.image or "ghcr.io/dask/dask:latest",
        n_workers=adapt.minimum if adapt else workers,
        resources=resources,
        env=env,
    )
    worker = spec["spec"]["worker"]["spec"]["containers"][0]
    worker["args"] += ["--nthreads", "1"]  # one trial per pod
    kwargs: dict[str, Any] = {"custom_cluster_spec": spec, "shutdown_on_close": True}
    if opts.namespace:
        kwargs["namespace"] = opts.namespace
    return ClusterPlan(
        "kubernetes",
        "dask_kubernetes.operator:KubeCluster",
        kwargs,
        slots,
        workers,
        adapt,
        pip_extra="kubernetes",
        adapt_bounds_only=True,
    )


# --- cloud (dask-cloudprovider) ------------------------------------------------------------------


@dataclass(frozen=True)
class CloudProvider:
    """A dask-cloudprovider VM cluster class and the names its options go by."""

    factory: str
    instance_type: str
    region: str
    pip_extra: str


CLOUD_PROVIDERS: dict[str, CloudProvider] = {
    "ec2": CloudProvider("dask_cloudprovider.aws:EC2Cluster", "instance_type", "region", "aws"),
    "gcp": CloudProvider("dask_cloudprovider.gcp:GCPCluster", "machine_type", "zone", "gcp"),
    "azure": CloudProvider(
        "dask_cloudprovider.azure:AzureVMCluster", "vm_size", "location", "azure"
    ),
}


def _plan_cloud(
    opts: Options,
    *,
    slots: int,
    workers: int,
    adapt: Adapt | None,
    study_name: str | None = None,
    **_: Any,
) -> ClusterPlan:
    provider = CLOUD_PROVIDERS[opts.provider]
    kwargs: dict[str, Any] = {
        "n_workers": adapt.minimum if adapt else workers,
        # Each VM runs one Dask worker (a Nanny) with one thread and the MPI slots as resources.
        "worker_options": {"nthreads": 1, "resources": {MPI: slots}},
        "env_vars": {**opts.env, **_remote_scheduler_env(study_name)},
        "scheduler_options": {"dashboard": opts.dashboard is not False},
    }
    if opts.instance_type:
        kwargs[provider.instance_type] = opts.instance_type
    if opts.region:
        kwargs[provider.region] = opts.region
    if opts.image:
        kwargs["docker_image"] = opts.image
    for key, value in opts.provider_options.items():
        if key in kwargs:
            raise StudyError(
                f"cluster.provider_options.{key}", "set by detol; use the [cluster] option"
            )
        kwargs[key] = value
    return ClusterPlan(
        "cloud",
        provider.factory,
        kwargs,
        slots,
        workers,
        adapt,
        pip_extra="cloud",
    )


def _plan_address(opts: Options, **_: Any) -> ClusterPlan:
    raise StudyError("cluster.backend", "the 'address' backend connects; it starts no cluster")


_SCALED = {"workers", "slots_per_worker", "adapt"}
_JOBQUEUE = _SCALED | {
    "dashboard", "scheduler_host", "interface", "queue", "account", "walltime", "memory",
    "cpus_per_slot", "nodes", "job_extra_directives", "job_script_prologue", "python",
    "log_directory",
}  # fmt: skip

BACKENDS: dict[str, Backend] = {
    "local": Backend(
        frozenset(_SCALED | {"dashboard", "scheduler_host"}), _plan_local, "LocalCluster"
    ),
    "address": Backend(frozenset({"address", "connect_timeout"}), _plan_address, "a scheduler"),
    "slurm": Backend(frozenset(_JOBQUEUE), _plan_slurm, "dask-jobqueue SLURMCluster"),
    "pbs": Backend(frozenset(_JOBQUEUE | {"resource_spec"}), _plan_pbs, "dask-jobqueue PBS"),
    "kubernetes": Backend(
        frozenset(_SCALED | {"name", "image", "namespace", "resources", "env", "cpus_per_slot"}),
        _plan_kubernetes,
        "dask-kubernetes KubeCluster",
    ),
    "cloud": Backend(
        frozenset(
            _SCALED
            | {"dashboard", "provider", "instance_type", "region", "image", "env",
               "provider_options"}
        ),
        _plan_cloud,
        "dask-cloudprovider EC2Cluster / GCPCluster / AzureVMCluster",
    ),
}  # fmt: skip


def check_backend_options(opts: Options) -> None:
    """StudyError naming ``cluster.<key>`` for an option the chosen backend does not read."""
    backend = BACKENDS[opts.backend]
    # connect_timeout (how long a client waits for the scheduler) and worker_timeout (how long
    # trials wait for a first worker) fit every backend.
    shared = {"backend", "connect_timeout", "worker_timeout"}
    for key in sorted(opts.model_fields_set - shared - backend.options):
        raise StudyError(
            f"cluster.{key}",
            f"not an option of the {opts.backend!r} backend (its options: "
            f"{sorted(backend.options)})",
        )
    if opts.backend == "address" and not opts.address:
        raise StudyError("cluster.address", "required for the 'address' backend (tcp://host:port)")
    if opts.backend == "cloud" and opts.provider not in CLOUD_PROVIDERS:
        raise StudyError(
            "cluster.provider",
            f"unknown provider {opts.provider!r} (known: {sorted(CLOUD_PROVIDERS)})",
        )


def local_cluster_shape(
    *,
    concurrency: int,
    max_ranks: int,
    workers: int | None = None,
    slots_per_worker: int | None = None,
) -> tuple[int, int]:
    """(workers, MPI slots per worker) for a LocalCluster on this machine.

    One worker per concurrent trial; the machine's cores are shared out, and every worker gets at
    least the largest rank count in the study (oversubscribing small machines, as MPI allows).
    """
    n = workers or concurrency
    cores = os.cpu_count() or 1
    slots = slots_per_worker or max(max_ranks, cores // n)
    return n, slots


def plan_cluster(
    opts: Options, *, concurrency: int, max_ranks: int, study_name: str | None = None
) -> ClusterPlan:
    """The plan for ``opts`` (a ``[cluster]`` table) and a study; no I/O, StudyError if unfit."""
    if opts.backend == "local":
        workers, slots = local_cluster_shape(
            concurrency=concurrency,
            max_ranks=max_ranks,
            workers=opts.workers,
            slots_per_worker=opts.slots_per_worker,
        )
    else:
        workers = opts.workers if opts.workers is not None else concurrency
        slots = opts.slots_per_worker or max_ranks
    if slots < max_ranks:
        raise StudyError(
            "cluster.slots_per_worker",
            f"{slots} MPI slots cannot hold a trial with {max_ranks} ranks",
        )
    return BACKENDS[opts.backend].plan(
        opts, slots=slots, workers=workers, adapt=opts.adapt, study_name=study_name
    )
