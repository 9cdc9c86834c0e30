"""The window's rules (issue 33): a windowed study answers as a study does, the best of a
minimized study are its lowest values, ties go to the oldest trial (as TPE's own split), the
best 0 or 1, the Pareto front (weak dominance, a large front cut to half the window), what
``fresh`` means, and the incremental grouped search space against Optuna's."""

from __future__ import annotations

from typing import Any

import numpy as np
import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.search_space.group_decomposed import _GroupDecomposedSearchSpace
from optuna.storages import InMemoryStorage
from optuna.trial import FrozenTrial, TrialState, create_trial

from search.strategies._window import IncrementalGroupSpace, Window, WindowedStudy

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

DIST = {"x": FloatDistribution(0.0, 1.0)}


def _study(values: list[list[float] | None], directions: list[str]) -> optuna.Study:
    """One trial per entry: COMPLETE with those values, or RUNNING for None."""
    study = optuna.create_study(directions=directions)
    for v in values:
        state = TrialState.RUNNING if v is None else TrialState.COMPLETE
        study.add_trial(create_trial(params={"x": 0.5}, distributions=DIST, state=state, values=v))
    return study


def _numbers(trials: list[FrozenTrial]) -> list[int]:
    return [t.number for t in trials]


def test_a_windowed_study_answers_as_a_study_copies_by_default_and_filters_by_state() -> None:
    study = _study([[1.0], None, [2.0]], ["maximize"])
    trials = study.get_trials(deepcopy=False)
    windowed = WindowedStudy(study, trials)
    for got in (windowed.get_trials(), windowed._get_trials()):
        assert _numbers(got) == [0, 1, 2]
        got[0].user_attrs["changed"] = True  # a copy: the study's trial stays as it was
        assert "changed" not in trials[0].user_attrs
    complete = (TrialState.COMPLETE,)
    assert _numbers(windowed.get_trials(states=complete)) == [0, 2]
    assert _numbers(windowed.get_trials(deepcopy=False, states=(TrialState.RUNNING,))) == [1]
    assert _numbers(windowed._get_trials(deepcopy=False, states=complete)) == [0, 2]
    assert windowed.directions == study.directions  # the rest is the study's


def test_the_best_of_a_minimized_study_are_its_lowest_values() -> None:
    values = [float(v) for v in np.random.default_rng(0).permutation(40)]
    study = _study([[v] for v in values], ["minimize"])
    picked = Window().pick(study, study.trials, size=10, best=4)
    lowest = sorted(range(40), key=lambda n: values[n])[:4]
    recent = [n for n in range(39, -1, -1) if n not in lowest][:6]
    assert _numbers(picked) == sorted(lowest + recent)


def test_ties_go_to_the_oldest_trial_as_in_tpes_own_split() -> None:
    # 30 equal values: TPE's sort is stable, so its good set is the oldest trials.
    study = _study([[1.0]] * 30, ["maximize"])
    picked = Window().pick(study, study.trials, size=10, best=3)
    assert _numbers(picked) == [0, 1, 2, *range(23, 30)]


def test_the_best_zero_or_one_and_the_most_recent_others() -> None:
    values = [[float(v)] for v in (5, 9, 1, 7, 3, 8, 2, 6, 4, 0, 1, 2)]
    study = _study(values, ["maximize"])
    assert _numbers(Window().pick(study, study.trials, size=4, best=0)) == [8, 9, 10, 11]
    assert _numbers(Window().pick(study, study.trials, size=4, best=1)) == [1, 9, 10, 11]
    kept = Window()  # kept across calls, the best of one grows as trials come
    for n in range(5, 13):
        got = kept.pick(study, study.trials[:n], size=4, best=1)
        assert got[0].number == 1 and _numbers(got[1:]) == list(range(n - 3, n))


def test_a_large_pareto_front_keeps_its_newest_half_window_then_the_most_recent() -> None:
    # Trials 0-29 all on the front (one objective traded against the other), 30-59 dominated.
    front = [[float(i), float(29 - i)] for i in range(30)]
    worse = [[-1.0 - i, -1.0 - i] for i in range(30)]
    study = _study(front + worse, ["maximize", "maximize"])
    picked = Window().pick(study, study.trials, size=20, best=0)
    assert _numbers(picked) == [*range(20, 30), *range(50, 60)]


