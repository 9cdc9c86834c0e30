"""A named set of dimensions, some of which apply only when others have certain values.

``when`` maps a dimension to its condition: other dimensions' names, each with the values that
switch it on (all must hold). :meth:`Space.suggest` asks define-by-run, conditions first, so a
dimension whose condition fails is never asked for: any Optuna sampler (TPE, GP, NSGA-II,
random) sees a conditional parameter, and a trial's ``params`` hold only the dimensions that
applied to it.

>>> import optuna
>>> space = Space(
...     {"send_every": Int(low=1, high=8), "algorithm": Categorical(("sync", "asgd"))},
...     when={"send_every": {"algorithm": "asgd"}},
... )
>>> list(space)  # conditions come first
['algorithm', 'send_every']
>>> space.is_active("send_every", {"algorithm": "sync"})
False
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import optuna

from spaces._dimensions import Categorical, Choice, Dimension, Float, Int

Condition = dict[str, tuple[Choice, ...]]  # dimension name -> the values that switch it on
WhenTable = Mapping[str, Mapping[str, Choice | Sequence[Choice]]]


def same_value(a: Any, b: Any) -> bool:
    """Equal as a parameter value: ``True`` is not ``1``, ``2`` is ``2.0``."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def _words(values: Iterable[Any]) -> str:
    return ", ".join(str(v) for v in values)


def _values(raw: Choice | Sequence[Choice]) -> tuple[Choice, ...]:
    if isinstance(raw, Sequence) and not isinstance(raw, str):
        return tuple(raw)
    return (raw,)


def finite_values(dim: Dimension) -> list[Any] | None:
    """Every value ``dim`` can take, or None when there are too many to list (a float)."""
    if isinstance(dim, Categorical):
        return list(dim.choices)
    if isinstance(dim, Int):
        return list(range(dim.low, dim.high + 1, dim.step))
    return None


def _value_problem(parent: str, dim: Dimension, value: Any) -> str | None:
    if isinstance(dim, Categorical):
        if not any(same_value(value, c) for c in dim.choices):
            return f"{value!r} is not a choice of {parent} (one of: {_words(dim.choices)})"
    elif isinstance(dim, Int):
        ok = isinstance(value, int) and not isinstance(value, bool)
        if not ok or not dim.low <= value <= dim.high or (value - dim.low) % dim.step:
            grid = "" if dim.step == 1 else f" in steps of {dim.step}"
            return (
                f"{value!r} is not a value of {parent} (an int from {dim.low} to {dim.high}{grid})"
            )
    return None


def _cycle(start: str, when: Mapping[str, Condition]) -> list[str] | None:
    """A cycle of conditions through ``start``, as the names along it, or None."""
    path = [start]

    def walk(name: str) -> bool:
        for parent in when.get(name, {}):
            if parent == start:
                return True
            if parent in path or parent not in when:
                continue
            path.append(parent)
            if walk(parent):
                return True
            path.pop()
        return False

    return [*path, start] if walk(start) else None


