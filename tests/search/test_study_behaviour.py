"""search/driver/_study.py's rules that its full mutant set showed untested (issue 33): what a
resumed study refuses and says, word for word, how a seeded sampler goes on after a resume,
which running trials are orphans (this process, a pid that cannot be signalled, another host
with no heartbeat, a trial claimed while the recovery waits), what an orphan without parameters
leaves behind."""

from __future__ import annotations

import datetime
import os
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from search import StudyError, open_study, parse_study
from search.driver import _study
from search.driver._study import (
    CHANGES_ATTR,
    DRIVER_ATTR,
    HEARTBEAT_ATTR,
    STUDY_ATTR,
    check_same_study,
    recover_orphans,
)
from search.strategies._registry import build_sampler

HOST = socket.gethostname()
X = {"x": FloatDistribution(0.0, 1.0)}


def _form(**changes: Any) -> dict[str, Any]:
    form = {"name": "s", "objective": "math:fabs", "metric": "loss",
            "direction": "minimize", "pruner": "none",
            "strategy": {"name": "random", "seed": 7},
            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}}}
    return form | changes


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.unit
def test_a_resume_with_other_directions_or_metrics_is_refused_naming_the_field() -> None:
    storage = optuna.storages.InMemoryStorage()
    open_study(parse_study(_form()), storage)
    with pytest.raises(StudyError) as info:
        open_study(parse_study(_form(direction="maximize")), storage)
    assert (info.value.where, info.value.message) == (
        "direction", "study 's' already exists with directions ['minimize'], not ['maximize']; "
        "use another name")
    with pytest.raises(StudyError) as info:
        open_study(parse_study(_form(metric="error")), storage)
    assert (info.value.where, info.value.message) == (
        "metric", "study 's' already exists with metrics ['loss'], not ['error']; "
        "use another name")


@pytest.mark.unit
def test_a_seeded_resume_draws_on_as_a_sampler_seeded_past_its_trials() -> None:
    storage = optuna.storages.InMemoryStorage()
    sf = parse_study(_form())
    study = open_study(sf, storage)
    first = []
    for _ in range(3):
        trial = study.ask()
        first.append(trial.suggest_float("x", 0.0, 1.0))
        study.tell(trial, 1.0)
    resumed = open_study(sf, storage).ask().suggest_float("x", 0.0, 1.0)

    def draw(seed: int) -> float:
        sampler = build_sampler("random", sf.strategy.model_dump(), seed, sf.search_space,
                                sf.directions)
        return optuna.create_study(sampler=sampler).ask().suggest_float("x", 0.0, 1.0)

    assert draw(7) == first[0]  # the first run drew from seed 7 ...
    assert resumed == draw(7 + 3) and resumed not in first  # ... the resume from 7 + 3 trials


def _with_space(n: int, high: float) -> Any:
    return parse_study(_form(space={f"x{i}": {"type": "float", "low": 0.0, "high": high}
                                    for i in range(n)}))


@pytest.mark.unit
@pytest.mark.parametrize(("n", "more"), [(6, ""), (7, " (and 1 more)"), (9, " (and 3 more)")])
def test_a_refusal_lists_six_changes_and_counts_the_rest(n: int, more: str) -> None:
    storage = optuna.storages.InMemoryStorage()
    study = open_study(_with_space(n, 1.0), storage)
    study.add_trial(optuna.trial.create_trial(value=1.0, params={}, distributions={}))
    shown = "; ".join(f"space.x{i}.high: 1.0 -> 2.0" for i in range(min(n, 6)))
    with pytest.raises(StudyError) as info:
        check_same_study(study, _with_space(n, 2.0), "here")
    assert info.value.where == "name" and info.value.message == (
        f"study 's' in here holds 1 trials made with another study file ({shown}{more}): new "
        "trials would not be comparable with them. Give the study a new name, or delete the old "
        "one first (search delete s)")


