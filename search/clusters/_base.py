"""What every cluster plan shares (search.clusters._plans, search.clusters._remote): the ``MPI``
worker resource, the ``[cluster]`` options as one model, a plan (the class to construct and its
keyword arguments) and a backend's entry in the registry, and what a remote scheduler is told
about trials (their expected duration, no Dask retries)."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
# Times a local cluster is started before a worker that dies while it starts stops the run.
START_ATTEMPTS = 3
log = logging.getLogger("detol.cluster")


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
    parallel_environment: str | None = None
    name: str = "detol"
    image: str | None = None
    namespace: str | None = None
    resources: dict[str, dict[str, Any]] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    provider: str | None = None
    instance_type: str | None = None
    region: str | None = None
    provider_options: dict[str, Any] = Field(default_factory=dict)


Options = Any  # a search.studyfile._sections.Cluster (or _Options): the [cluster] table


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

    def _construct(self, **extra: Any) -> Any:
        """The cluster object. A local worker process that dies while the cluster starts (killed,
        out of memory) makes Dask raise 'Nanny failed to start'; that is a fault of the moment,
        not of the study, so the local cluster is started again, up to :data:`START_ATTEMPTS`
        times, and then a StudyError says what happened in one line."""
        cls = self.cluster_class()
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                return cls(**self.kwargs, **extra)
            except RuntimeError as exc:
                if self.backend != "local" or "failed to start" not in str(exc):
                    raise
                if attempt == START_ATTEMPTS:
                    raise StudyError(
                        "cluster",
                        f"the local Dask cluster did not start in {START_ATTEMPTS} attempts: "
                        f"a worker process died while starting ({exc}; its cause: "
                        f"{exc.__cause__ or 'unknown'})",
                    ) from None
                log.warning("a local Dask worker died while the cluster started (%s); "
                            "starting the cluster again (attempt %d of %d)", exc, attempt + 1,
                            START_ATTEMPTS)
        raise AssertionError("unreachable")

    def start(self, *, preflight: Callable[[Any], None] | None = None, **extra: Any) -> Any:
        """Construct the cluster, scale it (fixed or adaptive) and return it (a context manager).

        ``extra`` keyword arguments go to the cluster class too; ``preflight(cluster)`` runs
        before any worker is asked for (the cluster is closed if it raises).
        """
        cluster = self._construct(**extra)
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


def dashboard_address(opts: Options, host: str) -> str | None:
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
    if study_name:  # the driver's keys: search.driver._driver.Driver._task_key
        durations[key_split(f"trial-{study_name}-0-x")] = TRIAL_DURATION_ESTIMATE
    return durations


def remote_scheduler_env(study_name: str | None) -> dict[str, str]:
    # Dask parses environment values with ast.literal_eval, so a dict literal becomes a dict.
    return {
        # A lost trial is the driver's to re-queue (a new trial number), never Dask's to re-run.
        "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0",
        "DASK_DISTRIBUTED__SCHEDULER__DEFAULT_TASK_DURATIONS": repr(
            trial_task_durations(study_name)
        ),
    }
