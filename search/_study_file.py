"""The study file (TOML), validated with pydantic. Unknown keys are errors, never ignored.

>>> sf = parse_study({"name": "demo", "training": {"dataset": "digits", "epochs": 2}})
>>> sf.objectives, sf.directions
(['val_accuracy'], ['maximize'])
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

import spaces
from search._cluster_plans import (
    BACKENDS,
    DEFAULT_WORKER_TIMEOUT,
    Adapt,
    check_backend_options,
)
from search._errors import StudyError, plain, pydantic_message, words
from search._objectives import benchmark_space_check, check_objective, is_benchmark
from search._registry import (
    MULTI_OBJECTIVE_PRUNERS,
    PRUNER_OPTIONS,
    PRUNERS,
    STRATEGIES,
    STRATEGY_OPTIONS,
)
from search._space_table import (
    TYPES,
    Dimension,
    RawDimension,
    build_space,
    check_space,
    salvage,
    to_dimension,
)
from training.contract import DEFAULT_LAUNCHER, METRICS, TrainConfig, redact

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Budget(_Strict):
    trials: int = Field(
        20, ge=1, description="finished (complete + pruned) trials the study should hold"
    )
    concurrency: int = Field(1, ge=1, description="trials running at once")
    timeout: float | None = Field(None, gt=0, description="seconds before no new trial starts")
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

    study: str
    storage: str | None = None

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


class Strategy(_Strict):
    """The sampler. Each strategy reads only its own options (left out: its tuned default, see
    ``STRATEGY_OPTIONS``); any other key is an error."""

    name: Annotated[str, _one_of(STRATEGIES, "strategy")] = "tpe"
    seed: int | None = None
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
    warm_start: Annotated[list[WarmSource] | None, BeforeValidator(_warm_sources)] = Field(
        None, description="earlier studies whose best candidates run first (search/_warm_start.py)"
    )
    warm_start_top: int | None = Field(
        None, ge=0, description=f"warm start: best transferred candidates enqueued first "
        f"({DEFAULT_WARM_START_TOP}; 0: none, the predictor still learns from the sources)"
    )

    @model_validator(mode="after")
    def _own_options(self) -> Strategy:
        allowed = set(STRATEGY_OPTIONS[self.name])
        problems = [
            StudyError(
                f"strategy.{key}",
                f"not an option of the {self.name!r} strategy "
                f"(its options: {words(sorted(allowed)) or 'none'})",
            )
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

    name: Annotated[str, _one_of(PRUNERS, "pruner")] = "median"
    startup_trials: int = Field(5, ge=0, description="trials that finish before any is pruned")
    warmup_epochs: int = Field(1, ge=0, description="epochs of each trial before it can be pruned")
    percentile: float = Field(
        25.0, gt=0, lt=100, description="percentile: keep the top percentile % (25: a quarter)"
    )
    fraction: float = Field(
        0.5, gt=0, le=1, description="dominated: stop when this fraction of the others dominate"
    )
    min_epochs: int = Field(1, ge=1, description="asha/hyperband: epochs before the first rung")
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
        return {**self.model_dump(), "max_epochs": self.max_epochs or epochs}


class Checkpoints(_Strict):
    """Trial checkpoints in an Optuna artifact store (training/_checkpoint.py)."""

    every: int = Field(
        0, ge=0, description="epochs between two checkpoints; 0: only when a trial pauses"
    )
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
    env: dict[str, str] = Field(default_factory=dict)
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
    """Where trials run. Each backend reads only its own options (``_cluster_plans.BACKENDS``)."""

    backend: Annotated[str, _one_of(BACKENDS, "cluster backend")] = Field(
        "local", description="local | address | slurm | pbs | kubernetes | cloud"
    )
    address: str | None = Field(None, description="existing Dask scheduler, e.g. tcp://host:8786")
    workers: int | None = Field(None, ge=0, description="workers (jobs, pods, VMs) at start")
    slots_per_worker: int | None = Field(None, ge=1, description="MPI slots (ranks) per worker")
    connect_timeout: float = Field(10.0, gt=0)
    worker_timeout: float = Field(
        DEFAULT_WORKER_TIMEOUT, gt=0, description="seconds trials may wait with no worker at all"
    )
    adapt: Adapt | None = Field(None, description="adaptive scaling between minimum and maximum")
    dashboard: bool | str = Field(False, description="true (127.0.0.1:8787) or an address")
    scheduler_host: str | None = Field(None, description="scheduler listens here (127.0.0.1)")
    interface: str | None = Field(None, description="slurm/pbs: network interface, e.g. ib0")
    queue: str | None = Field(None, description="slurm partition / pbs queue")
    account: str | None = None
    walltime: str | None = Field(None, description="per job, e.g. 04:00:00")
    memory: str | None = Field(None, description="per job (per node), e.g. 16GB")
    cpus_per_slot: int = Field(1, ge=1, description="cores per MPI rank")
    nodes: int | None = Field(None, ge=1, description="nodes per job (multi-node MPI)")
    job_extra_directives: list[str] = Field(default_factory=list)
    job_script_prologue: list[str] = Field(default_factory=list)
    python: str | None = Field(None, description="python on the compute nodes")
    log_directory: str | None = None
    resource_spec: str | None = Field(None, description="pbs: -l select=... line (computed)")
    name: str = Field("detol", description="kubernetes: DaskCluster name")
    image: str | None = Field(None, description="kubernetes/cloud: container image")
    namespace: str | None = None
    resources: dict[str, dict[str, str | int | float]] = Field(
        default_factory=dict, description="kubernetes: worker requests/limits"
    )
    env: dict[str, str] = Field(default_factory=dict, description="kubernetes/cloud: env vars")
    provider: str | None = Field(None, description="cloud: ec2 | gcp | azure")
    instance_type: str | None = None
    region: str | None = None
    provider_options: dict[str, Any] = Field(default_factory=dict)

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


class StudyFile(_Strict):
    name: str
    # None: every trial trains [training] as an MPI job. "nb201:cifar10": a benchmark table
    # answers. "package.module:function": a Python function of the parameters, on a Dask worker.
    objective: str | None = None
    metric: str | list[str] = "val_accuracy"
    direction: str | list[str] | None = None
    storage: str | None = None
    budget: Budget = Budget()
    strategy: Strategy = Strategy()
    pruner: Pruner = Pruner()
    checkpoints: Checkpoints = Checkpoints()
    training: TrainConfig = TrainConfig()
    launcher: Launcher = Launcher()
    cluster: Cluster = Cluster()
    space: dict[str, Dimension] = Field(default_factory=dict)
    # [space.genome]: a topology family (family = "cell" | "macro" | "stack" and its options).
    space_genome: dict[str, Any] | None = Field(None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _split_genome(cls, data: Any) -> Any:
        if isinstance(data, dict) and "space_genome" in data:
            raise StudyError("space_genome", "unknown key (write the table as [space.genome])")
        space = data.get("space") if isinstance(data, dict) else None
        if isinstance(space, dict) and "genome" in space:
            space = dict(space)
            genome = space.pop("genome")
            if not isinstance(genome, dict):
                raise StudyError(
                    "space.genome", "must be a table with family = 'cell', 'macro' or 'stack'"
                )
            data = {**data, "space": space, "space_genome": genome}
        return data

    @model_validator(mode="before")
    @classmethod
    def _multi_objective_pruner(cls, data: Any) -> Any:
        # Optuna's pruners judge one objective: several objectives default to "dominated".
        if (isinstance(data, dict) and "pruner" not in data
                and isinstance(data.get("metric"), list) and len(data["metric"]) > 1):
            return {**data, "pruner": "dominated"}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"{v!r} is not a study name (letters, digits, '_', '-', '.')")
        return v

    @field_validator("strategy", "pruner", mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return {"name": v} if isinstance(v, str) else v

    @field_validator("objective")
    @classmethod
    def _objective(cls, v: str | None) -> str | None:
        if v is not None:
            check_objective(v)
        return v

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str | list[str], info: ValidationInfo) -> str | list[str]:
        if isinstance(v, list) and not v:
            raise ValueError("needs at least one metric")
        problems = []
        for m in [v] if isinstance(v, str) else v:
            if not re.fullmatch(r"[A-Za-z_][\w.\-]*", m):
                problems.append(StudyError("metric", f"{m!r} is not a metric name"))
            elif "objective" in info.data and info.data["objective"] is None and m not in METRICS:
                problems.append(
                    StudyError("metric", f"unknown metric {m!r} (known: {words(METRICS)})")
                )
        if problems:
            raise StudyError.many(problems)
        return v

    @field_validator("direction")
    @classmethod
    def _direction(cls, v: str | list[str] | None) -> str | list[str] | None:
        for d in [] if v is None else [v] if isinstance(v, str) else v:
            if d not in ("minimize", "maximize"):
                raise ValueError(f"expected 'minimize' or 'maximize', got {d!r}")
        return v

    @field_validator("training", mode="wrap")
    @classmethod
    def _training(
        cls, v: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> TrainConfig:
        try:
            return handler(v)  # type: ignore[no-any-return]
        except ValidationError as exc:
            if isinstance(info.context, dict):  # what [space]'s checks can still use
                info.context["training"] = salvage(v, exc)
            raise

    @field_validator("space")
    @classmethod
    def _space(cls, v: dict[str, RawDimension], info: ValidationInfo) -> dict[str, RawDimension]:
        # Runs with whatever validated before it: a broken [training] or objective leaves out
        # only the checks that need the broken part, so every other mistake is still reported.
        trains = None if "objective" not in info.data else info.data["objective"] is None
        training, broken = info.data.get("training"), frozenset[str]()
        if training is None and isinstance(info.context, dict) and info.context.get("training"):
            training, broken = info.context["training"]
        problems = check_space(v, trains=trains, training=training, broken=broken)
        if problems:
            raise StudyError.many(problems)
        return v

    @model_validator(mode="after")
    def _consistent(self) -> StudyFile:
        problems: list[StudyError] = []
        if self.objective is not None and self.direction is None:
            problems += [
                StudyError(
                    "direction",
                    f"required for metric {m!r} of objective {self.objective!r}: "
                    "'maximize' or 'minimize'",
                )
                for m in self.objectives
                if m not in METRICS
            ]
        if self.direction is not None and len(self.directions) != len(self.objectives):
            problems.append(
                StudyError(
                    "direction",
                    f"{len(self.directions)} direction(s) for {len(self.objectives)} metric(s)",
                )
            )
        if len(self.objectives) > 1 and self.pruner.name not in MULTI_OBJECTIVE_PRUNERS:
            problems.append(
                StudyError(
                    "pruner",
                    f"the {self.pruner.name!r} pruner cannot prune multi-objective "
                    'studies; set pruner = "dominated" (stop a trial that a fraction of the '
                    'others dominate at the same epoch) or "none"',
                )
            )
        if self.objective is not None:
            if self.pruner.promote:
                problems.append(StudyError(
                    "pruner.promote",
                    "needs trials that train ([training]): a function objective has no "
                    "checkpoint to resume from",
                ))
            if "checkpoints" in self.model_fields_set:
                problems.append(StudyError(
                    "checkpoints", "only trials that train ([training]) write checkpoints"
                ))
        problems += self._warm_start_problems()
        genome_ok = True
        if self.space_genome is not None:
            try:
                self._genome_family()
            except StudyError as exc:
                problems.append(exc)
                genome_ok = False
        if is_benchmark(self.objective) and genome_ok:
            check_space = benchmark_space_check(str(self.objective))
            try:
                check_space(self.search_space.get("genome"))
            except ValueError as exc:
                where, _, message = str(exc).partition(": ")
                problems.append(StudyError(where, message))
        if problems:
            raise StudyError.many(problems)
        return self

    def _warm_start_problems(self) -> list[StudyError]:
        """What a warm start's sources can be told wrong without opening a storage."""
        problems = []
        for i, src in enumerate(self.strategy.warm_start or []):
            if src.study == self.name and src.storage in (None, self.storage):
                problems.append(StudyError(
                    f"strategy.warm_start[{i}]",
                    f"{src.study!r} is this study itself: name an earlier study",
                ))
        if self.strategy.warm_start and len(self.objectives) > 1:
            problems.append(StudyError(
                "strategy.warm_start", "needs a single-objective study (sources are ranked by "
                "their one metric)",
            ))
        return problems

    def _genome_family(self) -> spaces.GenomeFamily:
        table = dict(self.space_genome or {})
        family = table.pop("family", None)
        if family is None:
            raise StudyError(
                "space.genome.family", f"required: one of: {words(sorted(spaces.FAMILIES))}"
            )
        try:
            return spaces.make_family(family, **table)
        except (ValueError, TypeError) as exc:
            key, sep, rest = str(exc).partition(": ")  # errors start with the offending key
            if sep and re.fullmatch(r"[A-Za-z_][\w.\[\]]*", key):
                raise StudyError(f"space.genome.{key}", rest) from None
            raise StudyError("space.genome", str(exc)) from None

    @property
    def checkpointing(self) -> bool:
        """Whether trials write checkpoints: every N epochs, or to pause (promotion)."""
        return self.objective is None and (self.checkpoints.every > 0 or self.pruner.promote)

    @property
    def objectives(self) -> list[str]:
        return [self.metric] if isinstance(self.metric, str) else list(self.metric)

    @property
    def directions(self) -> list[str]:
        if self.direction is None:
            return [METRICS[m] for m in self.objectives]
        return [self.direction] if isinstance(self.direction, str) else list(self.direction)

    @property
    def search_space(self) -> spaces.Space:
        """Every dimension; a genome family, if any, is the dimension named ``genome``."""
        genome = self._genome_family() if self.space_genome is not None else None
        return build_space(self.space, genome)

    @property
    def max_ranks(self) -> int:
        if self.objective is not None:
            return 1
        return max([*self.rank_choices, self.training.ranks])

    @property
    def rank_choices(self) -> list[int]:
        """The rank counts a trial may have: the searched ones, else ``training.ranks`` (also
        when ``ranks`` applies only to some trials)."""
        if "ranks" not in self.space:
            return [self.training.ranks]
        found = {int(v) for v in to_dimension(self.space["ranks"]).values_to_check()}
        if self.space["ranks"].when is not None:
            found.add(self.training.ranks)
        return sorted(found)