@pytest.mark.unit
def test_a_new_dimension_shows_none_before_and_the_budget_changes_freely() -> None:
    storage = optuna.storages.InMemoryStorage()
    study = open_study(parse_study(_form()), storage)
    grown = _form(space={"x": {"type": "float", "low": 0.0, "high": 1.0},
                         "y": {"type": "int", "low": 1, "high": 4}})
    with pytest.raises(StudyError, match=r"\(space\.y\.high: \(none\) -> 4; "):
        check_same_study(study, parse_study(grown), "here")
    bigger = parse_study(_form(budget={"trials": 50, "concurrency": 3}))
    assert check_same_study(study, bigger, "here") == []
    resumed = open_study(bigger, storage)
    assert CHANGES_ATTR not in resumed.user_attrs  # nothing to record
    assert resumed.user_attrs[STUDY_ATTR]["budget"]["trials"] != 50  # the made form is kept
    pruner = parse_study(_form(pruner={"name": "asha"}))
    assert check_same_study(study, pruner, "here") == ['pruner.name changed from "none" to "asha"']
    before = time.time()
    [change] = open_study(pruner, storage).user_attrs[CHANGES_ATTR]
    assert before <= change["time"] <= time.time()
    assert change == {"time": change["time"], "before_trial": 0,
                      "changes": ['pruner.name changed from "none" to "asha"']}
    other = parse_study(_form(pruner={"name": "asha"}, strategy={"name": "tpe", "seed": 7}))
    history = open_study(other, storage).user_attrs[CHANGES_ATTR]  # the history grows
    assert [h["changes"] for h in history] == [
        ['pruner.name changed from "none" to "asha"'],
        ['strategy.name changed from "random" to "tpe"']]


@pytest.mark.unit
def test_a_study_made_by_plain_optuna_is_compared_with_nothing() -> None:
    study = optuna.create_study(study_name="s")
    assert check_same_study(study, parse_study(_form()), "here") == []
    study.set_user_attr(STUDY_ATTR, "not a form")
    assert check_same_study(study, parse_study(_form()), "here") == []


def _running(study: optuna.Study, owner: str | None, beat: float | None = None,
             params: bool = True) -> optuna.Trial:
    trial = study.ask(X if params else None)
    if params:
        trial.suggest_float("x", 0.0, 1.0)
    if owner is not None:
        trial.set_user_attr(DRIVER_ATTR, owner)
    if beat is not None:
        trial.set_user_attr(HEARTBEAT_ATTR, beat)
    return trial


def test_a_trial_of_this_process_or_of_a_pid_it_may_not_signal_is_no_orphan(
        monkeypatch: pytest.MonkeyPatch) -> None:
    study = optuna.create_study()
    # this process, its beat long stale: a trial of this host is judged by its pid only
    mine = _running(study, f"{HOST}:{os.getpid()}", beat=time.time() - 3600)
    other = _running(study, f"{HOST}:{_dead_pid()}")

    def kill(pid: int, sig: int) -> None:
        raise PermissionError(pid)  # another user's process: alive

    monkeypatch.setattr(_study.os, "kill", kill)
    assert recover_orphans(study, claim_wait_s=0.0) == []
    monkeypatch.undo()
    assert recover_orphans(study, claim_wait_s=0.0) == [other.number]
    assert study.trials[mine.number].state is TrialState.RUNNING


@pytest.mark.unit
def test_another_hosts_trial_without_a_beat_is_judged_from_its_start() -> None:
    study = optuna.create_study()
    fresh = _running(study, "elsewhere:1")  # started now, no beat yet
    old = optuna.trial.create_trial(
        state=TrialState.RUNNING, params={"x": 0.5}, distributions=X,
        user_attrs={DRIVER_ATTR: "elsewhere:2", HEARTBEAT_ATTR: "yesterday"})  # no time: no beat
    old.datetime_start = datetime.datetime.now() - datetime.timedelta(hours=1)
    study.add_trial(old)
    number = len(study.trials) - 1
    assert recover_orphans(study, claim_wait_s=0.0, stale_after_s=600.0) == [number]
    assert study.trials[fresh.number].state is TrialState.RUNNING
    assert re.fullmatch(r"driver elsewhere:2 sent no heartbeat for 360\d s; parameters "
                        r"re-queued \(attempt 2 of 2\)",
                        study.trials[number].user_attrs["exit_reason"])


