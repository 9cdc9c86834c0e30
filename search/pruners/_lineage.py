"""A lineage: a configuration's chain of trials (its first trial, promoted continuations,
re-runs after a lost worker), and the trial attributes that record it. Shared by the promoting
pruner (:mod:`._promotion`) and its rung index (:mod:`._rung_index`), which import it, not each
other.
"""

from __future__ import annotations

from collections.abc import Sequence

from optuna.trial import FrozenTrial, TrialState

PAUSED_ATTR = "detol:paused_at"  # the epoch at which a (PRUNED) trial paused
RESUME_OF_ATTR = "detol:resume_of"  # the number of the paused trial this one continues
WIDTH_ATTR = "detol:ranks"  # the ranks a segment runs on (search.driver._resize)
# Set by the driver on a running trial when the study's end leaves slots idle
# (search.driver._segments.widen_idle): pause at the next epoch's end, go on this wide. A system
# attribute: a running trial's rank 0 reads those from the storage, its user attributes cached.
WIDEN_ATTR = "detol:widen_to"
# Set on a continuation that runs as wide as its parent because the parent's checkpoint restores
# on its own rank count only (an own loop's save_checkpoint without reshard=True): the reason.
# Its lineage pauses for no more widening and takes no idle slots (search.driver._resize).
KEPT_ATTR = "detol:width_kept"
LINEAGE_ATTR = "detol:lineage"  # the number of the lineage's first trial
# The work of a whole lineage up to and including a trial (earlier segments + its own): what
# `search best`, the report and the export show for a promoted trial, carried from a paused
# trial to its continuation and from a lost trial to its re-run.
LINEAGE_EPOCHS_ATTR = "detol:lineage_epochs"
LINEAGE_RANK_SECONDS_ATTR = "detol:lineage_rank_seconds"
LINEAGE_WALL_ATTR = "detol:lineage_wall_time_s"
LINEAGE_TOTALS = (LINEAGE_EPOCHS_ATTR, LINEAGE_RANK_SECONDS_ATTR, LINEAGE_WALL_ATTR)
# A paused trial whose continuations failed this many times (a continuation that could not
# restore, a job that crashed) is not promoted again: its checkpoint is taken to be unusable.
MAX_FAILED_CONTINUATIONS = 2
# A trial's value at a rung counts while the trial is in one of these states (a failed trial's
# values do not: its configuration did not finish the rung's work honestly).
COUNTED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)


def lineage(trial: FrozenTrial) -> int:
    return int(trial.user_attrs.get(LINEAGE_ATTR, trial.number))


def configuration_numbers(trials: Sequence[FrozenTrial]) -> dict[int, int]:
    """lineage -> its configuration number: 0 for the first configuration started, 1 for the
    next, ... (a trial starts a lineage unless it continues or re-runs one)."""
    starts = sorted(t.number for t in trials if lineage(t) == t.number)
    return {n: i for i, n in enumerate(starts)}


def is_segment(trial: FrozenTrial) -> bool:
    """A promoted continuation (not a configuration of its own for the budget)."""
    return RESUME_OF_ATTR in trial.user_attrs