def test_the_first_look_takes_every_trial_later_ones_only_those_named_fresh() -> None:
    rng = np.random.default_rng(1)
    for directions in (["maximize"], ["maximize", "minimize"]):
        values = [list(rng.normal(size=len(directions))) for _ in range(40)]
        study = _study(values, directions)
        trials = study.trials
        kept = Window()
        first = kept.pick(study, trials, size=10, best=3, fresh=trials[-5:])
        assert first == Window().pick(study, trials, size=10, best=3)  # all looked at
    # Trial 3 finishes late with the best value: looked at when named fresh, once.
    study = _study([[float(v)] for v in range(40)], ["maximize"])
    trials = study.trials
    late = create_trial(params={"x": 0.5}, distributions=DIST, value=100.0)
    late.number = 3
    with_late = [*trials[:3], late, *trials[4:]]
    for fresh, expected in (([], False), ([late], True)):
        kept = Window()
        kept.pick(study, [t for t in trials if t.number != 3], size=10, best=3)
        got = kept.pick(study, with_late, size=10, best=3, fresh=fresh)
        assert (3 in _numbers(got)) is expected


def test_the_front_drops_a_weakly_dominated_point_and_keeps_an_equal_one_once() -> None:
    # 1 ties 0 on the second objective and beats it on the first; 2 equals 1; 3 ties 1 on the
    # first and is worse on the second. The front is trial 1 alone; 20 dominated trials follow.
    points = [[1.0, 1.0], [2.0, 1.0], [2.0, 1.0], [2.0, 0.5]] + [[-10.0, -10.0]] * 20
    study = _study(points, ["maximize", "maximize"])
    picked = _numbers(Window().pick(study, study.trials, size=10, best=0))
    assert picked == [1, *range(15, 24)]


def _grouped(include_pruned: bool | None) -> tuple[optuna.Study, list[list[str]]]:
    """A study whose pruned trials hold a name no complete one has, and Optuna's groups."""
    study = optuna.create_study()
    x, y = FloatDistribution(0.0, 1.0), FloatDistribution(0.0, 1.0)
    for i in range(3):
        study.add_trial(create_trial(params={"x": 0.5}, distributions={"x": x}, value=float(i)))
        study.add_trial(
            create_trial(
                params={"x": 0.5, "y": 0.5}, distributions={"x": x, "y": y}, state=TrialState.PRUNED
            )
        )
    theirs = (
        _GroupDecomposedSearchSpace()
        if include_pruned is None
        else _GroupDecomposedSearchSpace(include_pruned)
    )
    return study, [sorted(g) for g in theirs.calculate(study).search_spaces]


@pytest.mark.parametrize("include_pruned", [None, False, True])
def test_the_grouped_space_counts_pruned_trials_as_optunas_does(
    include_pruned: bool | None,
) -> None:
    study, expected = _grouped(include_pruned)
    ours = (
        IncrementalGroupSpace() if include_pruned is None else IncrementalGroupSpace(include_pruned)
    )
    assert [sorted(g) for g in ours.calculate(study).search_spaces] == expected
    assert (["y"] in expected) is bool(include_pruned)


def test_the_grouped_space_is_each_studys_read_once_per_ask_and_returns_a_copy() -> None:
    reads: list[Any] = []

    class Counting(InMemoryStorage):
        def get_all_trials(
            self, study_id: int, deepcopy: bool = True, states: Any = None
        ) -> list[FrozenTrial]:
            reads.append(states)
            return super().get_all_trials(study_id, deepcopy=deepcopy, states=states)

    storage = Counting()
    study, other = (optuna.create_study(storage=storage) for _ in range(2))
    study.add_trial(create_trial(params={"x": 0.5}, distributions=DIST, value=0.0))
    ours = IncrementalGroupSpace(True)
    study._thread_local.cached_all_trials = None  # as ask() leaves it
    reads.clear()
    first = ours.calculate(study, use_cache=True)
    ours.calculate(study, use_cache=True)
    assert len(reads) == 1  # the ask's snapshot, shared with Optuna's own reads
    first.search_spaces[0].clear()  # the caller's copy: the space's own groups stay whole
    assert [sorted(g) for g in ours.calculate(study).search_spaces] == [["x"]]
    # another study, of this storage or of another in-memory one (whose first study has this
    # study's id too): its own groups, and this study's stay as they were
    elsewhere = optuna.create_study()
    assert study._study_id == elsewhere._study_id
    other.add_trial(create_trial(params={"y": 0.5}, distributions={"y": DIST["x"]}, value=0.0))
    elsewhere.add_trial(create_trial(params={"z": 1}, distributions={"z": IntDistribution(0, 3)},
                                     value=0.0))
    assert [sorted(g) for g in ours.calculate(other).search_spaces] == [["y"]]
    assert [sorted(g) for g in ours.calculate(elsewhere).search_spaces] == [["z"]]
    assert [sorted(g) for g in ours.calculate(study).search_spaces] == [["x"]]
