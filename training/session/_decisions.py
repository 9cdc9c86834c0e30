"""A pruner's decision as a value (house style): ``CONTINUE``, ``PAUSE`` (a promoting pruner
stops the trial at a rung; it may be resumed from its checkpoint when promoted) or ``STOP``
(pruned for good), and what gives one (a :class:`Reporter`). No Optuna here: rank 0's link to
the trial is :mod:`._reporting`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol

Decision = Literal["continue", "pause", "stop"]
CONTINUE: Decision = "continue"
PAUSE: Decision = "pause"
STOP: Decision = "stop"
# + the epoch: a multi-objective trial's metrics at that epoch, a list in objective order (a
# non-finite value as null), one attribute per epoch (search.pruners._dominated reads them).
VECTOR_ATTR = "detol:vector:"


class Reporter(Protocol):
    def decide(self, epoch: int, row: Mapping[str, float]) -> Decision:
        """Record ``row`` (the epoch's metrics) for ``epoch``; say whether to go on."""
        ...


class NullReporter:
    """Standalone training (no study): never prunes."""

    def decide(self, epoch: int, row: Mapping[str, float]) -> Decision:
        return CONTINUE
