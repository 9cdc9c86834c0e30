"""Plans for clusters beyond this machine, built without I/O: SLURM, Grid Engine and PBS
(dask-jobqueue),
Kubernetes (the dask-kubernetes operator) and the cloud (dask-cloudprovider: EC2, GCP, Azure).
The registry that names them is :data:`search.clusters._plans.BACKENDS`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import dask

from search._errors import StudyError
from search.clusters._base import (
    MPI,
    Adapt,
    ClusterPlan,
    Options,
    dashboard_address,
    remote_scheduler_env,
)

# --- slurm, sge and pbs (dask-jobqueue) ----------------------------------------------------------

# Seconds a batch job's Dask worker waits for a scheduler it lost (or never reached) before it
# ends, and its job with it: the bound on orphans of a killed driver (docs/faults.md).
DEATH_TIMEOUT_S = float(os.environ.get("DETOL_DEATH_TIMEOUT_S", "20"))


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
        "dashboard_address": dashboard_address(opts, host),
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
        # The preload keeps the worker's process name free of spaces, so a batch system that
        # tracks a job's processes by their /proc lines finds it (search/clusters/_proctitle.py).
        "worker_extra_args": ["--resources", f"{MPI}={slots}",
                              "--preload", "search.clusters._proctitle"],
        # A worker whose scheduler (in the driver) is gone ends, and its batch job with it
        # (issue 27; docs/faults.md gives the bound). jobqueue's own default is 60 s.
        "death_timeout": DEATH_TIMEOUT_S,
        "job_script_prologue": list(opts.job_script_prologue),
        "scheduler_options": scheduler,
        "n_workers": 0,
    }
    for key in ("python", "log_directory", "interface"):
        if getattr(opts, key) is not None:
            kwargs[key] = getattr(opts, key)
    return {k: v for k, v in kwargs.items() if v is not None or k == "scheduler_options"}


def plan_slurm(
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


def plan_pbs(
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


# Grid Engine's parallel environment for a worker job's MPI slots when cluster.parallel_environment
# is not set: 'smp' (all slots on one host) is the name most sites and .ci/sge.sh give it.
SGE_PARALLEL_ENVIRONMENT = "smp"


def plan_sge(
    opts: Options, *, slots: int, workers: int, adapt: Adapt | None, **_: Any
) -> ClusterPlan:
    kwargs = _jobqueue_common(opts, "sge", slots)
    if "account" in kwargs:  # Grid Engine charges a project (-P), not an account
        kwargs["project"] = kwargs.pop("account")
    if opts.resource_spec:
        kwargs["resource_spec"] = opts.resource_spec
    pe = opts.parallel_environment or SGE_PARALLEL_ENVIRONMENT
    directives = [
        f"-pe {pe} {slots * opts.cpus_per_slot}",  # the trial's ranks are the job's slots
        "-S /bin/bash",  # not the queue's shell: prologue lines may be bash
        "-V",  # the submitting environment, as sbatch passes it
    ]
    kwargs["job_extra_directives"] = [*directives, *opts.job_extra_directives]
    return ClusterPlan(
        "sge",
        "dask_jobqueue:SGECluster",
        kwargs,
        slots,
        workers,
        adapt,
        pip_extra="sge",
        job_queue=True,
    )


# --- kubernetes (dask-kubernetes operator) ------------------------------------------------------


def plan_kubernetes(
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
        **remote_scheduler_env(study_name),
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


def plan_cloud(
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
        "env_vars": {**opts.env, **remote_scheduler_env(study_name)},
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
