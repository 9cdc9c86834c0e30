"""The study file (TOML), validated with pydantic. Unknown keys are errors, never ignored.

>>> sf = parse_study({"name": "demo", "training": {"dataset": "digits", "epochs": 2}})
>>> sf.objectives, sf.directions
(['val_accuracy'], ['maximize'])
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

import spaces
from search._errors import StudyError, plain, pydantic_message, words
from search.backends._objectives import (
    benchmark_recorded_study,
    benchmark_space_check,
    check_objective,
    is_benchmark,
    own_loop,
)
from search.strategies._registry import (
    MULTI_OBJECTIVE_PRUNERS,
)
from search.studyfile._resize_table import Resize, resize_problems
from search.studyfile._sections import (
    _NAME,
    Budget,
    Checkpoints,
    Cluster,
    Launcher,
    Pruner,
    Strategy,
    _Strict,
)
from search.studyfile._space_table import (
    TYPES,
    Dimension,
    RawDimension,
    build_space,
    check_space,
    salvage,
    to_dimension,
)
from training.contract import METRICS, TrainConfig


class StudyFile(_Strict):
    name: str = Field(description="the study's name in the storage (letters, digits, - _ .)")
    # None: every trial trains [training] as an MPI job. "nb201:cifar10": a benchmark table
    # answers. "package.module:function": a Python function of the parameters, on a Dask worker.
    # "mpi:package.module:train": a training loop of the user's own, on [training] ranks.
    objective: str | None = Field(
        None,
        description="none: train [training] on MPI; nb201:TABLE; curves:PATH; module:function; "
        "mpi:module:train",
    )
    metric: str | list[str] = Field(
        "val_accuracy", description="what the study optimises; a list: a multi-objective study"
    )
    direction: str | list[str] | None = Field(
        None, description="maximize or minimize per metric (left out: inferred from the metric)"
    )
    storage: str | None = Field(
        None, description="Optuna storage URL or journal path (left out: detol.journal here)"
    )
    budget: Budget = Budget()
    strategy: Strategy = Strategy()
    pruner: Pruner = Pruner()
    checkpoints: Checkpoints = Checkpoints()
    training: TrainConfig = TrainConfig()
    launcher: Launcher = Launcher()
    cluster: Cluster = Cluster()
    resize: Resize | None = Field(
        None, description="promoted trials train wider: factor, max_ranks (see Elastic ranks)"
    )
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
    def _regression_metric(cls, data: Any) -> Any:
        # A regression has no accuracy: its default metric is the validation loss.
        training = data.get("training") if isinstance(data, dict) else None
        if (isinstance(training, dict) and training.get("task") == "regression"
                and "metric" not in data):
            return {**data, "metric": "val_loss"}
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
            elif ("objective" in info.data and info.data["objective"] is None
                  and m not in METRICS and not m.startswith("val_")):
                problems.append(StudyError("metric", f"unknown metric {m!r} (known: "
                                           f"{words(METRICS)}, or val_<name> of a metrics "
                                           "plug-in)"))
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
        if self.objective is None:
            problems += self._trained_metric_problems()
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
        if self.own_loop is not None:
            for key in ("every", "every_steps"):
                if getattr(self.checkpoints, key):
                    problems.append(StudyError(
                        f"checkpoints.{key}", "an own loop saves when train() calls "
                        f"session.save_checkpoint: remove checkpoints.{key}",
                    ))
        elif self.objective is not None:
            # A benchmark's simulated clock pauses and promotes (search.simulated._clock).
            if self.pruner.promote and not is_benchmark(self.objective):
                problems.append(StudyError(
                    "pruner.promote",
                    "needs trials that train ([training]): a function objective has no "
                    "checkpoint to resume from",
                ))
            if "checkpoints" in self.model_fields_set:
                problems.append(StudyError(
                    "checkpoints", "only trials that train ([training]) write checkpoints"
                ))
        if self.training.repeats > 1 and (self.checkpointing or self.resize is not None):
            why = ("an own loop" if self.own_loop is not None else "pruner.promote" if
                   self.pruner.promote else "[resize]" if self.resize is not None else
                   "checkpoints.every")
            problems.append(StudyError(
                "training.repeats", f"repeats = {self.training.repeats} trains several seeds in "
                f"one trial, which cannot pause or checkpoint yet ({why}): leave out one of them"))
        problems += self._warm_start_problems()
        problems += resize_problems(self)
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
            problems += self._recorded_space_problems()
        if problems:
            raise StudyError.many(problems)
        return self

    def _recorded_space_problems(self) -> list[StudyError]:
        """A table recorded from a study (``curves:PATH``) answers that study's space only:
        another ``[space]`` would be answered by the nearest configuration of another space."""
        try:
            recorded = benchmark_recorded_study(str(self.objective))
        except (OSError, ValueError):
            return []  # no such table: the objective's own check says so
        if recorded is None:
            return []
        try:
            theirs = parse_study(tomllib.loads(recorded))
        except (tomllib.TOMLDecodeError, StudyError):
            return [StudyError("objective", "the table's recording study file does not parse")]
        if (self.space, self.space_genome) == (theirs.space, theirs.space_genome):
            return []
        names = sorted(set(self.space) ^ set(theirs.space)) or sorted(
            n for n in self.space if self.space[n] != theirs.space.get(n)) or ["genome"]
        return [StudyError("space", f"must be the space the table was recorded with (see its "
                                    f"study file: the header's \"study\"); differs in "
                                    f"{', '.join(names)}")]

    def _trained_metric_problems(self) -> list[StudyError]:
        """Metrics a trained trial cannot report with this [training]: accuracy in a regression,
        a plug-in's ``val_<name>`` without a plug-in or without a direction."""
        problems = []
        task = self.training.task
        for m in self.objectives:
            if m == "val_accuracy" and task == "regression":
                problems.append(StudyError("metric", 'a regression (task = "regression") '
                                           "reports no val_accuracy: use val_loss or val_mae"))
            elif m == "val_mae" and task != "regression" and self.training.metrics is None:
                problems.append(StudyError("metric", 'val_mae is reported by task = '
                                           '"regression" (or a metrics plug-in)'))
            elif m not in METRICS and self.training.metrics is None:
                problems.append(StudyError("metric", f"unknown metric {m!r}: val_<name> needs "
                                           "a [training] metrics plug-in that returns <name>"))
            elif m not in METRICS and self.direction is None:
                problems.append(StudyError("direction", f"required for metric {m!r} of the "
                                           "metrics plug-in: 'maximize' or 'minimize'"))
        return problems

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
    def own_loop(self) -> str | None:
        """``package.module:train`` of ``objective = "mpi:package.module:train"``, else None."""
        return own_loop(self.objective)

    @property
    def trains_on_mpi(self) -> bool:
        """Whether trials are MPI jobs: the built-in trainer, or an own loop."""
        return self.objective is None or self.own_loop is not None

    @property
    def checkpointing(self) -> bool:
        """Whether trials write checkpoints: every N epochs, or to pause (promotion). An own
        loop always has a store: it saves when it calls session.save_checkpoint."""
        if self.own_loop is not None:
            return True
        return self.objective is None and (self.checkpoints.every > 0 or self.pruner.promote
                                           or self.checkpoints.every_steps > 0)

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
        if not self.trains_on_mpi:
            return 1
        widest = self.resize.max_ranks if self.resize is not None else 1
        return max([*self.rank_choices, self.training.ranks, widest])

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
