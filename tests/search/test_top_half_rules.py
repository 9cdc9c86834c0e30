"""The one-epoch rule's edges (issue 33): the median of every trial's epoch-1 value, the trial's
own included and counted once; a value at the median goes on; complete, pruned and running
trials count, failed and non-finite ones do not; a non-finite value stops at once; the start-up
count and its default; only epoch 1 is judged."""

from __future__ import annotations

import math

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from search.pruners._top_half import TopHalfPruner

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def _study(
    direction: str,
    startup: int | None,
    epoch1: list[float],
    state: TrialState = TrialState.COMPLETE,
) -> optuna.Study:
    pruner = TopHalfPruner() if startup is None else TopHalfPruner(startup_trials=startup)
    study = optuna.create_study(direction=direction, pruner=pruner)
    _add(study, epoch1, state)
    return study


def _add(study: optuna.Study, epoch1: list[float], state: TrialState) -> None:
    for v in epoch1:
        study.add_trial(
            create_trial(
                state=state,
                intermediate_values={1: v},
                value=v if state == TrialState.COMPLETE else None,
            )
        )


def _stopped(study: optuna.Study, value: float, step: int = 1) -> bool:
    trial = study.ask()
    for s in range(1, step + 1):
        trial.report(value, s)
    return trial.should_prune()


def test_a_negative_start_up_count_is_refused_and_the_default_waits_for_five_others() -> None:
    with pytest.raises(ValueError, match=r"^startup_trials: must be >= 0, got -1$"):
        TopHalfPruner(startup_trials=-1)
    assert _stopped(_study("maximize", 0, []), 0.1) is False  # alone: its own median
    assert _stopped(_study("maximize", 0, [0.5]), 0.1) is True  # 0 allowed: judged at once
    assert _stopped(_study("maximize", None, [0.5] * 4), 0.1) is False
    assert _stopped(_study("maximize", None, [0.5] * 5), 0.1) is True
    assert _stopped(_study("maximize", 3, [0.5] * 3), 0.1) is True  # exactly 3 others: judged


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_the_median_counts_the_trial_itself_once_and_a_value_at_it_goes_on(
    direction: str,
) -> None:
    sign = 1.0 if direction == "maximize" else -1.0
    others = [sign * v for v in (1.0, 2.0, 3.0, 4.0)]
    # median of 1, 2, 2.4, 3, 4 is 2.4 itself (without it, 2.5: it would stop)
    assert _stopped(_study(direction, 0, others), sign * 2.4) is False
    assert _stopped(_study(direction, 0, others), sign * 1.5) is True  # median 2
    assert _stopped(_study(direction, 0, others[:3]), sign * 2.0) is False  # at the median


def test_complete_pruned_and_running_trials_count_failed_and_non_finite_ones_do_not() -> None:
    study = _study("maximize", 3, [0.9])
    _add(study, [0.8], TrialState.PRUNED)
    _add(study, [0.7], TrialState.RUNNING)
    _add(study, [0.0, 0.0, 0.0], TrialState.FAIL)
    study.add_trial(create_trial(intermediate_values={1: math.inf, 2: 0.5}, value=0.5))
    # counted: 0.9, 0.8, 0.7 (three others: judged); median with 0.75 is 0.775
    assert _stopped(study, 0.75) is True
    assert _stopped(_study("maximize", 4, [0.9, 0.8, 0.7]), 0.1) is False  # 3 < 4 others


def test_a_non_finite_epoch_one_value_stops_at_once() -> None:
    for bad in (math.nan, math.inf, -math.inf):
        assert _stopped(_study("maximize", 5, []), bad) is True


def test_only_epoch_one_is_judged() -> None:
    study = _study("maximize", 0, [0.9, 0.8, 0.7])
    assert _stopped(study, 0.1, step=2) is False  # reported 1 and 2: looked at after 1 only
    trial = study.ask()
    trial.report(0.1, 2)  # no epoch-1 value: never judged
    assert trial.should_prune() is False
