"""The study file's ``[space]`` table: its dimensions, their conditions (``when``), and the checks
that need the whole table and ``[training]``.

A dimension with ``when = { algorithm = "asgd" }`` is sampled only in trials whose ``algorithm``
is ``"asgd"``; other trials keep the ``[training]`` value. Reported up front, each with the fix:
a ``when`` that names no dimension, a value that dimension cannot take, a cycle; a parameter
sampled for an algorithm that ignores it (``send_every`` outside ASGD); an algorithm that needs
more ranks than a trial can have (ASGD, local SGD, SimuParallelSGD on one rank are plain SGD).

>>> dims = parse_dimensions({"algorithm": {"type": "categorical", "choices": ["sync", "asgd"]},
...                          "send_every": {"type": "int", "low": 1, "high": 8,
...                                         "when": {"algorithm": "asgd"}}})
>>> space = build_space(dims)
>>> space.condition("send_every")
{'algorithm': ('asgd',)}
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

import spaces
from search._errors import StudyError, pydantic_message, quoted, words
from training.contract import MIN_RANKS, SEARCHABLE, USED_BY, TrainConfig, prune_field

Value = bool | int | float | str


class _Dim(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    when: dict[str, Value | list[Value]] | None = Field(
        None, description="apply only when other dimensions have these values"
    )

    @model_validator(mode="after")
    def _valid(self) -> _Dim:
        to_dimension(self)  # type: ignore[arg-type]  # raises ValueError saying what is wrong
        return self


class _Float(_Dim):
    type: Literal["float"]
    low: float = Field(description="smallest value")
    high: float = Field(description="largest value")
    log: bool = Field(False, description="sample on a log scale")
    step: float | None = Field(None, description="grid step (left out: continuous)")


class _Int(_Dim):
    type: Literal["int"]
    low: int = Field(description="smallest value")
    high: int = Field(description="largest value")
    log: bool = Field(False, description="sample on a log scale")
    step: int = Field(1, description="grid step")


class _Categorical(_Dim):
    type: Literal["categorical"]
    choices: list[Value] = Field(min_length=1, description="the values to choose from")


RawDimension = _Float | _Int | _Categorical
Dimension = Annotated[RawDimension, Field(discriminator="type")]
TYPES = ("float", "int", "categorical")


def to_dimension(d: RawDimension) -> spaces.Dimension:
    if isinstance(d, _Float):
        return spaces.Float(low=d.low, high=d.high, log=d.log, step=d.step)
    if isinstance(d, _Int):
        return spaces.Int(low=d.low, high=d.high, log=d.log, step=d.step)
    return spaces.Categorical(tuple(d.choices))


def parse_dimensions(table: dict[str, Any]) -> dict[str, RawDimension]:
    """A ``[space]`` table (without its genome) as validated dimensions (for tests, doctests)."""
    return TypeAdapter(dict[str, Dimension]).validate_python(table)


def build_space(
    dims: dict[str, RawDimension], genome: spaces.GenomeFamily | None = None
) -> spaces.Space:
    """The search space: every dimension with its condition; a genome family is ``genome``."""
    out: dict[str, spaces.Dimension] = {n: to_dimension(d) for n, d in dims.items()}
    if genome is not None:
        out["genome"] = genome  # type: ignore[assignment]  # a family is a dimension too
    when = {n: d.when for n, d in dims.items() if d.when is not None}
    return spaces.Space(out, when=when)


def salvage(table: Any, exc: ValidationError) -> tuple[TrainConfig, frozenset[str]] | None:
    """A ``[training]`` table that failed, without its wrong keys (their defaults instead), and
    those keys: what the checks of ``[space]`` can still use. None if nothing can be saved."""
    errors = exc.errors()
    if not isinstance(table, dict) or any(not e["loc"] for e in errors):
        return None
    broken = frozenset(str(e["loc"][0]) for e in errors)
    try:
        return TrainConfig.model_validate(
            {k: v for k, v in table.items() if k not in broken}
        ), broken
    except ValidationError:
        return None


def check_space(
    dims: dict[str, RawDimension],
    *,
    trains: bool | None,
    training: TrainConfig | None,
    broken: frozenset[str] = frozenset(),
) -> list[StudyError]:
    """Every mistake in ``[space]`` (ranges are checked by the dimensions themselves).
    ``trains``: trials train ``[training]`` (True), call a function (False), unknown (None:
    the objective is itself wrong); ``training`` is None when ``[training]`` is wrong beyond
    :func:`salvage`; ``broken``: its keys that were wrong (checks that read them are skipped)."""
    problems: list[StudyError] = []
    if trains:
        for name, raw in dims.items():
            problems += _check_parameter(name, raw, training)
    when = {n: d.when for n, d in dims.items() if d.when is not None}
    scalars = {n: to_dimension(d) for n, d in dims.items()}
    problems += [
        StudyError(f"space.{name}.when", message)
        for name, message in spaces.condition_problems(scalars, when)
    ]
    if problems or not trains or training is None or broken & {"algorithm", "ranks"}:
        return problems
    space = build_space(dims)
    return _rank_problems(space, training) + _unused_problems(space, training)


def _check_parameter(
    name: str, raw: RawDimension, training: TrainConfig | None
) -> list[StudyError]:
    where = f"space.{name}"
    if name not in TrainConfig.model_fields and training is not None and training.takes_free_params:
        return []  # the user's own parameter: passed to their model and loss in params
    if name not in SEARCHABLE:
        return [
            StudyError(where, f"not a searchable training parameter (known: {words(SEARCHABLE)}; "
                       "with a [training] model or loss plug-in, any other name goes to its "
                       "params)")
        ]
    field = TrainConfig.model_fields.get(name) or prune_field(name)
    if field.annotation is int and isinstance(raw, _Float):
        return [StudyError(where, f'{name} is an integer parameter; use type = "int"')]
    if training is None:
        return []
    for value in to_dimension(raw).values_to_check():
        try:
            training.with_params({name: value})
        except ValidationError as exc:
            # Only this parameter's own errors: those of a combination are checked below.
            own = [e for e in exc.errors()
                   if tuple(e["loc"]) in ((name,), ("prune", name.removeprefix("prune_")))]
            if own:
                msg = pydantic_message(own[0])
                return [StudyError(where, f"value {value!r} is invalid for {name}: {msg}")]
    return []


def _toml(values: list[Any]) -> str:
    return json.dumps(values[0]) if len(values) == 1 else json.dumps(values)


def _rank_problems(space: spaces.Space, training: TrainConfig) -> list[StudyError]:
    """An algorithm that needs more ranks than a trial that samples it has."""
    searched = [n for n in ("algorithm", "ranks") if n in space]
    combos = space.reachable(searched) if searched else None
    if not combos:
        return []  # [training] alone is checked by TrainConfig itself
    pairs = [
        (c.get("algorithm", training.algorithm), c.get("ranks", training.ranks)) for c in combos
    ]
    bad = [(a, r) for a, r in pairs if r < MIN_RANKS.get(a, 1)]
    if not bad:
        return []
    algorithms = sorted({a for a, _ in bad})
    few = sorted({r for _, r in bad})
    least = max(MIN_RANKS[a] for a in algorithms)
    subject = (
        f"algorithm {quoted(algorithms)}"
        + ("" if "algorithm" in space else " (training.algorithm)")
        + f" with ranks = {' or '.join(map(str, few))}"
        + ("" if "ranks" in space else " (training.ranks)")
    )
    verb = "every trial would run" if len(bad) == len(pairs) else "trials can sample"
    need = "needs" if len(algorithms) == 1 else "need"
    rule = (
        f"{words(algorithms)} {need} ranks >= {least} "
        "(with one rank nothing is exchanged: it is plain SGD, the same as 'sync')"
    )
    if "algorithm" in space and "ranks" in space:
        enough = sorted({r for _, r in pairs if r >= least})
        where = "space.algorithm"
        fix = (
            f"make algorithm apply only with enough ranks: when = {{ ranks = {enough} }}"
            if enough
            else f"search ranks >= {least}"
        )
    elif "ranks" in space:
        where = "space.ranks"
        fix = f"start space.ranks at {least}, or search algorithm too, with a when on ranks"
    else:
        where = "space.algorithm"
        fix = f"set training.ranks to {least} or more, or drop {quoted(algorithms)} from choices"
    return [StudyError(where, f"{verb} {subject}, but {rule}; {fix}")]


def _unused_problems(space: spaces.Space, training: TrainConfig) -> list[StudyError]:
    """A parameter searched in trials whose algorithm ignores it."""
    problems: list[StudyError] = []
    for name, users in USED_BY.items():
        if name not in space:
            continue
        where, only = f"space.{name}", f"only {quoted(list(users))} uses {name}"
        if "algorithm" not in space:
            if training.algorithm not in users:
                problems.append(
                    StudyError(
                        where,
                        (
                            f"{only}, but every trial runs algorithm {training.algorithm!r} "
                            f"(training.algorithm); search algorithm, or drop {name} from [space]"
                        ),
                    )
                )
            continue
        combos = space.reachable(["algorithm", *space.condition(name)])
        if combos is None:
            continue
        ignored = sorted(
            {c.get("algorithm", training.algorithm) for c in combos if space.is_active(name, c)}
            - set(users)
        )
        if ignored:
            problems.append(
                StudyError(
                    where,
                    (
                        f"{only}, but it would be sampled for algorithm {quoted(ignored)} too; "
                        f"make it apply only then: when = {{ algorithm = {_toml(list(users))} }}"
                    ),
                )
            )
    return problems
