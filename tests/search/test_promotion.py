"""Pause-and-promote successive halving: the rule on hand-made studies, then a real study."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from search.pruners._promotion import (
    LINEAGE_ATTR,
    PAUSED_ATTR,
    RESUME_OF_ATTR,
    PromotingHalving,
    configuration_numbers,
    hyperband_brackets,
)
from tests.cli_helpers import run_search, search_command
from tests.search.test_dashboard import _first_line, _free_port, _get
from training.contract import CHECKPOINT_ATTR, open_storage


def _paused(study: optuna.Study, values: list[float], **attrs: object) -> optuna.trial.FrozenTrial:
    """A trial that reported ``values`` for epochs 1.. and paused at the last one."""
    trial = study.ask()
    for epoch, value in enumerate(values, start=1):
        trial.report(value, epoch)
    for key, value in {PAUSED_ATTR: len(values), **attrs}.items():
        trial.set_user_attr(key, value)
    study.tell(trial, state=TrialState.PRUNED)
    return study.trials[-1]


def _asks_to_pause(study: optuna.Study, values: list[float], **attrs: object) -> bool:
    trial = study.ask()
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    for epoch, value in enumerate(values, start=1):
        trial.report(value, epoch)
    pause = trial.should_prune()
    study.tell(trial, state=TrialState.FAIL)  # out of the way of later questions
    return pause


def _study(pruner: PromotingHalving, direction: str = "maximize") -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(direction=direction, pruner=pruner)


@pytest.mark.unit
def test_rungs_follow_min_resource_and_eta() -> None:
    assert PromotingHalving(1, 3).rung_epochs(0, 12) == [1, 3, 9]
    assert PromotingHalving(1, 3, min_early_stopping_rate=1).rung_epochs(0, 12) == [3, 9]
    assert PromotingHalving(2, 2).rung_epochs(0, 16) == [2, 4, 8]
    assert hyperband_brackets(1, 12, 3) == 3 and hyperband_brackets(1, 27, 3) == 4
    assert PromotingHalving(1, 3, brackets=3).rung_epochs(2, 12) == [9]


@pytest.mark.unit
def test_a_trial_pauses_at_a_rung_unless_it_is_in_the_top_third() -> None:
    study = _study(PromotingHalving(1, 3))
    assert _asks_to_pause(study, [0.5])  # the first to arrive: floor(1/3) = 0 promotable
    _paused(study, [0.5])
    _paused(study, [0.4])
    assert not _asks_to_pause(study, [0.9])  # best of 3: the top floor(3/3) = 1
    assert _asks_to_pause(study, [0.45])  # second of 3
    assert not _asks_to_pause(study, [0.9, 0.1])  # epoch 2 is no rung: it goes on


@pytest.mark.unit
def test_direction_decides_what_is_best() -> None:
    study = _study(PromotingHalving(1, 3), direction="minimize")
    _paused(study, [0.5])
    _paused(study, [0.4])
    assert _asks_to_pause(study, [0.9])
    assert not _asks_to_pause(study, [0.1])


@pytest.mark.unit
def test_paused_trials_become_promotable_as_more_arrive_best_and_highest_first() -> None:
    study = _study(PromotingHalving(1, 3))
    pruner = study.pruner
    assert isinstance(pruner, PromotingHalving)
    a = _paused(study, [0.7])
    c = _paused(study, [0.3])
    assert pruner.promotable(study) == []  # 2 at the rung: nobody is in the top floor(2/3)
    _paused(study, [0.2])
    assert [t.number for t in pruner.promotable(study)] == [a.number]
    b = _paused(study, [0.1, 0.2, 0.8])  # alone at rung 3 (floor(1/3) = 0): not promotable
    for value in (0.6, 0.5):
        _paused(study, [0.1, 0.2, value])
    # rung 3 has b, 0.6, 0.5: b is its top third; rung 1 has 6 lineages: its top 2 are a, c.
    assert [t.number for t in pruner.promotable(study)] == [b.number, a.number, c.number]
    # Once a continuation of a exists (even only queued), a is no longer offered.
    study.enqueue_trial({}, user_attrs={RESUME_OF_ATTR: a.number, LINEAGE_ATTR: a.number})
    assert [t.number for t in pruner.promotable(study)] == [b.number, c.number]


@pytest.mark.unit
def test_when_no_new_configuration_comes_each_rung_promotes_at_least_its_best() -> None:
    # Two configurations at rung 1 of eta 3: floor(2/3) = 0, so none would ever go on and a
    # finite study would end with nothing trained to its last epoch.
    study = _study(PromotingHalving(1, 3))
    pruner = study.pruner
    assert isinstance(pruner, PromotingHalving)
    _paused(study, [0.3])
    best = _paused(study, [0.6])
    assert pruner.promotable(study) == []
    assert [t.number for t in pruner.promotable(study, finishing=True)] == [best.number]


@pytest.mark.unit
def test_a_lineage_counts_once_at_a_rung() -> None:
    study = _study(PromotingHalving(1, 3))
    pruner = study.pruner
    assert isinstance(pruner, PromotingHalving)
    a = _paused(study, [0.9])
    _paused(study, [0.2])
    _paused(study, [0.1])
    # a's continuation carries a's epoch-1 value: still 3 configurations at rung 1, not 4
    # (with 4, floor(4/3) = 1 too; so check at rung 3 where it would matter: 2 vs 1).
    _paused(study, [0.9, 0.9, 0.9], **{RESUME_OF_ATTR: a.number, LINEAGE_ATTR: a.number})
    values = pruner._rung_values(study.get_trials(deepcopy=False), 1, 0)  # noqa: SLF001
    assert sorted(values) == [0, 1, 2]


@pytest.mark.unit
def test_hyperband_brackets_do_not_compete() -> None:
    pruner = PromotingHalving(1, 3, brackets=2, max_resource=12)
    study = _study(pruner)
    # Lineages 0, 2, 4 are bracket 0 (rungs 1, 3, 9); 1, 3 are bracket 1 (rungs 3, 9).
    _paused(study, [0.1])  # 0
    assert not _asks_to_pause(study, [0.9])  # 1: epoch 1 is no rung of bracket 1
    _paused(study, [0.2])  # 2
    _paused(study, [0.3])  # 3: bracket 1, but paused at epoch 1 - never counted at rung 1
    assert [t.number for t in pruner.promotable(study)] == []  # bracket 0 has 2 at rung 1
    _paused(study, [0.15])  # 4: now 0, 2, 4 at rung 1 of bracket 0: top 1 is 2
    assert [t.number for t in pruner.promotable(study)] == [2]


@pytest.mark.unit
def test_a_failed_continuation_leaves_its_parent_promotable_again() -> None:
    study = _study(PromotingHalving(1, 2))
    pruner = study.pruner
    assert isinstance(pruner, PromotingHalving)
    best = _paused(study, [0.9])
    _paused(study, [0.1])
    assert [t.number for t in pruner.promotable(study)] == [best.number]
    # Its continuation could not restore (or crashed): the lineage is not lost for good.
    attrs = {RESUME_OF_ATTR: best.number, LINEAGE_ATTR: best.number}
    assert _asks_to_pause(study, [0.9], **attrs) is False  # told FAIL
    assert [t.number for t in pruner.promotable(study)] == [best.number]
    # ... but a checkpoint that fails every time is not retried for ever.
    _asks_to_pause(study, [0.9], **attrs)
    assert pruner.promotable(study) == []


@pytest.mark.unit
def test_hyperband_brackets_follow_configuration_numbers_not_trial_numbers() -> None:
    pruner = PromotingHalving(1, 2, brackets=2, max_resource=8)
    study = _study(pruner)
    first = _paused(study, [0.5])  # configuration 0: bracket 0 (rungs 1, 2, 4)
    # A continuation uses up trial number 1 ...
    _paused(study, [0.5, 0.6], **{RESUME_OF_ATTR: first.number, LINEAGE_ATTR: first.number})
    # ... so trial 2 is configuration 1 (bracket 1: rungs 2, 4), trial 3 configuration 2.
    assert not _asks_to_pause(study, [0.1])  # epoch 1 is no rung of bracket 1
    assert _asks_to_pause(study, [0.1])  # bracket 0 at rung 1: 0.5 beats it
    # A re-run (after a lost worker) belongs to its configuration too.
    _asks_to_pause(study, [0.5], **{LINEAGE_ATTR: 3, "detol:retry_of": 3})
    numbers = configuration_numbers(study.get_trials(deepcopy=False))
    assert numbers == {0: 0, 2: 1, 3: 2}
    counts = [0, 0]
    for n in numbers.values():
        counts[pruner.bracket(n)] += 1
    assert counts == [2, 1]


@pytest.mark.unit
def test_a_retry_after_a_lost_worker_carries_the_lineage_totals() -> None:
    from search.driver._study import RESUME_FROM_ATTR, requeue

    study = _study(PromotingHalving(1, 2))
    parent = _paused(study, [0.5, 0.6], **{"detol:lineage_epochs": 2,
                                           "detol:lineage_rank_seconds": 4.0,
                                           "detol:lineage_wall_time_s": 2.5})
    # A continuation from the parent's epoch-2 checkpoint, as queue_promotion makes it ...
    study.enqueue_trial({}, user_attrs={
        RESUME_OF_ATTR: parent.number, LINEAGE_ATTR: parent.number,
        RESUME_FROM_ATTR: {"id": "a", "epoch": 2, "trial": parent.number},
        "detol:lineage_epochs": 2, "detol:lineage_rank_seconds": 4.0,
        "detol:lineage_wall_time_s": 2.5})
    trial = study.ask()
    # ... trains epochs 3 and 4, checkpoints at 4, and is lost with its worker.
    trial.set_user_attr(CHECKPOINT_ATTR, {"id": "b", "epoch": 4, "store": "x"})
    requeue(study, trial, "worker lost", max_retries=1)
    retry = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))[0]
    assert retry.user_attrs[LINEAGE_ATTR] == parent.number
    assert retry.user_attrs[RESUME_OF_ATTR] == parent.number
    assert retry.user_attrs["detol:lineage_epochs"] == 4  # 2 before + epochs 3, 4 kept
    assert retry.user_attrs["detol:lineage_rank_seconds"] == 4.0
    assert retry.user_attrs["detol:lineage_wall_time_s"] == 2.5


def _uninterrupted(study_file: Path, params: dict) -> list[dict]:
    """The per-epoch history of ``params`` trained for every epoch in this process (1 rank)."""
    from mpi4py import MPI

    from search.studyfile._study_file import load_study_file
    from training.jobs._trainer import Trainer

    config = load_study_file(study_file).training.with_params(params)
    return Trainer(config, MPI.COMM_SELF).train().history


def _promotion_study(directory: Path, *, trials: int) -> Path:
    path = directory / "study.toml"
    path.write_text(textwrap.dedent(f"""\
        name = "promo"
        [budget]
        trials = {trials}
        concurrency = 2
        [strategy]
        name = "random"
        seed = 4
        [pruner]
        name = "asha"
        promote = true
        min_epochs = 1
        reduction_factor = 3
        [training]
        dataset = "digits"
        epochs = 5
        ranks = 1
        [space]
        lr = {{ type = "float", low = 1e-3, high = 0.3, log = true }}
        hidden = {{ type = "int", low = 4, high = 48 }}
        """))
    return path


@pytest.mark.mpi
@pytest.mark.timeout(1200)  # two real studies; minutes on a busy machine
def test_paused_trials_resume_from_their_checkpoints_in_a_real_study(tmp_path: Path) -> None:
    study_file = _promotion_study(tmp_path, trials=7)
    storage = str(tmp_path / "s.journal")
    code, out, err = run_search("run", str(study_file), "--storage", storage, "--no-progress",
                                cwd=tmp_path, timeout=600)
    assert code == 0, out + err
    trials = optuna.load_study(study_name="promo", storage=open_storage(storage)).trials
    by_number = {t.number: t for t in trials}
    continuations = [t for t in trials if RESUME_OF_ATTR in t.user_attrs]
    configurations = [t for t in trials if RESUME_OF_ATTR not in t.user_attrs]
    assert len(configurations) == 7  # budget.trials counts configurations, not segments
    assert continuations, "nothing was promoted"
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
    references: dict[tuple, list[dict]] = {}
    for t in continuations:
        parent = by_number[t.user_attrs[RESUME_OF_ATTR]]
        paused_at = parent.user_attrs[PAUSED_ATTR]
        assert parent.state is TrialState.PRUNED and t.params == parent.params
        # The parent's checkpoint is an artifact of the parent trial, in the default store.
        checkpoint = parent.user_attrs[CHECKPOINT_ATTR]
        assert checkpoint["epoch"] == paused_at
        assert f"artifacts:{checkpoint['id']}" in parent.system_attrs
        assert (tmp_path / "detol-artifacts" / checkpoint["id"]).is_file()
        # It continued, not restarted: its own epochs start after the pause; curve whole.
        assert t.user_attrs["start_epoch"] == paused_at + 1
        last = max(t.intermediate_values)
        assert sorted(t.intermediate_values) == list(range(1, last + 1))
        assert t.user_attrs["epochs_run"] == last - paused_at
        assert [row["epoch"] for row in t.user_attrs["history"]] == list(range(1, last + 1))
        # Restored, not re-initialised: its own epochs give what an uninterrupted run of the
        # same configuration gives (trained here in process: same seed, one rank). A
        # continuation that never loaded its parent's weights would differ from epoch p+1 on.
        key = tuple(sorted(t.params.items()))  # trained once per configuration
        if key not in references:
            references[key] = _uninterrupted(study_file, t.params)
        reference = references[key]
        for row in t.user_attrs["history"][paused_at:]:
            want = reference[row["epoch"] - 1]
            assert row["val_accuracy"] == want["val_accuracy"], (t.number, row["epoch"])
            assert row["train_loss"] == pytest.approx(want["train_loss"], rel=1e-5)
        assert t.intermediate_values[paused_at] == parent.intermediate_values[paused_at]
        # Work is counted per segment and for the whole lineage.
        assert t.user_attrs["detol:lineage_epochs"] == (
            parent.user_attrs["detol:lineage_epochs"] + t.user_attrs["epochs_run"]
        )
        assert t.user_attrs["detol:lineage_rank_seconds"] == pytest.approx(
            parent.user_attrs["detol:lineage_rank_seconds"] + t.user_attrs["rank_seconds"]
        )
    complete = [t for t in trials if t.state is TrialState.COMPLETE]
    assert complete and all(max(t.intermediate_values) == 5 for t in complete)
    # Nothing promotable is left behind, read back from the storage alone.
    study = optuna.load_study(study_name="promo", storage=open_storage(storage),
                              pruner=PromotingHalving(1, 3, max_resource=5))
    pruner = study.pruner
    assert isinstance(pruner, PromotingHalving)
    assert pruner.promotable(study) == [] and pruner.promotable(study, finishing=True) == []
    # A second run with a larger budget (one more configuration: the resume is what is
    # checked, not more of the same) goes on from the same storage.
    study_file = _promotion_study(tmp_path, trials=8)
    code, out, err = run_search("run", str(study_file), "--storage", storage, "--no-progress",
                                cwd=tmp_path, timeout=600)
    assert code == 0, out + err
    trials = optuna.load_study(study_name="promo", storage=open_storage(storage)).trials
    assert len([t for t in trials if RESUME_OF_ATTR not in t.user_attrs]) == 8
    # optuna-dashboard, through `search dashboard`, serves a paused trial's checkpoint.
    study = optuna.load_study(study_name="promo", storage=open_storage(storage))
    paused = next(t for t in study.trials if PAUSED_ATTR in t.user_attrs)
    artifact = paused.user_attrs[CHECKPOINT_ATTR]["id"]
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    proc = subprocess.Popen([*search_command(), "dashboard", "promo", "--storage", storage,
                             "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        _first_line(proc, 90)
        status, body = _get(f"http://127.0.0.1:{port}/artifacts/{study._study_id}/"
                            f"{paused._trial_id}/{artifact}")
        assert status == 200
        assert body == (tmp_path / "detol-artifacts" / artifact).read_bytes()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
