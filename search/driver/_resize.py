"""The resource policy: how wide a trial's next segment runs (issue 31).

Policy apart from mechanism, as Dask keeps ``Adaptive`` apart from the cluster: this module only
*decides* a width; ``training._reshard`` restores a checkpoint of P ranks on the Q ranks decided
here, the driver (search.driver._driver) submits the job with Q slots, and the replay of recorded
curves (search.pruners._replay) runs its simulated segments with the same decision, taken in the
same place (``search.driver._segments.queue_promotion``).

The rule is RASDA's (Aach et al. 2026): a trial promoted to the next rung runs ``factor`` times
wider than the segment that paused, up to ``max_ranks``. A trial that reaches a rung in its top
``1/eta`` (which plain ASHA lets train on in the same job) pauses too while it is narrower than
``max_ranks`` (the pruner's ``widen_until``), and is promoted at once onto its wider job: every
rung climbed is a width change, through the checkpoint. Early rungs test many configurations
narrowly; the few that survive train wide. The global batch stays what the study asked and is
split ``batch[q::Q]`` across the wider job: sync SGD on Q ranks then computes the very update of P
ranks (training._reshard), so the learning rate the search chose stays valid, with no warm-up and
no linear-scaling rule to tune (a rule that changes the optimisation a rung halfway through
would make a widened trial's curve incomparable with the narrow ones it is ranked against).

Every segment is recorded: ``detol:ranks`` (its width) and ``detol:segments`` (the lineage's list
of ``{"trial", "ranks", "epochs", "rank_seconds"}``), so the budget, ``search best`` and the
report count rank-seconds at the width each segment really ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial

from search.pruners._promotion import WIDTH_ATTR  # a segment's width (a queued one: planned)

SEGMENTS_ATTR = "detol:segments"  # the lineage's segments so far, oldest first


@dataclass(frozen=True)
class WidenOnPromotion:
    """Widen a promoted trial ``factor`` times per rung, never past ``max_ranks``.

    >>> policy = WidenOnPromotion(factor=2, max_ranks=8)
    >>> [policy.width(r) for r in (1, 2, 4, 8, 3, 5)]
    [2, 4, 8, 8, 6, 8]
    """

    factor: int = 2
    max_ranks: int = 8

    def __post_init__(self) -> None:
        if isinstance(self.factor, bool) or not isinstance(self.factor, int) or self.factor < 1:
            raise ValueError(f"factor: expected an integer >= 1, got {self.factor!r}")
        if isinstance(self.max_ranks, bool) or not isinstance(self.max_ranks, int) \
                or self.max_ranks < 1:
            raise ValueError(f"max_ranks: expected an integer >= 1, got {self.max_ranks!r}")

    def width(self, ranks: int) -> int:
        """The width of the segment after one that ran on ``ranks`` and was promoted (never
        narrower than it ran: a trial wider than ``max_ranks`` to begin with keeps its width)."""
        return max(ranks, min(self.max_ranks, ranks * self.factor))

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> WidenOnPromotion | None:
        return cls(**data) if data else None


def ran_on(trial: FrozenTrial, default: int = 1) -> int:
    """The width ``trial``'s segment ran on: recorded at its start, else the job's reported
    rank count (a trial of a detol before resizing), else its searched ``ranks``, else
    ``default``."""
    for value in (trial.user_attrs.get(WIDTH_ATTR), trial.user_attrs.get("ranks"),
                  trial.params.get("ranks")):
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 1:
            return int(value)
    return default


def next_width(policy: WidenOnPromotion | None, parent: FrozenTrial) -> dict[str, Any]:
    """The user attributes a continuation of ``parent`` is queued with: its planned width
    (nothing without a policy: it runs as its configuration says) and the lineage's segments."""
    out: dict[str, Any] = {}
    if SEGMENTS_ATTR in parent.user_attrs:
        out[SEGMENTS_ATTR] = parent.user_attrs[SEGMENTS_ATTR]
    if policy is not None:
        out[WIDTH_ATTR] = policy.width(ran_on(parent))
    return out


def segments_after(carried: Any, trial: int, ranks: int, epochs: int,
                   rank_seconds: float) -> list[dict[str, Any]]:
    """The lineage's segments with this trial's appended (what its continuation inherits)."""
    before = [dict(s) for s in carried] if isinstance(carried, list) else []
    return [*before, {"trial": trial, "ranks": int(ranks), "epochs": int(epochs),
                      "rank_seconds": float(rank_seconds)}]