def test_a_trial_claimed_or_ended_while_the_recovery_waits_is_left_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    study = optuna.create_study()
    late = _running(study, None)  # its driver claims it during the wait
    done = _running(study, None)  # ... and this one ends during the wait
    lost = _running(study, None, params=False)  # never claimed, no parameters to re-queue
    dead = [_running(study, f"{HOST}:{_dead_pid()}") for _ in range(2)]  # after the unclaimed
    waits = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        late.set_user_attr(DRIVER_ATTR, "elsewhere:3")
        study.tell(done, 1.0)

    monkeypatch.setattr(_study.time, "sleep", sleep)
    assert recover_orphans(study) == sorted([lost.number, *(t.number for t in dead)])
    assert waits == [2.0]  # the default wait for a claim
    assert study.trials[late.number].state is TrialState.RUNNING
    assert study.trials[done.number].state is TrialState.COMPLETE
    t = study.trials[lost.number]
    assert t.state is TrialState.FAIL
    assert t.user_attrs["exit_reason"] == "its driver died before the trial started"
    for t in dead:  # the default retry budget: one more run each
        assert study.trials[t.number].user_attrs["exit_reason"].endswith(
            "parameters re-queued (attempt 2 of 2)")
    assert len(study.get_trials(states=(TrialState.WAITING,))) == 2  # not the one without params


@pytest.mark.unit
def test_changes_are_listed_past_every_skipped_key_and_keys_keep_their_last_letter() -> None:
    from search.driver._study import _changes, _flat

    assert _flat({"space": {"X": {"high": 1}}, "maX": 2}) == {"space.X.high": 1, "maX": 2}
    # batch_size: added since, at its default; local_steps: read by localsgd only
    old = {"training": {"algorithm": "sync", "local_steps": 2, "lr": 0.1, "epochs": 3}}
    new = {"training": {"algorithm": "sync", "batch_size": 64, "local_steps": 5, "lr": 0.2,
                        "epochs": 4}}
    assert _changes(old, new) == [("training.epochs", 3, 4), ("training.lr", 0.1, 0.2)]
    # an algorithm that only the new form's space can choose reads send_every
    searched = {"training": {"algorithm": "sync", "send_every": 4},
                "space": {"algorithm": {"choices": ["sync", "asgd"]}}}
    assert _changes({"training": {"algorithm": "sync", "send_every": 1}}, searched) == [
        ("space.algorithm.choices", None, ["sync", "asgd"]), ("training.send_every", 1, 4)]


@pytest.mark.unit
def test_a_study_keeps_its_file_without_the_storage_and_prunes_as_the_file_says(
        tmp_path: Path) -> None:
    from search.pruners._promotion import PromotingHalving
    from search.storage._checkpoint_store import STORE_ATTR

    sf = parse_study({"name": "p", "storage": "elsewhere.journal",
                      "pruner": {"name": "asha", "promote": True, "min_epochs": 1,
                                 "reduction_factor": 2},
                      "training": {"dataset": "digits", "epochs": 4, "ranks": 1}})
    study = open_study(sf, optuna.storages.InMemoryStorage(), url=str(tmp_path / "s.journal"))
    # its trials pause, so it checkpoints: beside the storage it was opened with
    assert study.user_attrs[STORE_ATTR] == str(tmp_path.resolve() / "detol-artifacts")
    stored = study.user_attrs[STUDY_ATTR]
    assert stored["storage"] is None and stored["training"]["epochs"] == 4
    assert sorted(stored) == sorted(sf.model_dump())  # no key of its own
    assert isinstance(study.pruner, PromotingHalving)
    assert study.pruner.rung_epochs(0, 100) == [1, 2, 4, 8, 16, 32, 64]
    assert study.pruner.max_resource == 4  # the study's epochs: the last one completes


@pytest.mark.unit
def test_a_stored_strategy_name_that_is_no_name_is_no_strategy() -> None:
    from search.driver._study import recorded_strategy

    study = optuna.create_study()
    study.set_user_attr(STUDY_ATTR, {"strategy": {"name": 5}})
    assert recorded_strategy(study) is None
    study.set_user_attr(STUDY_ATTR, {"strategy": {"name": "tpe"}})
    assert recorded_strategy(study) == "tpe"


