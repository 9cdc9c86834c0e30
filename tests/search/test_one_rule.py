"""One rule of pause-and-promote for the driver and the replay (issue 28, item 7): the replay
runs the driver's own functions; a pause whose answer is lost is asked again, never re-run past
its rung; an untold continuation is no configuration of the budget."""

from __future__ import annotations

import socket
import subprocess

import optuna
import pytest
from optuna.trial import TrialState

from search.driver import _segments
from search.driver._driver import untold_configurations
from search.driver._outcomes import Running
from search.driver._study import DRIVER_ATTR, RESUME_FROM_ATTR, recover_orphans
from search.pruners import _replay
from search.pruners._promotion import PAUSED_ATTR, PromotingHalving
from training.contract import CHECKPOINT_ATTR


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.unit
def test_the_replay_decides_with_the_drivers_function(monkeypatch) -> None:  # noqa: ANN001
    calls: list[bool] = []
    real = _segments.next_start

    def spy(study, promoter, *, budget_spent, resize=None):  # noqa: ANN001, ANN202
        calls.append(budget_spent)
        return real(study, promoter, budget_spent=budget_spent, resize=resize)

    monkeypatch.setattr(_replay, "next_start", spy)
    curves = [[0.1 * i, 0.1 * i + 0.01, 0.1 * i + 0.02, 0.1 * i + 0.03] for i in range(8)]
    run = _replay.replay(curves, PromotingHalving(1, 2, max_resource=4), concurrency=2,
                         order=range(7, -1, -1))  # the best first: the later ones pause
    assert calls and any(calls) and not all(calls)  # asked before and after the budget ran out
    assert run.promotions > 0 and run.complete >= 1


def _paused_at_rung(study: optuna.Study, value: float) -> None:
    trial = study.ask()
    trial.report(value, 1)
    trial.set_user_attr(PAUSED_ATTR, 1)
    trial.set_user_attr(CHECKPOINT_ATTR, {"id": f"c{trial.number}", "epoch": 1, "store": "x"})
    study.tell(trial, state=TrialState.PRUNED)


def test_a_pause_whose_answer_was_lost_is_asked_again_not_run_past_its_rung() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize",
                                pruner=PromotingHalving(1, 2, max_resource=4))
    _paused_at_rung(study, 0.9)
    _paused_at_rung(study, 0.8)
    # A trial that reported epoch 1 (a rung), wrote its pause checkpoint, and whose driver
    # died before it was told.
    lost = study.ask()
    lost.report(0.1, 1)
    lost.set_user_attr(CHECKPOINT_ATTR, {"id": "c-lost", "epoch": 1, "store": "x"})
    lost.set_user_attr(DRIVER_ATTR, f"{socket.gethostname()}:{_dead_pid()}")
    assert recover_orphans(study, max_retries=1, claim_wait_s=0.0) == [lost.number]
    t = study.trials[lost.number]
    assert t.state is TrialState.PRUNED and t.user_attrs[PAUSED_ATTR] == 1
    # Nothing re-queued to train on from epoch 2 without a decision at its rung.
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert not [w for w in waiting if w.user_attrs.get(RESUME_FROM_ATTR, {}).get("epoch") == 1]
    # The pruner's answer was "pause" (0.1 is not in the top half of 0.9, 0.8, 0.1); a trial
    # that was in the top half would have been re-run from its checkpoint instead.
    best = study.ask()
    best.suggest_float("x", 0, 1)  # a trial with parameters is re-queued
    best.report(0.95, 1)
    best.set_user_attr(CHECKPOINT_ATTR, {"id": "c-best", "epoch": 1, "store": "x"})
    best.set_user_attr(DRIVER_ATTR, f"{socket.gethostname()}:{_dead_pid()}")
    recover_orphans(study, max_retries=1, claim_wait_s=0.0)
    assert study.trials[best.number].state is TrialState.FAIL
    retry = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))[-1]
    assert retry.user_attrs[RESUME_FROM_ATTR]["epoch"] == 1


@pytest.mark.unit
def test_an_untold_continuation_is_no_configuration_of_the_budget() -> None:
    study = optuna.create_study()
    config, cont, other = study.ask(), study.ask(), study.ask()
    done = [(None, Running(config, 1), None), (None, Running(cont, 1, continuation=True), None),
            (None, Running(other, 1), None)]  # 2 and 1: neither count passes for the other
    assert untold_configurations(done) == 2  # type: ignore[arg-type]
