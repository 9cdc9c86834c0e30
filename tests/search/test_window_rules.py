"""The window's rules (issue 33): a windowed study answers as a study does, the best of a
minimized study are its lowest values, ties go to the oldest trial (as TPE's own split), the
best 0 or 1, a large Pareto front cut to half the window, and what ``fresh`` means."""

from __future__ import annotations

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from search.strategies._window import Window, WindowedStudy

DIST = {"x": FloatDistribution(0.0, 1.0)}


def _study(values: list[list[float] | None], directions: list[str]) -> optuna.Study:
    """One trial per entry: COMPLETE with those values, or RUNNING for None."""
    study = optuna.create_study(directions=directions)
    for v in values:
        state = TrialState.RUNNING if v is None else TrialState.COMPLETE
        study.add_trial(create_trial(params={"x": 0.5}, distributions=DIST, state=state,
                                     values=v))
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
