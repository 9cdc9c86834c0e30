"""The study file's ``[resize]`` table: a promoted trial trains wider (issue 31).

::

    [pruner]
    name = "asha"
    promote = true

    [resize]
    factor = 2       # each promotion runs the trial twice as wide ...
    max_ranks = 8    # ... up to 8 ranks
    idle = true      # and at the study's end, idle slots widen the running trials

The policy is search.driver._resize.WidenOnPromotion; the checkpoints that carry a trial to its
new width are training.state._reshard's. Checked against the rest of the study file by
:func:`resize_problems`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from search._errors import StudyError


class Resize(BaseModel):
    """Widen a trial each time it is promoted to the next rung (RASDA's rule); the global
    batch stays fixed and is split across the wider job."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    factor: int = Field(
        2, ge=2, description="a promoted trial runs this many times wider than the segment that "
        "paused (2: 1 -> 2 -> 4 -> 8 ranks over three promotions)",
    )
    max_ranks: int = Field(
        8, ge=1, description="the widest a segment runs; every worker must offer this many MPI "
        "slots (the cluster is sized for it)",
    )

    idle: bool = Field(
        True, description="at the study's end, when the budget of new configurations is spent "
        "and slots sit idle, the running trials take them, most promising first: each pauses "
        "after its next epoch and goes on wider from its checkpoint",
    )

    def to_json(self) -> dict[str, Any]:
        return {"factor": self.factor, "max_ranks": self.max_ranks, "idle": self.idle}


def resize_problems(sf: Any) -> list[StudyError]:
    """What makes ``[resize]`` impossible in study file ``sf`` (one line each)."""
    resize = sf.resize
    if resize is None:
        return []
    problems = []
    if sf.objective is not None and sf.own_loop is None:
        problems.append(StudyError(
            "resize", "needs MPI trials (the built-in trainer or an own loop, "
            "objective = \"mpi:package.module:function\"): a function objective has no ranks "
            "to widen"))
    if not sf.pruner.promote:
        problems.append(StudyError(
            "resize", "widens a trial when it is promoted: set [pruner] promote = true "
            '(name = "asha" or "hyperband")'))
    widest = max(sf.rank_choices) if sf.objective is None or sf.own_loop is not None else 1
    if resize.max_ranks < widest:
        problems.append(StudyError(
            "resize.max_ranks", f"is {resize.max_ranks}, narrower than trials start "
            f"({widest} ranks): expected >= {widest}"))
    return problems
