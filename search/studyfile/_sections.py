"""The study file's tables other than the space and the whole: ``[budget]``, ``[strategy]``
(with its warm-start sources), ``[pruner]``, ``[checkpoints]``, ``[launcher]`` and
``[cluster]``, each a strict pydantic model (unknown keys are errors).
``search.studyfile._study_file`` puts them together into the study file."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from search._errors import StudyError, pydantic_message, words
from search.clusters._base import DEFAULT_WORKER_TIMEOUT, Adapt
from search.clusters._plans import BACKENDS, check_backend_options
from search.strategies._auto import AUTO
from search.strategies._registry import (
    PRUNER_OPTIONS,
    PRUNERS,
    STRATEGIES,
    STRATEGY_OPTIONS,
)
from training.contract import DEFAULT_LAUNCHER, redact

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Budget(_Strict):
    trials: int = Field(
        20, ge=1, description="finished (complete + pruned) trials the study should hold"
    )
    concurrency: int = Field(1, ge=1, description="trials running at once")
    timeout: float | None = Field(None, gt=0, description="seconds before no new trial starts "
                                  "(a benchmark objective: simulated seconds)")
    trial_timeout: float | None = Field(None, gt=0, description="seconds before a trial is killed")
    max_failures: int = Field(5, ge=1, description="failed trials in one run before it gives up")
    max_retries: int = Field(
        1,
        ge=0,
        description="times the parameters of a trial lost to a dead worker or driver are re-run",
    )


def _one_of(registry: Mapping[str, object], kind: str) -> AfterValidator:
    def check(v: str) -> str:
        if v not in registry:
            raise ValueError(f"unknown {kind} {v!r} (known: {words(sorted(registry))})")
        return v

    return AfterValidator(check)


class WarmSource(_Strict):
    """An earlier study a warm start reads (never writes): by name, in this study's storage or in
    another one (``storage``: a journal file, ``sqlite:///``, ``postgresql://`` ...)."""

    study: str = Field(description="name of the earlier study to read")
    storage: str | None = Field(None, description="its storage (left out: this study's own)")

    @field_validator("study")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"{v!r} is not a study name (letters, digits, '_', '-', '.')")
        return v

    @field_validator("storage")
    @classmethod
    def _storage(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("must not be empty: a journal file, sqlite:///FILE or a database URL")
        return v

    @field_serializer("storage")
    def _redacted(self, v: str | None) -> str | None:
        return None if v is None else redact(v)  # the stored study form holds no password


def _warm_sources(v: Any) -> Any:
    """``warm_start``: a list of study names or ``{ study = "NAME", storage = "URL" }`` tables."""
    if v is None:
        return v
    if not isinstance(v, list):
        raise StudyError("strategy.warm_start", 'expected a list of earlier studies, e.g. '
                         '["nb201-c10"] or [{ study = "NAME", storage = "URL" }]')
    out, problems = [], []
    for i, entry in enumerate(v):
        where = f"strategy.warm_start[{i}]"
        if isinstance(entry, str):
            entry = {"study": entry}
        if not isinstance(entry, dict):
            problems.append(StudyError(where, f"expected a study name or a table "
                                       f'{{ study = "NAME", storage = "URL" }}, got {entry!r}'))
            continue
        try:
            out.append(WarmSource.model_validate(entry))
        except ValidationError as exc:
            problems += [StudyError(".".join([where, *map(str, e["loc"])]), pydantic_message(e))
                         for e in exc.errors()]
    seen: set[tuple[str, str | None]] = set()
    for i, src in enumerate(out):
        if (src.study, src.storage) in seen:
            problems.append(StudyError(f"strategy.warm_start[{i}]",
                                       f"study {src.study!r} is named twice"))
        seen.add((src.study, src.storage))
    if problems:
        raise StudyError.many(problems)
    return out


# Options every strategy reads (beside name and seed): the warm start.
_COMMON_OPTIONS = {"name", "seed", "warm_start", "warm_start_top"}
DEFAULT_WARM_START_TOP = 5


def _not_an_option(name: str, key: str, allowed: set[str]) -> str:
    """Why ``key`` is refused for strategy ``name``; for ``auto`` (also the default, when no
    name is given), which strategies read it, so the user can name one."""
    if name != AUTO:
        return (f"not an option of the {name!r} strategy "
                f"(its options: {words(sorted(allowed)) or 'none'})")
    readers = [n for n, options in STRATEGY_OPTIONS.items() if key in options]
    why = ("not an option of the 'auto' strategy (the default: it picks the strategy by the "
           "space and takes no options)")
    if not readers:
        return why
    return f"{why}; name the strategy to set it, e.g. name = \"{readers[0]}\" " \
        f"(read by {words(readers)})"


class Strategy(_Strict):
    """The sampler. Each strategy reads only its own options (left out: its tuned default, see
    ``STRATEGY_OPTIONS``); any other key is an error."""

    name: Annotated[str, _one_of(STRATEGIES, "strategy")] = Field(
        AUTO, description="the sampler (reference: strategies and pruners); the default, "
        "'auto', picks one by the space (docs/strategies.md, 'Which strategy: auto')"
    )
    seed: int | None = Field(None, description="the sampler's seed (left out: a random one)")
    startup_trials: int | None = Field(
        None, ge=0, description="tpe/gp/predictor: random trials first"
    )
    ei_candidates: int | None = Field(None, ge=1, description="tpe: candidates scored per ask")
    constant_liar: bool | None = Field(
        None, description="tpe: running trials count as bad results (Optuna's constant liar)"
    )
    window: int | None = Field(
        None,
        ge=0,
        description="tpe/gp/predictor: trials the model is fitted on (best + most recent; 0: all)",
    )
    population: int | None = Field(None, ge=2, description="evolution/nsga2: population size")
    selection: Literal["greedy", "tournament"] | None = Field(
        None,
        description="evolution: 'greedy' (parent = best of the population; the default) or "
        "'tournament' (Real et al.: best of `tournament` random members)",
    )
    tournament: int | None = Field(
        None, ge=1, description="evolution: members per tournament (selection 'tournament': 10)"
    )
    mutation_prob: float | None = Field(
        None, ge=0, le=1, description="evolution/nsga2: chance each unit mutates (1/units)"
    )
    crossover_prob: float | None = Field(
        None, ge=0, le=1, description="evolution/nsga2: chance a child has two parents"
    )
    learning_rate: float | None = Field(None, gt=0, description="reinforce: policy step size")
    entropy_weight: float | None = Field(None, ge=0, description="reinforce: entropy bonus")
    baseline_decay: float | None = Field(
        None, ge=0, lt=1, description="reinforce: moving-average baseline decay"
    )
    bins: int | None = Field(None, ge=2, description="reinforce: arms for a numeric dimension")
    importance_weights: bool | None = Field(
        None, description="reinforce: weight a late result by pi_now / pi_then of its draw"
    )
    candidates: int | None = Field(None, ge=1, description="predictor: candidates scored per ask")
    parents: int | None = Field(
        None, ge=1, description="predictor: best-predicted known candidates mutated"
    )
    acquisition: Literal["ei", "ucb", "thompson"] | None = Field(
        None, description="predictor: expected improvement, mean + beta * std, or a posterior draw"
    )
    beta: float | None = Field(None, ge=0, description="predictor: ucb's weight on std")
    embedding: str | None = Field(
        None, description="predictor: spaces.SpaceEmbedding kind, e.g. 'path+wl', 'onehot+wl1'"
    )
    partial: bool | None = Field(
        None, description="predictor: until startup_trials complete, model the highest epoch "
        "that startup_trials configurations reached (paused, pruned; BOHB's rule; off)"
    )
    warm_start: Annotated[list[WarmSource] | None, BeforeValidator(_warm_sources)] = Field(
        None,
        description="earlier studies whose best candidates run first (search/driver/_warm_start.py)"
    )
    warm_start_top: int | None = Field(
        None, ge=0, description=f"warm start: best transferred candidates enqueued first "
        f"({DEFAULT_WARM_START_TOP}; 0: none, the predictor still learns from the sources)"
    )

    @model_validator(mode="after")
    def _own_options(self) -> Strategy:
        allowed = set(STRATEGY_OPTIONS[self.name])
        problems = [
            StudyError(f"strategy.{key}", _not_an_option(self.name, key, allowed))
            for key in sorted(self.model_fields_set - _COMMON_OPTIONS - allowed)
        ]
        if self.warm_start_top is not None and not self.warm_start:
            problems.append(StudyError("strategy.warm_start_top", "only with warm_start"))
        if self.tournament is not None and self.tournament > (
            self.population or STRATEGY_OPTIONS[self.name].get("population") or self.tournament
        ):
            problems.append(StudyError("strategy.tournament", "must be <= population"))
        if self.selection == "greedy" and self.tournament is not None:
            problems.append(StudyError(
                "strategy.tournament",
                "only with selection = \"tournament\" (greedy selection takes the whole "
                "population)",
            ))
        if problems:
            raise StudyError.many(problems)
        return self


class Pruner(_Strict):
    """Early stopping. Each pruner reads only its own options; any other key is an error."""

    name: Annotated[str, _one_of(PRUNERS, "pruner")] = Field(
        "median", description="early stopping rule; none: every trial trains all its epochs"
    )
    startup_trials: int = Field(5, ge=0, description="trials that finish before any is pruned")
    warmup_epochs: int = Field(1, ge=0, description="epochs of each trial before it can be pruned")
    percentile: float = Field(
        25.0, gt=0, lt=100, description="percentile: keep the top percentile % (25: a quarter)"
    )
    fraction: float = Field(
        0.5, gt=0, le=1, description="dominated: stop when this fraction of the others dominate"
    )
    min_epochs: int | None = Field(
        None, ge=1,
        description="asha/hyperband: epochs before the first rung; asha's default: "
        "training.epochs / reduction_factor^2 rounded up (its third rung is the full training), "
        "hyperband's: 1",
    )
    max_epochs: int | None = Field(None, ge=1, description="hyperband: default training.epochs")
    reduction_factor: int = Field(3, ge=2, description="asha/hyperband: 1/r survive each rung")
    min_early_stopping_rate: int = Field(0, ge=0, description="asha")
    lower: float | None = Field(None, description="threshold: prune below")
    upper: float | None = Field(None, description="threshold: prune above")
    patience: int = Field(3, ge=0, description="patient: epochs without improvement tolerated")
    min_delta: float = Field(0.0, ge=0, description="patient: smallest improvement that counts")
    wrapped: Annotated[str, _one_of(PRUNERS, "pruner")] = Field(
        "none", description="patient: the pruner it wraps"
    )
    promote: bool = Field(
        False,
        description="asha/hyperband: pause a trial at a rung, resume it from its checkpoint "
        "when it is promoted (Li et al.); false: Optuna's stop-only form",
    )

    @model_validator(mode="after")
    def _own_options(self) -> Pruner:
        allowed = set(PRUNER_OPTIONS[self.name])
        problems = []
        if self.name == "patient":
            if self.wrapped == "patient":
                problems.append(
                    StudyError("pruner.wrapped", "a patient pruner cannot wrap another one")
                )
            allowed |= set(PRUNER_OPTIONS[self.wrapped])
        problems += [
            StudyError(
                f"pruner.{key}",
                f"not an option of the {self.name!r} pruner "
                f"(its options: {words(sorted(allowed)) or 'none'})",
            )
            for key in sorted(self.model_fields_set - {"name"} - allowed)
        ]
        if self.name == "threshold" and self.lower is None and self.upper is None:
            problems.append(StudyError("pruner", "the threshold pruner needs lower and/or upper"))
        if problems:
            raise StudyError.many(problems)
        return self

    def spec_options(self, epochs: int) -> dict[str, Any]:
        return {**self.model_dump(), "max_epochs": self.max_epochs or epochs,
                "min_epochs": self.first_rung(epochs)}

    def first_rung(self, epochs: int) -> int:
        """asha's and hyperband's first rung: ``min_epochs``, else asha's default, the epoch
        whose third rung (``x r^2``) is the full training: on the three learning-curve tables
        epoch 1 ranked configurations poorly and a first rung at 3 of 20 epochs found better
        models than one at 1 (-0.071 +- 0.019 normalised regret, 119 paired runs; at 2: level;
        docs/anytime.md)."""
        if self.min_epochs is not None:
            return self.min_epochs
        if "asha" in (self.name, self.wrapped):
            return max(1, -(-epochs // self.reduction_factor ** 2))
        return 1


class Checkpoints(_Strict):
    """Trial checkpoints in an Optuna artifact store (training/state/_checkpoint.py)."""

    every: int = Field(
        0, ge=0, description="epochs between two checkpoints; 0: only when a trial pauses"
    )
    every_steps: int = Field(
        0, ge=0, description="also within an epoch, every this many global batches (a cursor "
        "into the epoch's sample stream: a resumed or resized trial reads the rest of the "
        "epoch exactly once); 0: only at epoch ends")
    keep: int = Field(2, ge=1, description="newest checkpoints kept per trial")
    store: str | None = Field(
        None,
        description="a directory, s3://BUCKET or gs://BUCKET; default: "
        "detol-artifacts beside the storage file",
    )

    @field_validator("store")
    @classmethod
    def _store(cls, v: str | None) -> str | None:
        if v is not None:
            scheme, sep, rest = v.partition("://")
            bucket = scheme in ("s3", "gs")
            if not v.strip() or (sep and (scheme not in ("file", "s3", "gs") or not rest
                                          or (bucket and "/" in rest.rstrip("/")))):
                raise ValueError(
                    f"{v!r}: expected a directory, s3://BUCKET or gs://BUCKET (a whole bucket: "
                    "Optuna's artifact stores take no prefix)"
                )
        return v


class Launcher(_Strict):
    command: str = Field(DEFAULT_LAUNCHER, description="MPI launcher; {ranks} is replaced")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="environment variables for every rank (and plug-in checks)",
    )
    warm: bool = Field(
        False, description="keep a warm pool of MPI ranks per Dask worker that runs many trials"
    )

    @field_validator("command")
    @classmethod
    def _has_ranks(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty, e.g. 'mpiexec -n {ranks}' or 'srun -n {ranks}'")
        if "{ranks}" not in v:
            raise ValueError(f"must contain '{{ranks}}' where the rank count goes, got {v!r}")
        return v


class Cluster(_Strict):
    """Where trials run. Each backend reads only its own options (``clusters.BACKENDS``)."""

    backend: Annotated[str, _one_of(BACKENDS, "cluster backend")] = Field(
        "local", description="local | address | slurm | sge | pbs | kubernetes | cloud"
    )
    address: str | None = Field(None, description="existing Dask scheduler, e.g. tcp://host:8786")
    workers: int | None = Field(None, ge=0, description="workers (jobs, pods, VMs) at start")
    slots_per_worker: int | None = Field(None, ge=1, description="MPI slots (ranks) per worker")
    connect_timeout: float = Field(
        10.0, gt=0, description="seconds to reach an existing scheduler before failing"
    )
    worker_timeout: float = Field(
        DEFAULT_WORKER_TIMEOUT, gt=0, description="seconds trials may wait with no worker at all"
    )
    adapt: Adapt | None = Field(None, description="adaptive scaling between minimum and maximum")
    dashboard: bool | str = Field(False, description="true (127.0.0.1:8787) or an address")
    scheduler_host: str | None = Field(None, description="scheduler listens here (127.0.0.1)")
    interface: str | None = Field(
        None, description="slurm/sge/pbs: network interface, e.g. ib0"
    )
    queue: str | None = Field(None, description="slurm partition / sge or pbs queue")
    account: str | None = Field(None, description="slurm/pbs account; sge project (-P)")
    walltime: str | None = Field(None, description="per job, e.g. 04:00:00")
    memory: str | None = Field(None, description="per job (per node), e.g. 16GB")
    cpus_per_slot: int = Field(1, ge=1, description="cores per MPI rank")
    nodes: int | None = Field(None, ge=1, description="nodes per job (multi-node MPI)")
    job_extra_directives: list[str] = Field(
        default_factory=list, description="extra #SBATCH / #PBS lines, e.g. --constraint=gpu"
    )
    job_script_prologue: list[str] = Field(
        default_factory=list, description="shell lines run before the worker, e.g. module load"
    )
    python: str | None = Field(None, description="python on the compute nodes")
    log_directory: str | None = Field(None, description="where batch jobs write their logs")
    resource_spec: str | None = Field(
        None, description="pbs: -l select=... line (computed); sge: -l line, e.g. h_vmem=4G"
    )
    parallel_environment: str | None = Field(
        None, description="sge: parallel environment of a job's MPI slots (default smp)"
    )
    name: str = Field("detol", description="kubernetes: DaskCluster name")
    image: str | None = Field(None, description="kubernetes/cloud: container image")
    namespace: str | None = Field(None, description="Kubernetes namespace of the worker pods")
    resources: dict[str, dict[str, str | int | float]] = Field(
        default_factory=dict, description="kubernetes: worker requests/limits"
    )
    env: dict[str, str] = Field(default_factory=dict, description="kubernetes/cloud: env vars")
    provider: str | None = Field(None, description="cloud: ec2 | gcp | azure")
    instance_type: str | None = Field(None, description="cloud VM type of each worker")
    region: str | None = Field(None, description="cloud region")
    provider_options: dict[str, Any] = Field(
        default_factory=dict, description="passed to the dask-cloudprovider cluster as is"
    )

    @model_validator(mode="before")
    @classmethod
    def _address_implies_backend(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("address") and "backend" not in data:
            return {**data, "backend": "address"}  # older study files: address alone
        return data

    @model_validator(mode="after")
    def _own_options(self) -> Cluster:
        check_backend_options(self)
        return self
