"""Promotion's rules that the hand-made and real studies of test_promotion.py let slip
(issue 33): a second promotion and a re-run count as their lineage, failed and NaN values never
count at a rung, a trial alone at its epoch, the order of promotions, the bounds of the rungs."""

from __future__ import annotations

import math

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from search.pruners._promotion import (
    LINEAGE_ATTR,
    PAUSED_ATTR,
    RESUME_OF_ATTR,
    PromotingHalving,
    configuration_numbers,
    continued_parents,
    hyperband_brackets,
    is_segment,
    lineage,
)
from tests.search.test_promotion import _asks_to_pause, _paused, _study

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def _trial(number: int, state: TrialState = TrialState.PRUNED, values: dict[int, float] | None = None,
           **attrs: object) -> optuna.trial.FrozenTrial:
    t = create_trial(state=state, params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)},
                     value=0.0 if state == TrialState.COMPLETE else None,
                     intermediate_values=values or {}, user_attrs=dict(attrs))
    t.number = number
    return t


def test_lineage_is_the_first_trials_number_not_the_parent_it_resumes() -> None:
    # 0 paused; 3 continued it and paused again; 7 continued 3: all one lineage, 0
    second = _trial(7, **{RESUME_OF_ATTR: 3, LINEAGE_ATTR: 0})
    assert lineage(second) == 0 and lineage(_trial(4)) == 4
    assert is_segment(second) and not is_segment(_trial(4))
    trials = [_trial(0), _trial(1), _trial(3, **{RESUME_OF_ATTR: 0, LINEAGE_ATTR: 0}), _trial(4),
              second, _trial(8, **{LINEAGE_ATTR: 4})]  # 8: a re-run of 4 after a lost worker
    assert configuration_numbers(trials) == {0: 0, 1: 1, 4: 2}


def test_a_second_promotion_counts_once_for_its_lineage_at_the_higher_rung() -> None:
    pruner = PromotingHalving(1, 2)
    study = _study(pruner)
    a = _paused(study, [0.9])  # 0
    _paused(study, [0.1])  # 1
    first = _paused(study, [0.9, 0.8], **{RESUME_OF_ATTR: a.number, LINEAGE_ATTR: a.number})
    _paused(study, [0.2, 0.3])  # 3: a fresh configuration that reached rung 2 as well
    again = _paused(study, [0.9, 0.8, 0.7, 0.6],
                    **{RESUME_OF_ATTR: first.number, LINEAGE_ATTR: a.number})
    values = pruner._rung_values(study.get_trials(deepcopy=False), 2, 0)  # noqa: SLF001
    assert values == {a.number: 0.8, 3: 0.3}  # lineage 0 once, under its first trial's number
    assert continued_parents(study.get_trials()) == {a.number, first.number}
    assert [t.number for t in pruner.promotable(study)] == []  # 0 and 2 continued, 4 alone at 4
    assert [t.number for t in pruner.promotable(study, finishing=True)] == [again.number]


def test_failed_and_nan_values_do_not_count_at_a_rung() -> None:
    pruner = PromotingHalving(1, 2)
    study = _study(pruner)
    _paused(study, [0.5])  # 0
    _asks_to_pause(study, [0.99])  # 1, told FAIL: its 0.99 must not push 0 out of the top
    _asks_to_pause(study, [0.98])  # 2, FAIL too
    _paused(study, [math.nan])  # 3: a NaN metric is no value
    assert pruner._rung_values(study.get_trials(), 1, 0) == {0: 0.5}  # noqa: SLF001
    assert pruner.promotable(study) == []  # one value: fewer than eta, no top yet
    assert [t.number for t in pruner.promotable(study, finishing=True)] == [0]
    # a running trial's value counts
    trial = study.ask()
    trial.report(0.7, 1)
    assert pruner._rung_values(study.get_trials(), 1, 0) == {0: 0.5, 4: 0.7}  # noqa: SLF001
    assert [t.number for t in pruner.promotable(study)] == []  # 4 is the top, still running


