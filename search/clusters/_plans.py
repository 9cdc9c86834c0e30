"""What to start for the study file's ``[cluster]`` table: a plan per backend, built without I/O.

Backends (``BACKENDS``): ``local`` (a LocalCluster, the default), ``address`` (an existing
scheduler), ``slurm`` / ``sge`` (Grid Engine) / ``pbs`` (dask-jobqueue), ``kubernetes``
(dask-kubernetes) and ``cloud`` (dask-cloudprovider: EC2, GCP, Azure). Each backend turns the
table into a ``ClusterPlan``: the class to construct and its keyword arguments, built without
any I/O, so the plan can be checked (and tested) before anything is started, submitted or paid
for.

Every Dask worker runs one trial at a time (one thread) and offers ``MPI`` slots as a worker
resource; a trial asks for ``ranks`` of them, so all ranks of a trial land on one worker: one
process on the local machine, one batch job (possibly spanning nodes) on SLURM/Grid Engine/PBS,
one pod on Kubernetes, one VM in the cloud. A trial whose rank count no worker can hold would
wait forever, so that is checked before the first trial is asked for.

>>> plan = BACKENDS["local"].plan(_Options(), slots=2, workers=1, adapt=None)
>>> plan.factory, plan.kwargs["resources"]
('distributed:LocalCluster', {'MPI': 2})
"""

from __future__ import annotations

import logging
import os
from typing import Any

from search._errors import StudyError
from search.clusters._base import (
    LOCALHOST,
    MPI,
    Adapt,
    Backend,
    ClusterPlan,
    Options,
    _Options,  # noqa: F401 - the module doctest builds one
    dashboard_address,
)
from search.clusters._remote import (
    CLOUD_PROVIDERS,
    plan_cloud,
    plan_kubernetes,
    plan_pbs,
    plan_sge,
    plan_slurm,
)

# --- local -----------------------------------------------------------------------------------


WORKER_PRELOAD = ("search.backends._dask", "search.backends._objectives")


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
        "dashboard_address": dashboard_address(opts, host),
        "scheduler_kwargs": {"dashboard": opts.dashboard is not False},
        "silence_logs": logging.ERROR,
        # Workers import the trial code when they start, not during the first trial.
        "preload": list(WORKER_PRELOAD),
    }
    return ClusterPlan("local", "distributed:LocalCluster", kwargs, slots, workers, adapt)


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
    "slurm": Backend(frozenset(_JOBQUEUE), plan_slurm, "dask-jobqueue SLURMCluster"),
    # One host per job (the parallel environment places the slots), so no 'nodes'.
    "sge": Backend(
        frozenset(_JOBQUEUE - {"nodes"} | {"resource_spec", "parallel_environment"}),
        plan_sge,
        "dask-jobqueue SGECluster (Grid Engine)",
    ),
    "pbs": Backend(frozenset(_JOBQUEUE | {"resource_spec"}), plan_pbs, "dask-jobqueue PBS"),
    "kubernetes": Backend(
        frozenset(_SCALED | {"name", "image", "namespace", "resources", "env", "cpus_per_slot"}),
        plan_kubernetes,
        "dask-kubernetes KubeCluster",
    ),
    "cloud": Backend(
        frozenset(
            _SCALED
            | {"dashboard", "provider", "instance_type", "region", "image", "env",
               "provider_options"}
        ),
        plan_cloud,
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
