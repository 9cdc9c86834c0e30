"""Which paused trials are promotable, and in which order, where the full mutant set of
search/pruners/_promotion.py found no test (issue 33): who is a candidate (only a paused PRUNED
trial, never a plainly pruned, complete or running one, though all of them count at the rung),
trials running at the same rung, ties, Hyperband brackets by configuration number when re-runs
use up trial numbers. Only the pruner's two answers are read (``prune``, ``promotable``), never
how it computes them."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from search.pruners._promotion import (
    LINEAGE_ATTR,
    PAUSED_ATTR,
    RESUME_OF_ATTR,
    WIDEN_ATTR,
    PromotingHalving,
    hyperband_brackets,
)
from tests.search.test_promotion import _asks_to_pause, _paused, _study

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def _numbers(trials: list[optuna.trial.FrozenTrial]) -> list[int]:
    return [t.number for t in trials]


def _running(study: optuna.Study, values: list[float]) -> optuna.Trial:
    trial = study.ask()
    for epoch, value in enumerate(values, start=1):
        trial.report(value, epoch)
    return trial


def test_only_a_paused_pruned_trial_is_promoted_though_all_others_count_at_the_rung() -> None:
    pruner = PromotingHalving(1, 2)
    study = _study(pruner)
    paused = _paused(study, [0.9])  # 0
    plain = _running(study, [0.95])  # 1: pruned by a pruner that stops, no pause
    study.tell(plain, state=TrialState.PRUNED)
    done = _running(study, [0.99])  # 2: completed at epoch 1
    study.tell(done, 0.99)
    _running(study, [0.3])  # 3: still running
    _paused(study, [0.1])  # 4
    _paused(study, [0.2])  # 5
    # six at rung 1, the top three: 2, 1, 0; only 0 paused
    assert _numbers(pruner.promotable(study)) == [paused.number]
    # a seventh (0.92) pushes 0 out of the top three (now 2, 1, 6)
    _paused(study, [0.92])
    assert _numbers(pruner.promotable(study)) == [6]


def test_trials_running_at_a_rung_are_judged_against_each_other() -> None:
    pruner = PromotingHalving(1, 2)
    study = _study(pruner)
    _paused(study, [0.5])  # 0
    a = _running(study, [0.9])  # 1
    b = _running(study, [0.8])  # 2
    assert pruner.promotable(study) == []  # 1 holds the top place (floor(3 / 2) = 1)
    assert b.should_prune()  # 2 is second to a trial still running
    assert not a.should_prune()
    study.tell(a, state=TrialState.FAIL)  # its value no longer counts
    assert not b.should_prune()  # 2 leads the rung now
    assert pruner.promotable(study) == []  # 0 is second to 2
    study.tell(b, state=TrialState.PRUNED)  # 2 was told PRUNED without a pause
    assert pruner.promotable(study) == []  # ... so nothing to promote
    assert _numbers(pruner.promotable(study, finishing=True)) == []


def test_ties_at_a_rung_go_in_trial_order_and_minimising_promotes_the_lowest_first() -> None:
    pruner = PromotingHalving(1, 2)
    study = _study(pruner, direction="minimize")
    for value in (0.2, 0.1, 0.1, 0.9, 0.8, 0.7):
        _paused(study, [value])
    assert _numbers(pruner.promotable(study)) == [1, 2, 0]  # top three of six


def test_hyperband_promotes_within_brackets_numbered_by_configuration() -> None:
    # eta 2, two brackets: configurations 0, 2, 4 have rungs 1, 2, 4; configurations 1, 3
    # have rungs 2, 4. Trial 1 is a failed re-run of trial 0: trial numbers and configuration
    # numbers part from there on.
    pruner = PromotingHalving(1, 2, brackets=2)
    study = _study(pruner)
    _paused(study, [0.5])  # trial 0, configuration 0, bracket 0
    rerun = _running(study, [0.99])  # trial 1: lineage 0, no configuration of its own
    rerun.set_user_attr(LINEAGE_ATTR, 0)
    study.tell(rerun, state=TrialState.FAIL)
    _paused(study, [0.1, 0.1])  # trial 2, configuration 1, bracket 1: paused at rung 2
    _paused(study, [0.6])  # trial 3, configuration 2, bracket 0
    _paused(study, [0.2, 0.2])  # trial 4, configuration 3, bracket 1
    _paused(study, [0.7])  # trial 5, configuration 4, bracket 0
    # bracket 1 at epoch 2: {2: 0.1, 4: 0.2}, top 1: trial 4; bracket 0 at epoch 1:
    # {0: 0.5, 3: 0.6, 5: 0.7}, top 1: trial 5. Higher rung first.
    assert _numbers(pruner.promotable(study)) == [4, 5]
    # A new configuration (5, bracket 1) at epoch 1 is no rung of its bracket: it goes on.
    assert not _running(study, [0.0]).should_prune()


def test_defaults_are_asha_from_epoch_one_with_eta_three() -> None:
    pruner = PromotingHalving()
    assert pruner.rung_epochs(0, 30) == [1, 3, 9, 27]
    assert (pruner.brackets, pruner.max_resource, pruner.widen_until) == (1, None, 0)


def test_a_bad_option_is_refused_with_the_bounds() -> None:
    with pytest.raises(ValueError) as info:
        PromotingHalving(min_early_stopping_rate=-1)
    assert str(info.value) == (
        "min_resource >= 1, reduction_factor >= 2, min_early_stopping_rate >= 0 needed")


def _widening(study: optuna.Study, values: list[float]) -> int:
    """A trial marked to go on wider that paused at its last epoch (no rung) to do so."""
    trial = _running(study, values)
    study._storage.set_trial_system_attr(trial._trial_id, WIDEN_ATTR, 4)  # noqa: SLF001
    trial.set_user_attr(PAUSED_ATTR, len(values))
    study.tell(trial, state=TrialState.PRUNED)
    return trial.number


def test_trials_paused_between_rungs_to_widen_go_first_best_first_and_rungs_still_count(
) -> None:
    pruner = PromotingHalving(1, 3)  # rungs 1, 3, 9
    study = _study(pruner)
    worse = _widening(study, [0.2, 0.3])  # 0: paused at epoch 2 (no rung)
    better = _widening(study, [0.2, 0.5])  # 1
    best = _paused(study, [0.9]).number  # 2 ...
    for value in (0.1, 0.15):
        _paused(study, [value])  # ... the top of four at rung 1
    assert _numbers(pruner.promotable(study)) == [better, worse, best]


def test_hyperband_pauses_by_the_rung_of_its_configurations_bracket() -> None:
    # eta 2, two brackets: configurations 0, 2, 4 at rungs 1, 2, 4; 1, 3 at rungs 2, 4.
    pruner = PromotingHalving(1, 2, brackets=2)
    study = _study(pruner)
    first = _paused(study, [0.9])  # trial 0: configuration 0
    _paused(study, [0.9, 0.8], **{RESUME_OF_ATTR: first.number, LINEAGE_ATTR: first.number})
    _paused(study, [0.1, 0.2])  # trial 2: configuration 1 (bracket 1), paused at its rung 2
    _paused(study, [0.3])  # trial 3: configuration 2 (bracket 0)
    _paused(study, [0.05, 0.06])  # trial 4: configuration 3 (bracket 1)
    # trial 5, configuration 4, at rung 1 of bracket 0 with 0.9 (0) and 0.3 (3): second of
    # three, floor(3 / 2) = 1: it pauses (counting trials 2 and 4 by their trial numbers'
    # brackets would make it second of four, promoted)
    assert _asks_to_pause(study, [0.5])
    # Only bracket 1 has trials paused at a rung; bracket 0's trials still report values.
    pruner = PromotingHalving(1, 2, brackets=2)
    study = _study(pruner)
    _running(study, [0.4])  # 0: configuration 0, bracket 0, running
    top = _paused(study, [0.1, 0.9])  # 1: configuration 1, bracket 1, paused at its rung 2
    _running(study, [0.0])  # 2: configuration 2, bracket 0
    _paused(study, [0.2, 0.3])  # 3: configuration 3, bracket 1
    assert _numbers(pruner.promotable(study)) == [top.number]


def test_hyperband_has_one_bracket_when_the_budget_allows_one_rung_only() -> None:
    assert hyperband_brackets(3, 5, 2) == 1  # 5 // 3 = 1: every configuration starts at 3
