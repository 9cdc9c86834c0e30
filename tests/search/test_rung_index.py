"""The rung index (search.pruners._rung_index) against the plain scan it replaces: on
randomised studies, after every change, ``promotable`` and ``prune`` of an indexed pruner give
exactly what a pruner that reads every trial gives (same trials, same order)."""

from __future__ import annotations

import math
import random

import optuna
import pytest
from optuna.trial import TrialState

from search.pruners._promotion import (
    LINEAGE_ATTR,
    PAUSED_ATTR,
    RESUME_OF_ATTR,
    WIDEN_ATTR,
    PromotingHalving,
)

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

# Few distinct values, so that rungs hold ties; NaN and inf are never counted.
VALUES = (0.1, 0.2, 0.3, 0.5, 0.5, 0.7, 0.9, math.nan, math.inf)
EPOCHS = 9


def _pair(rng: random.Random) -> tuple[PromotingHalving, PromotingHalving]:
    kwargs = {"min_resource": rng.choice((1, 2)), "reduction_factor": rng.choice((2, 3)),
              "brackets": rng.choice((1, 1, 3)), "max_resource": EPOCHS,
              "widen_until": rng.choice((0, 4))}
    return PromotingHalving(**kwargs), PromotingHalving(**kwargs, index=False)


def _check(study: optuna.Study, indexed: PromotingHalving, plain: PromotingHalving,
           trial: optuna.Trial | None = None) -> int:
    """Both pruners' answers now; the number of promotable trials (finishing)."""
    for finishing in (False, True):
        want = [t.number for t in plain.promotable(study, finishing=finishing)]
        assert [t.number for t in indexed.promotable(study, finishing=finishing)] == want, \
            (finishing, want)
    if trial is not None:
        frozen = study._storage.get_trial(trial._trial_id)  # noqa: SLF001
        assert indexed.prune(study, frozen) == plain.prune(study, frozen), frozen.number
    return len(want)


def _play(study: optuna.Study, rng: random.Random, steps: int) -> dict[str, int]:
    """Random events on ``study``, both pruners asked after each; what happened, counted."""
    indexed, plain = _pair(rng)
    running: dict[int, tuple[optuna.Trial, int]] = {}  # number -> (trial, last epoch)
    seen = {"promotable": 0, "continued": 0, "failed": 0, "paused": 0, "nan": 0, "widen": 0}
    _check(study, indexed, plain)
    index = indexed._index  # the one index, kept up to date (never rebuilt here)
    for _ in range(steps):
        event = rng.random()
        if event < 0.2 or not running:  # a new configuration, or a waiting continuation
            trial = study.ask()
            start = 0
            parent = trial.user_attrs.get(RESUME_OF_ATTR)
            if parent is not None:  # a continuation: its parent's curve up to the pause
                writer = study._storage.get_trial_id_from_study_id_trial_number(  # noqa: SLF001
                    study._study_id, parent)  # noqa: SLF001
                frozen = study._storage.get_trial(writer)  # noqa: SLF001
                start = int(frozen.user_attrs[PAUSED_ATTR])
                for epoch, value in sorted(frozen.intermediate_values.items()):
                    trial.report(value, epoch)
            running[trial.number] = (trial, start)
            _check(study, indexed, plain)
            continue
        number = rng.choice(sorted(running))
        trial, epoch = running[number]
        if event < 0.75 and epoch < EPOCHS:  # an epoch's report
            value = rng.choice(VALUES)
            seen["nan"] += not math.isfinite(value)
            trial.report(value, epoch + 1)
            running[number] = (trial, epoch + 1)
            if rng.random() < 0.05:  # idle slots: go on wider
                study._storage.set_trial_system_attr(  # noqa: SLF001
                    trial._trial_id, WIDEN_ATTR, 8)  # noqa: SLF001
                seen["widen"] += 1
            _check(study, indexed, plain, trial)
            continue
        del running[number]
        end = rng.random()
        if end < 0.2 or epoch == 0:
            study.tell(trial, state=TrialState.FAIL)  # its values no longer count
            seen["failed"] += 1
        elif end < 0.3 or epoch == EPOCHS:
            study.tell(trial, rng.choice((0.5, 0.7)))
        elif end < 0.4:
            study.tell(trial, state=TrialState.PRUNED)  # stopped, not paused
        else:
            trial.set_user_attr(PAUSED_ATTR, epoch)
            study.tell(trial, state=TrialState.PRUNED)
            seen["paused"] += 1
        found = _check(study, indexed, plain)
        seen["promotable"] += found
        if rng.random() < 0.6:  # continue a promotable trial (or any paused one, or re-run)
            paused = [t for t in study.get_trials(deepcopy=False)
                      if PAUSED_ATTR in t.user_attrs and t.state == TrialState.PRUNED]
            promotable = indexed.promotable(study, finishing=rng.random() < 0.5)
            pick = promotable[0] if promotable and rng.random() < 0.8 else \
                rng.choice(paused) if paused else None
            if pick is not None:
                study.enqueue_trial(pick.params, user_attrs={
                    RESUME_OF_ATTR: pick.number,
                    LINEAGE_ATTR: int(pick.user_attrs.get(LINEAGE_ATTR, pick.number))})
                seen["continued"] += 1
        elif rng.random() < 0.2:  # a re-run of a lost trial: its lineage, from the start
            study.enqueue_trial({}, user_attrs={
                LINEAGE_ATTR: int(trial.user_attrs.get(LINEAGE_ATTR, trial.number))})
        _check(study, indexed, plain)
    # Taken in trial by trial, not built again: the first index kept up with every trial.
    assert index is not None and indexed._index is index and index.seen == len(study.trials)
    return seen


@pytest.mark.parametrize("seed", range(8))
def test_the_index_answers_as_the_scan_on_random_studies(seed: int) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    rng = random.Random(seed)
    study = optuna.create_study(direction=rng.choice(("maximize", "minimize")))
    seen = _play(study, rng, steps=400)
    # The studies hold what the index must get right, not only easy cases.
    assert all(seen.values()), seen


def test_the_index_answers_as_the_scan_on_a_database() -> None:
    """An RDB storage hands out a new record of every unfinished trial each time."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    rng = random.Random(99)
    study = optuna.create_study(storage="sqlite:///:memory:")  # no disk: the test stays fast
    seen = _play(study, rng, steps=40)
    assert seen["continued"] and seen["paused"], seen
