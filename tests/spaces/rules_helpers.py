"""Helpers the spaces rules files share: a decision source that records its questions, and the
exact one-line refusal a test expects."""

from __future__ import annotations

import re
from typing import Any

import pytest


class Recorder:
    """Decisions that answer from a table and record each question in order."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, Any]] = []

    def categorical(self, name: str, choices: Any) -> Any:
        self.asked.append((name, tuple(choices)))
        return self.answers.get(name, choices[-1])

    def integer(self, name: str, low: int, high: int) -> int:
        self.asked.append((name, (low, high)))
        return self.answers.get(name, high)


def refused(message: str) -> Any:
    """``pytest.raises(ValueError)`` whose message is exactly ``message``."""
    return pytest.raises(ValueError, match="^" + re.escape(message) + "$")
