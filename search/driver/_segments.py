"""A trial's segments: continuations that resume from a checkpoint (a promoted paused trial,
a re-run after a lost worker), as the driver queues and starts them."""

from __future__ import annotations

from typing import Any, Literal

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from search.driver._resize import WIDEN_ATTR, WidenOnPromotion, idle_widths, next_width
from search.driver._study import RESUME_FROM_ATTR
from search.pruners._promotion import LINEAGE_ATTR, LINEAGE_TOTALS, RESUME_OF_ATTR, lineage
from search.storage._checkpoint_store import artifact_directory, beside_storage
from training.contract import CHECKPOINT_ATTR, VECTOR_ATTR

__all__ = ["artifact_directory", "beside_storage", "continue_curve", "next_start",
           "queue_promotion", "widen_idle"]


def queue_promotion(
    study: optuna.Study, promoter: Any, *, finishing: bool = False,
    resize: WidenOnPromotion | None = None,
) -> Literal["queued", "waiting"] | None:
    """Enqueue the best promotable paused trial as a continuation ("queued"); "waiting" when
    a continuation is queued already (by a retry, or a driver that stopped); None when
    nothing can be promoted. ``finishing``: no new configuration will start. ``resize``: the
    width policy (search.driver._resize); the continuation is queued with its width."""
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    if any(RESUME_OF_ATTR in t.user_attrs for t in waiting):
        return "waiting"
    for parent in promoter.promotable(study, finishing=finishing):
        checkpoint = parent.user_attrs.get(CHECKPOINT_ATTR)
        if not isinstance(checkpoint, dict):
            continue  # paused without a checkpoint: nothing to resume from
        study.enqueue_trial(
            parent.params,
            user_attrs={
                RESUME_OF_ATTR: parent.number,
                LINEAGE_ATTR: lineage(parent),
                RESUME_FROM_ATTR: {"id": checkpoint["id"], "epoch": int(checkpoint["epoch"]),
                                   "trial": parent.number},
                **{k: parent.user_attrs[k] for k in LINEAGE_TOTALS if k in parent.user_attrs},
                **next_width(resize, parent),
            },
            skip_if_exists=False,
        )
        return "queued"
    return None


Start = Literal["continuation", "waiting", "configuration"]


def next_start(study: optuna.Study, promoter: Any, *, budget_spent: bool,
               resize: WidenOnPromotion | None = None) -> Start | None:
    """What a free worker starts next: the rule of pause-and-promote, shared by the driver
    (search.driver._driver) and the replay of recorded curves (search.pruners._replay).

    Promotions first (Li et al.): "continuation" when the best promotable paused trial was
    queued now, "waiting" when a continuation is queued already (the next ``ask`` takes either).
    Else "configuration" while the budget of new configurations is not spent. Once it is
    (``budget_spent``: every configuration started or told), no rung grows any more, so each
    rung's best is promoted (``finishing``) until none is left; then None: nothing to start.
    ``promoter`` None (a pruner that does not pause): configurations only. ``resize``: how
    wide a continuation runs (search.driver._resize), decided here for driver and replay."""
    if promoter is not None:
        queued = queue_promotion(study, promoter, resize=resize)
        if queued is not None:
            return "continuation" if queued == "queued" else "waiting"
    if not budget_spent:
        return "configuration"
    if promoter is not None:
        queued = queue_promotion(study, promoter, finishing=True, resize=resize)
        if queued is not None:
            return "continuation" if queued == "queued" else "waiting"
    return None


def widen_idle(study: optuna.Study, promoter: Any, *, budget_spent: bool,
               resize: WidenOnPromotion | None, idle: int) -> list[int]:
    """Give ``idle`` free slots to the running trials (search.driver._resize.idle_widths):
    called by the driver and the replay once :func:`next_start` has nothing more to start.
    Only at the study's end (``budget_spent``), with nothing queued (a waiting continuation
    takes the slots first), and with a policy whose ``idle`` is on. Marks each chosen running
    trial with ``WIDEN_ATTR``: its rank 0 pauses after its next epoch (the pruner reads the
    mark), and :func:`queue_promotion` continues it that wide. The numbers of the trials
    marked now."""
    if not (budget_spent and idle > 0 and promoter is not None and resize is not None
            and resize.idle):
        return []
    trials = study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))
    if any(t.state == TrialState.WAITING for t in trials):
        return []
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE \
        if len(study.directions) == 1 else True
    marks = idle_widths(resize, trials, idle, epochs=getattr(promoter, "max_resource", None),
                        maximize=maximize)
    storage = study._storage  # noqa: SLF001 - a running trial's attribute, by its id
    marked = []
    for trial, width in marks:
        try:
            storage.set_trial_system_attr(trial._trial_id, WIDEN_ATTR, width)  # noqa: SLF001
        except UpdateFinishedTrialError:
            continue  # it ended meanwhile (its job told it): nothing to widen
        marked.append(trial.number)
    return marked


def continue_curve(
    study: optuna.Study, trial: optuna.Trial, resume: dict[str, Any], multi_objective: bool
) -> None:
    """Give a trial that resumes from a checkpoint its writer's intermediate values (or epoch
    vectors) up to the checkpoint's epoch: its learning curve is whole, and rungs see it."""
    storage = study._storage  # noqa: SLF001 - one trial by number, not the whole study
    writer = storage.get_trial(
        storage.get_trial_id_from_study_id_trial_number(
            study._study_id, int(resume["trial"])  # noqa: SLF001
        )
    )
    last = int(resume["epoch"])
    if multi_objective:  # the epoch vectors (search.pruners._dominated)
        for key, value in writer.user_attrs.items():
            epoch = key.removeprefix(VECTOR_ATTR)
            if key.startswith(VECTOR_ATTR) and epoch.isdigit() and int(epoch) <= last:
                trial.set_user_attr(key, value)
        return
    for step, value in sorted(writer.intermediate_values.items()):
        if step <= last:
            trial.report(value, step)