def test_a_trial_alone_at_its_epoch_pauses_unless_it_is_the_last_epoch() -> None:
    study = _study(PromotingHalving(1, 3, max_resource=3))
    assert _asks_to_pause(study, [0.5])  # rung 1, alone: top floor(1/3) = 0
    assert not _asks_to_pause(study, [0.5, 0.5])  # epoch 2 is no rung
    assert not _asks_to_pause(study, [0.5, 0.5, 0.5])  # epoch 3 = max_resource: it completes
    trial = study.ask()
    assert not study.pruner.prune(study, study.trials[trial.number])  # no report yet


def test_the_reporting_trial_counts_with_its_new_value() -> None:
    study = _study(PromotingHalving(1, 2), direction="minimize")
    _paused(study, [0.4])
    _paused(study, [0.6])
    assert not _asks_to_pause(study, [0.1])  # 3 at the rung, top 1 (lowest): itself
    assert _asks_to_pause(study, [0.5])


def test_promotions_go_highest_rung_first_then_best_first() -> None:
    pruner = PromotingHalving(1, 2)
    study = _study(pruner)
    low = [_paused(study, [v]) for v in (0.9, 0.8, 0.1, 0.2)]  # rung 1: top 2 are 0 and 1
    high = [_paused(study, [v, w]) for v, w in ((0.3, 0.7), (0.3, 0.6))]  # rung 2: 4 and 5 ...
    _paused(study, [0.05, 0.1])
    _paused(study, [0.05, 0.2])  # ... top 2 of 4 at rung 2
    order = [t.number for t in pruner.promotable(study)]
    assert order == [high[0].number, high[1].number, low[0].number, low[1].number]


def test_rungs_start_at_the_early_stopping_rate_and_bracket() -> None:
    assert PromotingHalving(2, 3).rung_epochs(0, 40) == [2, 6, 18]
    assert PromotingHalving(2, 3, min_early_stopping_rate=1).rung_epochs(0, 40) == [6, 18]
    assert PromotingHalving(1, 2, brackets=3).rung_epochs(2, 17) == [4, 8, 16]
    assert PromotingHalving(1, 2).rung_epochs(0, 4) == [1, 2]  # 4 itself is the last epoch
    assert PromotingHalving(brackets=0).brackets == 1
    assert [PromotingHalving(1, 3, brackets=3).bracket(c) for c in range(5)] == [0, 1, 2, 0, 1]


@pytest.mark.parametrize(("low", "high", "eta", "brackets"), [
    (1, 27, 3, 4), (1, 26, 3, 3), (2, 18, 3, 3), (1, 1, 3, 1), (5, 4, 3, 1), (1, 16, 2, 5),
])
def test_hyperband_bracket_count(low: int, high: int, eta: int, brackets: int) -> None:
    assert hyperband_brackets(low, high, eta) == brackets


@pytest.mark.parametrize("kwargs", [{"min_resource": 0}, {"reduction_factor": 1},
                                    {"min_early_stopping_rate": -1}])
def test_bad_options_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="min_resource >= 1, reduction_factor >= 2"):
        PromotingHalving(**kwargs)


def test_a_waiting_or_running_continuation_marks_its_parent_promoted() -> None:
    cont = {RESUME_OF_ATTR: 0, LINEAGE_ATTR: 0}
    assert continued_parents([_trial(1, TrialState.WAITING, **cont)]) == {0}
    assert continued_parents([_trial(1, TrialState.RUNNING, **cont)]) == {0}
    assert continued_parents([_trial(1, TrialState.FAIL, **cont)]) == set()
    assert continued_parents([_trial(1, TrialState.FAIL, **cont),
                              _trial(2, TrialState.FAIL, **cont)]) == {0}
    assert continued_parents([_trial(1, TrialState.COMPLETE, **{PAUSED_ATTR: 1})]) == set()


def test_a_lineage_missing_from_the_configuration_map_uses_its_own_number() -> None:
    pruner = PromotingHalving(1, 3, brackets=3)
    assert pruner._bracket_of(5, {}) == 2  # noqa: SLF001  (e.g. its first trial was deleted)
    assert pruner._bracket_of(5, {5: 1}) == 1  # noqa: SLF001
    assert PromotingHalving(1, 3)._bracket_of(5, {5: 1}) == 0  # noqa: SLF001  one bracket
