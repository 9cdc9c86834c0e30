"""The resource policy: how wide a trial's next segment runs (issue 31).

Policy apart from mechanism, as Dask keeps ``Adaptive`` apart from the cluster: this module only
*decides* a width; ``training.state._reshard`` restores a checkpoint of P ranks on the Q ranks
decided
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
ranks (training.state._reshard), so the learning rate the search chose stays valid, with no warm-up
and
no linear-scaling rule to tune (a rule that changes the optimisation a rung halfway through
would make a widened trial's curve incomparable with the narrow ones it is ranked against).

*Idle slots at the study's end* (``idle``, on by default): once the budget of new
configurations is spent and nothing is left to promote, slots sit idle while the last trials
train. The running trials then get them, most promising first (the furthest epoch, then the best
value there: under ASHA, the trials that climbed the most rungs): each is widened by powers of
``factor`` as far as the idle slots and ``max_ranks`` allow (:func:`idle_widths`). The driver
marks it (``detol:widen_to``, a system attribute: Optuna caches a running trial's user
attributes when it opens the trial, its system attributes are read from the storage each time
the pruner asks); its rank 0 reads the mark when it asks the pruner after its next
epoch, pauses there (a checkpoint), and the promotion path continues it that wide. A trial with
fewer than ``idle_min_epochs`` epochs left after its next is not widened (the new job's start
would cost more than it saves). No new work comes after the budget is spent, so nothing is
narrowed again.

Every segment is recorded: ``detol:ranks`` (its width) and ``detol:segments`` (the lineage's list
of ``{"trial", "ranks", "epochs", "rank_seconds"}``), so the budget, ``search best`` and the
report count rank-seconds at the width each segment really ran.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial

from search.pruners._promotion import (
    KEPT_ATTR,  # a width its checkpoint could not leave
    WIDEN_ATTR,  # set on a running trial: go on this wide
    WIDTH_ATTR,  # a segment's width (a queued one: planned)
)
from training.contract import CHECKPOINT_ATTR

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
    idle: bool = True  # give idle slots at the study's end to the running trials
    idle_min_epochs: int = 1  # epochs a trial must have left after its next to be widened

    def __post_init__(self) -> None:
        if isinstance(self.factor, bool) or not isinstance(self.factor, int) or self.factor < 1:
            raise ValueError(f"factor: expected an integer >= 1, got {self.factor!r}")
        if isinstance(self.max_ranks, bool) or not isinstance(self.max_ranks, int) \
                or self.max_ranks < 1:
            raise ValueError(f"max_ranks: expected an integer >= 1, got {self.max_ranks!r}")

    def widest_within(self, ranks: int, slots: int) -> int:
        """The widest ``ranks * factor**k`` that fits ``slots`` more ranks and ``max_ranks``
        (``ranks`` itself when none does).

        >>> WidenOnPromotion(factor=2, max_ranks=8).widest_within(1, 5)
        4
        """
        width = ranks
        while self.factor > 1 and width * self.factor <= min(self.max_ranks, ranks + slots):
            width *= self.factor
        return width

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
        width = policy.width(ran_on(parent))
        wanted = parent.system_attrs.get(WIDEN_ATTR)  # it paused to take idle slots
        if isinstance(wanted, int) and not isinstance(wanted, bool):
            width = max(width, min(wanted, policy.max_ranks))
        if not reshardable(parent) and width != ran_on(parent):
            width = ran_on(parent)
            out[KEPT_ATTR] = (f"trial {parent.number}'s checkpoint restores on {width} rank(s) "
                              "only: its loop saves without save_checkpoint(..., reshard=True)")
        elif KEPT_ATTR in parent.user_attrs:
            out[KEPT_ATTR] = parent.user_attrs[KEPT_ATTR]  # the lineage's loop is the same
        out[WIDTH_ATTR] = width
    return out


def reshardable(trial: FrozenTrial) -> bool:
    """Whether ``trial``'s checkpoint restores on another rank count: the built-in trainer's
    always do; an own loop's when it saved with ``reshard=True`` (recorded by training.jobs.worker
    beside the checkpoint's id; a checkpoint recorded without the flag predates it: built-in)."""
    checkpoint = trial.user_attrs.get(CHECKPOINT_ATTR)
    return not isinstance(checkpoint, dict) or bool(checkpoint.get("reshard", True))


def idle_widths(policy: WidenOnPromotion, running: Sequence[FrozenTrial], idle: int, *,
                epochs: int | None, maximize: bool) -> list[tuple[FrozenTrial, int]]:
    """The running trials to widen into ``idle`` free slots, each with its new width: most
    promising first (furthest epoch, then best value there), each as wide as
    :meth:`WidenOnPromotion.widest_within` allows in what the ones before left. Slots that
    earlier marks (``WIDEN_ATTR``) already promised are not free. ``epochs``: a trial's last
    epoch (None: unknown, every trial has epochs left).

    >>> import optuna
    >>> study = optuna.create_study(direction="maximize")
    >>> for value in (0.5, 0.9, 0.7):
    ...     t = study.ask(); t.report(value, 2); t.set_user_attr(WIDTH_ATTR, 1)
    >>> [(t.number, w) for t, w in idle_widths(WidenOnPromotion(), study.trials, 4,
    ...                                        epochs=9, maximize=True)]
    [(1, 4), (2, 2)]
    """
    free = idle - sum(max(0, int(t.system_attrs[WIDEN_ATTR]) - ran_on(t))
                      for t in running if WIDEN_ATTR in t.system_attrs)
    sign = -1.0 if maximize else 1.0

    def promise(t: FrozenTrial) -> tuple[float, float]:
        step = t.last_step if t.last_step is not None else 0
        value = t.intermediate_values.get(step, math.inf if maximize else -math.inf)
        return (-step, sign * value if math.isfinite(value) else math.inf)

    out: list[tuple[FrozenTrial, int]] = []
    for t in sorted((t for t in running if WIDEN_ATTR not in t.system_attrs), key=promise):
        step = t.last_step if t.last_step is not None else 0
        if free <= 0:
            break
        if epochs is not None and epochs - (step + 1) < policy.idle_min_epochs:
            continue
        if KEPT_ATTR in t.user_attrs or not reshardable(t):
            continue  # its checkpoints restore on its own width only: a pause would gain nothing
        ranks = ran_on(t)
        width = policy.widest_within(ranks, free)
        if width > ranks:
            out.append((t, width))
            free -= width - ranks
    return out


def segments_after(carried: Any, trial: int, ranks: int, epochs: int,
                   rank_seconds: float) -> list[dict[str, Any]]:
    """The lineage's segments with this trial's appended (what its continuation inherits)."""
    before = [dict(s) for s in carried] if isinstance(carried, list) else []
    return [*before, {"trial": trial, "ranks": int(ranks), "epochs": int(epochs),
                      "rank_seconds": float(rank_seconds)}]
