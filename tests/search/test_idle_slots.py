"""Idle slots at the study's end go to the running trials (issue 31): the shared rule
(search.driver._segments.widen_idle) marks the most promising, the pruner pauses a marked trial
between rungs, the promotion path continues it wider; on the replay the study's tail shrinks."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from search.driver._resize import WIDEN_ATTR, WIDTH_ATTR, WidenOnPromotion
from search.driver._segments import queue_promotion, widen_idle
from search.pruners._promotion import PAUSED_ATTR, RESUME_OF_ATTR, PromotingHalving
from search.pruners._replay import ReplayRun, replay
from training.contract import CHECKPOINT_ATTR

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

EPOCHS = 9


def _running(study: optuna.Study, value: float, step: int, width: int = 1) -> optuna.Trial:
    trial = study.ask()
    trial.set_user_attr(WIDTH_ATTR, width)
    for epoch in range(1, step + 1):
        trial.report(value * epoch / step, epoch)
    return trial


def _study() -> tuple[optuna.Study, PromotingHalving]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = PromotingHalving(1, 3, max_resource=EPOCHS, widen_until=4)  # rungs 1 and 3
    return optuna.create_study(direction="maximize", pruner=pruner), pruner


def test_idle_slots_go_to_the_most_promising_running_trials_only_at_the_end() -> None:
    study, pruner = _study()
    policy = WidenOnPromotion(factor=2, max_ranks=4)
    low, high, early = _running(study, 0.5, 5), _running(study, 0.8, 5), _running(study, 0.9, 2)
    last = _running(study, 0.99, EPOCHS - 1)  # its next epoch is its last: nothing to gain
    kw = {"resize": policy, "idle": 4}
    assert widen_idle(study, pruner, budget_spent=False, **kw) == []  # configurations to come
    assert widen_idle(study, pruner, budget_spent=True, resize=policy, idle=0) == []
    off = WidenOnPromotion(factor=2, max_ranks=4, idle=False)
    assert widen_idle(study, pruner, budget_spent=True, resize=off, idle=5) == []
    # Furthest epoch first, then best value: 4 slots are 1 -> 4 for `high`, 1 -> 2 for `low`.
    assert widen_idle(study, pruner, budget_spent=True, **kw) == [high.number, low.number]
    attrs = {t.number: t.system_attrs for t in study.get_trials(deepcopy=False)}
    assert attrs[high.number][WIDEN_ATTR] == 4 and attrs[low.number][WIDEN_ATTR] == 2
    assert WIDEN_ATTR not in attrs[early.number] and WIDEN_ATTR not in attrs[last.number]
    # The slots those marks promised are not idle twice.
    assert widen_idle(study, pruner, budget_spent=True, **kw) == []
    assert widen_idle(study, pruner, budget_spent=True, resize=policy, idle=6) == [early.number]


def test_a_marked_trial_pauses_between_rungs_and_is_continued_as_wide_as_marked() -> None:
    study, pruner = _study()
    policy = WidenOnPromotion(factor=2, max_ranks=4)
    trial = _running(study, 0.8, 5)  # epoch 5: no rung
    other = _running(study, 0.9, 5, width=4)  # as wide as the policy allows: never marked
    assert not trial.should_prune()
    widen_idle(study, pruner, budget_spent=True, resize=policy, idle=3)
    assert trial.should_prune()  # the mark is read from the storage, as rank 0 reads it
    trial.set_user_attr(PAUSED_ATTR, 5)
    trial.set_user_attr(CHECKPOINT_ATTR, {"id": "c", "epoch": 5})
    study.tell(trial, state=TrialState.PRUNED)
    assert pruner.promotable(study) == [study.trials[trial.number]]  # no rung judged it
    assert queue_promotion(study, pruner, resize=policy) == "queued"
    waiting = study.get_trials(states=(TrialState.WAITING,))[0]
    assert waiting.user_attrs[RESUME_OF_ATTR] == trial.number
    assert waiting.user_attrs[WIDTH_ATTR] == 4  # as marked, not the policy's 1 -> 2
    # A waiting continuation takes the idle slots first: nothing is marked meanwhile.
    other.set_user_attr(WIDTH_ATTR, 1)
    assert widen_idle(study, pruner, budget_spent=True, resize=policy, idle=3) == []


def test_a_marked_trial_that_loses_its_rung_is_not_promoted() -> None:
    study, pruner = _study()
    for value in (0.9, 0.8, 0.7):
        t = _running(study, value, 3)
        study.tell(t, value)  # three lineages at rung 3: the top third is the 0.9
    loser = _running(study, 0.5, 2)
    widen_idle(study, pruner, budget_spent=True, resize=WidenOnPromotion(max_ranks=4), idle=3)
    loser.report(0.5, 3)  # epoch 3 is a rung: it is judged there, mark or not
    assert loser.should_prune()
    loser.set_user_attr(PAUSED_ATTR, 3)
    loser.set_user_attr(CHECKPOINT_ATTR, {"id": "c", "epoch": 3})
    study.tell(loser, state=TrialState.PRUNED)
    assert pruner.promotable(study) == []


def _curves(n: int = 40) -> list[list[float]]:
    rng = np.random.default_rng(1)
    finals = rng.uniform(0.5, 0.95, n)
    return [[float(f * (1 - 0.5 ** (e + 1))) for e in range(EPOCHS)] for f in finals]


def _replay(idle: bool) -> ReplayRun:
    policy = WidenOnPromotion(factor=2, max_ranks=8, idle=idle)
    pruner = PromotingHalving(1, 3, max_resource=EPOCHS, widen_until=policy.max_ranks)
    return replay(_curves(), pruner, concurrency=16, order=range(40), epochs=EPOCHS,
                  resize=policy, epoch_time=lambda w: 1.0 / w, restart=0.1)


def test_on_the_replay_idle_slots_shorten_the_studys_tail() -> None:
    on, off = _replay(True), _replay(False)
    assert on.widened > 0 and off.widened == 0
    tail_on = on.time - on.last_configuration_start
    tail_off = off.time - off.last_configuration_start
    assert tail_on < 0.9 * tail_off, (tail_on, tail_off)
    assert on.last_configuration_start == pytest.approx(off.last_configuration_start)
    assert on.rank_time <= 16 * on.time + 1e-9  # slots never overcommitted
    assert on.study is not None
    trials = {t.number: t for t in on.study.get_trials(deepcopy=False)}
    widened = [t for t in trials.values() if RESUME_OF_ATTR in t.user_attrs
               and WIDEN_ATTR in trials[t.user_attrs[RESUME_OF_ATTR]].system_attrs]
    assert widened
    for t in widened:
        parent = trials[t.user_attrs[RESUME_OF_ATTR]]
        assert t.user_attrs[WIDTH_ATTR] == parent.system_attrs[WIDEN_ATTR]