def condition_problems(
    dimensions: Mapping[str, Dimension], when: WhenTable
) -> list[tuple[str, str]]:
    """Every mistake in ``when``, as ``(dimension, message)`` pairs: an unknown dimension, a
    condition on a float or a genome, a value the named dimension cannot take, a cycle."""
    problems: list[tuple[str, str]] = []
    known = _words(dimensions)
    for name, condition in when.items():
        if name not in dimensions:
            problems.append((name, f"not a dimension of the space (dimensions: {known})"))
            continue
        if not isinstance(dimensions[name], Float | Int | Categorical):
            problems.append(
                (name, "only a float, int or categorical dimension can have a condition")
            )
            continue
        if not condition:
            problems.append((name, 'must name at least one dimension, e.g. { algorithm = "asgd" }'))
        for parent, raw in condition.items():
            values = _values(raw)
            if parent not in dimensions:
                problems.append(
                    (name, f"{parent!r} is not a dimension of the space (dimensions: {known})")
                )
            elif parent == name:
                problems.append((name, f"{name} cannot depend on itself"))
            elif not isinstance(dimensions[parent], Int | Categorical):
                problems.append(
                    (
                        name,
                        f"{parent} cannot be a condition: only a categorical or int dimension can",
                    )
                )
            elif not values:
                problems.append((name, f"{parent}: needs at least one value"))
            else:
                problems += [
                    (name, msg)
                    for v in values
                    if (msg := _value_problem(parent, dimensions[parent], v)) is not None
                ]
    if problems:
        return problems
    conditions = {n: {p: _values(r) for p, r in c.items()} for n, c in when.items()}
    reported: set[str] = set()
    for name in dimensions:
        cycle = _cycle(name, conditions) if name in conditions else None
        if cycle is not None and not reported & set(cycle):
            reported |= set(cycle)
            problems.append((name, f"conditions form a cycle: {' -> '.join(cycle)}"))
    return problems


class Space(Mapping[str, Dimension]):
    """Named dimensions; ``suggest`` returns one value per dimension that applies, in a stable
    order: every dimension after the dimensions its condition names, else as given."""

    def __init__(
        self, dimensions: Mapping[str, Dimension], *, when: WhenTable | None = None
    ) -> None:
        problems = condition_problems(dimensions, when or {})
        if problems:
            name, message = problems[0]
            raise ValueError(f"{name}.when: {message}")
        self._when: dict[str, Condition] = {
            n: {p: _values(r) for p, r in c.items()} for n, c in (when or {}).items()
        }
        order: list[str] = []
        while len(order) < len(dimensions):  # acyclic: each pass places at least one name
            order += [
                n
                for n in dimensions
                if n not in order and all(p in order for p in self._when.get(n, {}))
            ][:1]
        self._dimensions = {n: dimensions[n] for n in order}

    def __getitem__(self, name: str) -> Dimension:
        return self._dimensions[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dimensions)

    def __len__(self) -> int:
        return len(self._dimensions)

    @property
    def names(self) -> Sequence[str]:
        return list(self._dimensions)

    def condition(self, name: str) -> Condition:
        """The condition of ``name`` (dimension -> values that switch it on); empty: always."""
        return dict(self._when.get(name, {}))

    def is_active(self, name: str, params: Mapping[str, Any]) -> bool:
        """Whether ``name`` applies to a trial with ``params`` (its conditions hold, and theirs)."""
        return all(
            parent in params
            and self.is_active(parent, params)
            and any(same_value(params[parent], v) for v in values)
            for parent, values in self._when.get(name, {}).items()
        )

    def active(self, params: Mapping[str, Any]) -> list[str]:
        """The dimensions that apply to a trial with ``params``, in order."""
        return [n for n in self._dimensions if self.is_active(n, params)]

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for name, dim in self._dimensions.items():
            if self.is_active(name, params):
                params[name] = dim.suggest(trial, name)
        return params

    def reachable(self, names: Sequence[str], limit: int = 100_000) -> list[dict[str, Any]] | None:
        """Every combination of values of ``names`` (and of the dimensions their conditions
        name) that a trial can have; a dimension that does not apply is left out. None when a
        dimension has no finite list of values, or there are more than ``limit`` combinations."""
        needed: set[str] = set()
        todo = [n for n in names if n in self._dimensions]
        while todo:
            name = todo.pop()
            if name not in needed:
                needed.add(name)
                todo += list(self._when.get(name, {}))
        combos: list[dict[str, Any]] = [{}]
        for name in (n for n in self._dimensions if n in needed):
            values = finite_values(self._dimensions[name])
            if values is None:
                return None
            grown: list[dict[str, Any]] = []
            for combo in combos:
                if self.is_active(name, combo):
                    grown += [{**combo, name: v} for v in values]
                else:
                    grown.append(combo)
                if len(grown) > limit:
                    return None
            combos = grown
        return combos
