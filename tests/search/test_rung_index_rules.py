"""The rung index's rules that the randomised comparison (test_rung_index.py) does not reach
(issue 33, the index's full mutant set): one pruner asked about several studies keeps one index
per study, not one shared; a lineage named after a trial that started no configuration is
placed as the scan places it; a running trial whose lineage or parent is rewritten is taken in
again; a lineage new to a rung is judged with its value in the count; an index that lost a key
says so (the pruner then reads every trial instead of answering wrong)."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from search.pruners._promotion import (
    LINEAGE_ATTR,
    PAUSED_ATTR,
    RESUME_OF_ATTR,
    PromotingHalving,
)
from search.pruners._rung_index import RungIndex, Unindexable, _remove

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def _pair(**kwargs: int) -> tuple[PromotingHalving, PromotingHalving]:
    options = {"min_resource": 1, "reduction_factor": 2, "max_resource": 8, **kwargs}
    return PromotingHalving(**options), PromotingHalving(**options, index=False)


def _promotable(pruner: PromotingHalving, study: optuna.Study) -> list[int]:
    return [t.number for t in pruner.promotable(study)]


def _agree(study: optuna.Study, indexed: PromotingHalving, plain: PromotingHalving) -> list[int]:
    want = _promotable(plain, study)
    assert _promotable(indexed, study) == want
    return want


def _paused(study: optuna.Study, value: float, epoch: int = 1, **attrs: int) -> optuna.Trial:
    trial = study.ask()
    for key, attr in attrs.items():
        trial.set_user_attr(key, attr)
    trial.report(value, epoch)
    trial.set_user_attr(PAUSED_ATTR, epoch)
    study.tell(trial, state=TrialState.PRUNED)
    return trial


@pytest.fixture(autouse=True)
def _quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)


def test_one_pruner_keeps_each_studys_rungs_apart() -> None:
    indexed, plain = _pair()
    shared = optuna.storages.InMemoryStorage()
    first = optuna.create_study(storage=shared, study_name="a", direction="maximize")
    second = optuna.create_study(storage=shared, study_name="b", direction="maximize")
    other = optuna.create_study(direction="maximize")  # another storage, the same direction
    for value in (0.9, 0.8):
        _paused(first, value)
    assert _agree(first, indexed, plain) == [0]  # the better of two at rung 1
    for value in (0.1, 0.2, 0.3, 0.4):
        _paused(second, value)
    # The second study's own top half (trials 3, 2), not the first study's trials 0 and 1.
    assert _agree(second, indexed, plain) == [3, 2]
    for value in (0.6, 0.1, 0.2, 0.3, 0.4, 0.5):
        _paused(other, value)
    assert _agree(other, indexed, plain) == [0, 5, 4]


def test_a_lineage_named_after_a_continuation_is_placed_as_the_scan_places_it() -> None:
    indexed, plain = _pair(brackets=3, max_resource=9)
    study = optuna.create_study(direction="maximize")
    _paused(study, 0.5)  # configuration 0
    _paused(study, 0.6, **{LINEAGE_ATTR: 0, RESUME_OF_ATTR: 0})  # continues lineage 0
    _paused(study, 0.7, **{LINEAGE_ATTR: 1})  # names trial 1, which started no configuration
    _paused(study, 0.4)
    _agree(study, indexed, plain)


def test_a_running_trial_whose_lineage_is_rewritten_is_taken_in_again() -> None:
    indexed, plain = _pair()
    study = optuna.create_study(direction="maximize")
    _paused(study, 0.5)
    running = study.ask()
    running.report(0.9, 1)
    _paused(study, 0.6)
    assert _agree(study, indexed, plain) == []  # the top one of three is lineage 1 (0.9)
    running.set_user_attr(LINEAGE_ATTR, 0)  # its value is now lineage 0's second one
    assert _agree(study, indexed, plain) == [2]  # the top one of lineages 0 (0.5) and 2 (0.6)


def test_a_running_continuation_that_names_another_parent_frees_the_first() -> None:
    indexed, plain = _pair()
    study = optuna.create_study(direction="maximize")
    _paused(study, 0.9)
    _paused(study, 0.1)
    continuation = study.ask({})
    continuation.set_user_attr(RESUME_OF_ATTR, 0)
    continuation.set_user_attr(LINEAGE_ATTR, 0)
    assert _agree(study, indexed, plain) == []  # trial 0 is promoted already
    continuation.set_user_attr(RESUME_OF_ATTR, 1)
    assert _agree(study, indexed, plain) == [0]  # no continuation of trial 0 any more


def test_a_lineage_new_to_a_rung_counts_itself_in_the_rung() -> None:
    pruner, _ = _pair()
    study = optuna.create_study(direction="maximize")
    for value in (0.9, 0.5, 0.3):
        _paused(study, value)
    pruner.promotable(study)
    index = pruner._index  # noqa: SLF001 - as prune asks it, for a lineage without a value
    assert isinstance(index, RungIndex)
    # four lineages with it: the top two are 0.9 and the newcomer's 0.6, not 0.4
    assert index.in_top(1, 0, 7, 0.6) and not index.in_top(1, 0, 7, 0.4)
    assert not index.in_top(2, 0, 7, 0.99)  # alone at a rung of eta 2: no top yet
    assert index.in_top(1, 0, 1, 0.95) and not index.in_top(1, 0, 0, 0.2)  # in its own place


def test_an_index_that_lost_a_key_says_so() -> None:
    keys = [(-0.9, 0.0, 0), (-0.5, 1.0, 1)]
    with pytest.raises(Unindexable, match="lost"):
        _remove(keys, (-0.7, 2.0, 2))
    with pytest.raises(Unindexable, match="lost"):
        _remove(keys, (-0.1, 3.0, 3))  # past the last key
    _remove(keys, (-0.5, 1.0, 1))
    assert keys == [(-0.9, 0.0, 0)]
