"""The dominated pruner's edges, exactly (issue 33): the warm-up and start-up bounds are
inclusive, the threshold counts equality, a trial never judges against itself, and malformed or
missing vectors are no vectors."""

from __future__ import annotations

import math

import optuna
import pytest
from optuna.study import StudyDirection
from optuna.trial import TrialState, create_trial

from search.pruners._dominated import DominatedPruner, _point, epochs_of, vector_at
from tests.search.test_pareto_pruning import _add, _judge, _key, _pruner, _study

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

MAX2 = ["maximize", "maximize"]


def test_epochs_and_vectors_of_several_objectives_come_from_well_formed_attributes() -> None:
    t = create_trial(state=TrialState.COMPLETE, values=[1.0, 1.0], user_attrs={
        _key(3): [0.1, 0.2], _key(1): [0.3, 0.4], _key(2): [0.5], _key(4): "x",
        f"{_key(5)}b": [1, 2], "other": [1, 2]})
    assert epochs_of(t, 2) == [1, 2, 3, 4]
    assert vector_at(t, 1, 2) == [0.3, 0.4] and vector_at(t, 3, 2) == [0.1, 0.2]
    assert vector_at(t, 2, 2) is None and vector_at(t, 4, 2) is None  # wrong length / no list
    assert vector_at(t, 9, 2) is None
    one = create_trial(state=TrialState.COMPLETE, value=1.0, intermediate_values={4: 0.5, 2: 0.1})
    assert epochs_of(one, 1) == [2, 4] and vector_at(one, 4, 1) == [0.5]
    assert vector_at(one, 3, 1) is None


def test_a_missing_or_non_finite_entry_is_the_worst_of_its_direction() -> None:
    dirs = [StudyDirection.MAXIMIZE, StudyDirection.MINIMIZE]
    assert _point([None, math.nan], dirs).values == [-math.inf, math.inf]
    assert _point([2, 3.5], dirs).values == [2.0, 3.5]


def test_warmup_and_startup_bounds_are_inclusive() -> None:
    study = _study(MAX2, [[0.9, 0.9], [0.8, 0.8]], epoch=2)
    assert _judge(study, _pruner(warmup=2), {2: [0.1, 0.1]})  # epoch 2 = warm-up: judged
    assert not _judge(study, _pruner(warmup=3), {2: [0.1, 0.1]})
    assert _judge(study, _pruner(startup=2), {2: [0.1, 0.1]})  # 2 completed = start-up
    assert not _judge(study, _pruner(startup=3), {2: [0.1, 0.1]})


def test_the_threshold_counts_equality_and_failed_trials_do_not_count() -> None:
    def study(*extra: tuple[list[float], TrialState]) -> optuna.Study:
        s = _study(MAX2, [[0.9, 0.9], [0.1, 0.1]], epoch=1)
        for vector, state in extra:
            _add(s, {1: vector}, state)
        return s

    assert _judge(study(), _pruner(fraction=0.5), {1: [0.5, 0.5]})  # 1 of 2 others = 0.5
    assert not _judge(study(), _pruner(fraction=0.75), {1: [0.5, 0.5]})
    # two failed trials would make it 3 of 4 (>= 0.75): they are not counted
    failed = ([0.9, 0.9], TrialState.FAIL), ([0.95, 0.95], TrialState.FAIL)
    assert not _judge(study(*failed), _pruner(fraction=0.75), {1: [0.5, 0.5]})
    # a stopped trial's vector counts: 2 of 3
    assert _judge(study(([0.9, 0.9], TrialState.PRUNED)), _pruner(fraction=0.6), {1: [0.5, 0.5]})


def test_a_trial_never_counts_against_itself_and_needs_others() -> None:
    study = optuna.create_study(directions=MAX2)
    assert not _judge(study, _pruner(fraction=1.0), {1: [0.5, 0.5]})  # no others at all
    _add(study, {2: [0.9, 0.9]})  # another trial, but not at epoch 1
    assert not _judge(study, _pruner(fraction=1.0), {1: [0.5, 0.5]})
    # a running trial with an older report judged on its latest epoch only
    assert _judge(study, _pruner(fraction=1.0), {1: [0.99, 0.99], 2: [0.5, 0.5]})
    trial = study.ask()  # no vector yet: nothing to judge
    assert not _pruner(warmup=0).prune(study, study.trials[trial.number])


def test_options_name_the_argument_and_echo_the_value() -> None:
    import pytest

    for kwargs, message in (({"fraction": 0}, r"^fraction: must be in \(0, 1\], got 0$"),
                            ({"fraction": 1.5}, r"^fraction: must be in \(0, 1\], got 1.5$"),
                            ({"n_startup_trials": -1}, r"^n_startup_trials: must be >= 0, got -1$"),
                            ({"n_warmup_steps": -2}, r"^n_warmup_steps: must be >= 0, got -2$")):
        with pytest.raises(ValueError, match=message):
            DominatedPruner(**kwargs)
    assert DominatedPruner(fraction=1.0, n_startup_trials=0, n_warmup_steps=0).fraction == 1.0


def test_the_defaults_wait_for_five_completed_trials_and_judge_from_epoch_1() -> None:
    """fraction 0.5, 5 start-up trials, warm-up 1: what the docs promise a pruner built bare."""
    best = [[0.9, 0.9]] * 4
    assert not _judge(_study(MAX2, best), DominatedPruner(), {1: [0.1, 0.1]})  # 4 completed
    assert _judge(_study(MAX2, [*best, best[0]]), DominatedPruner(), {1: [0.1, 0.1]})  # 5
    assert not _judge(_study(MAX2, best * 2, epoch=0), DominatedPruner(), {0: [0.1, 0.1]})
    half = [[0.9, 0.9]] * 3 + [[0.0, 0.0]] * 3  # 3 of the 6 others dominate it
    assert _judge(_study(MAX2, half), DominatedPruner(), {1: [0.1, 0.1]})


def test_a_malformed_vector_at_the_latest_epoch_is_never_stopped() -> None:
    study = _study(MAX2, [[0.9, 0.9], [0.8, 0.8]], epoch=1)
    assert not _judge(study, _pruner(fraction=0.5), {1: [0.1]})  # one entry for two objectives
    assert not _judge(study, _pruner(fraction=0.5), {1: [0.1, 0.1], 2: "x"})