@pytest.mark.unit
def test_only_a_pausing_pruner_with_a_checkpoint_at_the_last_epoch_pauses_a_lost_trial() -> None:
    from search.driver._study import paused_when_lost
    from search.pruners._promotion import PromotingHalving
    from training.contract import CHECKPOINT_ATTR

    promoter = PromotingHalving(1, 2)
    study = optuna.create_study(direction="maximize", pruner=promoter)
    for value in (0.9, 0.8):
        ahead = study.ask()
        ahead.report(value, 1)
        study.tell(ahead, state=TrialState.PRUNED)

    def lost(checkpoint: dict | None, report: bool = True) -> optuna.Trial:
        trial = study.ask()
        if report:
            trial.report(0.1, 1)  # third of three at rung 1: it pauses
        if checkpoint is not None:
            trial.set_user_attr(CHECKPOINT_ATTR, checkpoint)
        return trial

    at_rung = lost({"id": "c", "epoch": 1})
    assert paused_when_lost(study, at_rung, promoter) == 1
    assert paused_when_lost(study, at_rung, None) is None
    stops = optuna.pruners.ThresholdPruner(lower=1.0)  # would stop it: a stop is no pause
    assert stops.prune(study, study.trials[at_rung.number])
    assert paused_when_lost(study, at_rung, stops) is None
    assert paused_when_lost(study, lost(None), promoter) is None
    assert paused_when_lost(study, lost({"id": "", "epoch": 1}), promoter) is None
    assert paused_when_lost(study, lost({"id": "c", "epoch": 0}), promoter) is None  # older
    assert paused_when_lost(study, lost({"id": "c", "epoch": 1}, report=False), promoter) is None


def test_an_orphan_at_its_rung_is_told_paused_with_why() -> None:
    from search.pruners._promotion import PAUSED_ATTR, PromotingHalving
    from training.contract import CHECKPOINT_ATTR

    study = optuna.create_study(direction="maximize", pruner=PromotingHalving(1, 2))
    for value in (0.9, 0.8):
        ahead = study.ask()
        ahead.report(value, 1)
        study.tell(ahead, state=TrialState.PRUNED)
    owner = f"{HOST}:{_dead_pid()}"
    orphan = _running(study, owner)
    orphan.report(0.1, 1)
    orphan.set_user_attr(CHECKPOINT_ATTR, {"id": "c", "epoch": 1})
    assert recover_orphans(study, claim_wait_s=0.0) == [orphan.number]
    t = study.trials[orphan.number]
    assert t.state is TrialState.PRUNED and t.user_attrs[PAUSED_ATTR] == 1
    assert t.user_attrs["exit_reason"] == (
        f"paused after epoch 1 (driver {owner} died while the trial ran; its checkpoint is kept "
        "and the pruner asked again)")


def test_a_trial_its_dead_driver_claimed_but_never_started_says_so() -> None:
    """Claimed (the driver's first act after ask) but killed before a parameter was drawn."""
    study = optuna.create_study()
    owner = f"{HOST}:{_dead_pid()}"
    claimed = _running(study, owner, params=False)
    assert recover_orphans(study, claim_wait_s=0.0) == [claimed.number]
    t = study.trials[claimed.number]
    assert t.state is TrialState.FAIL
    assert t.user_attrs["exit_reason"] == f"driver {owner} died before the trial started"
    assert not study.get_trials(states=(TrialState.WAITING,))  # nothing to re-queue


@pytest.mark.unit
def test_a_warm_start_source_in_an_unnamed_storage_is_this_studys_storage() -> None:
    sf = parse_study(_form(strategy={"name": "random", "seed": 7, "warm_start": ["zz"]}))
    with pytest.raises(StudyError) as info:
        open_study(sf, optuna.storages.InMemoryStorage())
    assert info.value.message == "no study 'zz' in this study's storage (it holds: no study)"
    named = str(Path("/nowhere/s.journal"))
    with pytest.raises(StudyError) as info:
        open_study(sf, optuna.storages.InMemoryStorage(), url=named)
    assert info.value.message == f"no study 'zz' in {named} (it holds: no study)"


def test_asking_whether_a_driver_lives_sends_it_no_signal() -> None:
    import sys

    code = ("import signal, sys\n"
            "signal.signal(signal.SIGHUP, lambda *a: print('signalled', flush=True))\n"
            "print('ready', flush=True)\nsys.stdin.read()\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"  # its handler is in place
        study = optuna.create_study()
        _running(study, f"{HOST}:{child.pid}")
        assert recover_orphans(study, claim_wait_s=0.0) == []  # alive: left alone
    finally:
        out, _ = child.communicate("", timeout=60)  # end of input: it ends
    assert out == ""  # a signal sent to it would have been handled before its input ended
