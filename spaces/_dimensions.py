"""Hyperparameter dimensions: validated at construction, sampled define-by-run through Optuna."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import optuna

Choice = None | bool | int | float | str


class Dimension(Protocol):
    """One searchable value. ``suggest`` asks the trial, so any Optuna sampler can search it."""

    def suggest(self, trial: optuna.Trial, name: str) -> Any: ...

    def values_to_check(self) -> list[Any]:
        """Values at the edges of the dimension, used to validate it against its consumer."""
        ...


def _check_range(low: float, high: float, log: bool, step: float | None) -> None:
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"low ({low}) and high ({high}) must be finite numbers")
    if low > high:
        raise ValueError(f"low ({low}) must be <= high ({high})")
    if log and low <= 0:
        raise ValueError(f"log scale needs low > 0, got low={low}")
    if log and step is not None:
        raise ValueError("step and log cannot be used together")
    if step is not None and step <= 0:
        raise ValueError(f"step must be > 0, got {step}")


@dataclass(frozen=True, kw_only=True)
class Float:
    """A real number in ``[low, high]``, optionally on a log scale or on a grid of ``step``."""

    low: float
    high: float
    log: bool = False
    step: float | None = None

    def __post_init__(self) -> None:
        _check_range(self.low, self.high, self.log, self.step)

    def suggest(self, trial: optuna.Trial, name: str) -> float:
        return trial.suggest_float(name, self.low, self.high, log=self.log, step=self.step)

    def values_to_check(self) -> list[Any]:
        return [self.low, self.high]


@dataclass(frozen=True, kw_only=True)
class Int:
    """An integer in ``[low, high]``, optionally on a log scale or every ``step``."""

    low: int
    high: int
    log: bool = False
    step: int = 1

    def __post_init__(self) -> None:
        _check_range(self.low, self.high, self.log, None if self.step == 1 else self.step)

    def suggest(self, trial: optuna.Trial, name: str) -> int:
        return trial.suggest_int(name, self.low, self.high, log=self.log, step=self.step)

    def values_to_check(self) -> list[Any]:
        return [self.low, self.high]


@dataclass(frozen=True)
class Categorical:
    """One of a fixed, non-empty tuple of distinct choices."""

    choices: tuple[Choice, ...]

    def __post_init__(self) -> None:
        if not self.choices:
            raise ValueError("choices must not be empty")
        if len(set(map(repr, self.choices))) != len(self.choices):
            raise ValueError(f"choices must be distinct, got {list(self.choices)}")

    def suggest(self, trial: optuna.Trial, name: str) -> Choice:
        return trial.suggest_categorical(name, self.choices)

    def values_to_check(self) -> list[Any]:
        return list(self.choices)