def _format_one(err: ErrorDetails) -> StudyError:
    inner = err.get("ctx", {}).get("error")
    if isinstance(inner, StudyError):
        return StudyError.many([StudyError(e.where, plain(e.message)) for e in inner.errors])
    where = ".".join(str(p) for p in err["loc"] if not (isinstance(p, str) and p in TYPES))
    msg = pydantic_message(err)
    if err["type"] == "union_tag_invalid":
        tag = err.get("ctx", {}).get("tag")
        msg = f"unknown type {tag!r} (known: {words(sorted(TYPES))})"
    elif err["type"] == "union_tag_not_found":
        msg = "needs a type: 'float', 'int' or 'categorical'"
    return StudyError(where, msg)


def _format(exc: ValidationError) -> StudyError:
    """Every error pydantic found, one StudyError each, in the order of the file's fields."""
    return StudyError.many(_format_one(err) for err in exc.errors())


def parse_study(data: dict[str, Any]) -> StudyFile:
    """Validate a study given as a dict (the parsed TOML). Raises StudyError naming the field."""
    try:
        return StudyFile.model_validate(data, context={})
    except ValidationError as exc:
        raise _format(exc) from None
    except StudyError:
        raise


def load_study_file(path: str | Path) -> StudyFile:
    """Read and validate a study file. Raises StudyError whose text starts with the file name."""
    p = Path(path)
    if not p.is_file():
        raise StudyError(str(p), "study file not found")
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise StudyError(str(p), f"not valid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StudyError(str(p), f"cannot read: {exc}") from None
    try:
        return parse_study(data)
    except StudyError as exc:
        raise StudyError.many(
            StudyError(f"{p}: {e.where}" if e.where else str(p), e.message) for e in exc.errors
        ) from None
