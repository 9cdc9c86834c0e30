"""What keeps a proposal's cost bounded as a study grows (issue 18): TPE's and GP's window of
trials, Optuna's grouped search space kept incrementally, the seen-candidate keys and the
evolution population kept incrementally. Each test compares with the full computation."""

from __future__ import annotations

import warnings

import numpy as np
import optuna
import pytest
from optuna.search_space.group_decomposed import _GroupDecomposedSearchSpace
from optuna.trial import TrialState

import spaces
from search._errors import StudyError
from search.strategies._base import (
    CompleteSoFar,
    KeyCache,
    LatestComplete,
    candidate_key,
    complete_in_order,
    draw,
    seen_keys,
    uniform_choice,
)
from search.strategies._registry import build_sampler
from search.strategies._window import IncrementalGroupSpace, Window
from search.studyfile._study_file import parse_study

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

FLAT = spaces.Space({
    "lr": spaces.Float(low=1e-5, high=1.0, log=True),
    "width": spaces.Int(low=8, high=512),
    "act": spaces.Categorical(("relu", "tanh", "gelu")),
})
CELL = spaces.Space({"genome": spaces.CellFamily()})


def filled(space: spaces.Space, n: int, *, directions: int = 1, seed: int = 0,
           running: int = 0, running_first: bool = False) -> optuna.Study:
    """A study holding ``n`` COMPLETE trials (random values) and ``running`` RUNNING ones
    (after them, or with the lowest numbers)."""
    rng = np.random.default_rng(seed)
    study = optuna.create_study(directions=["maximize"] * directions)
    parts = [(TrialState.COMPLETE, n), (TrialState.RUNNING, running)]
    for state, count in parts[::-1] if running_first else parts:
        for _ in range(count):
            rec = draw(space, uniform_choice, rng)
            values = list(rng.normal(size=directions)) if state == TrialState.COMPLETE else None
            study.add_trial(optuna.trial.create_trial(
                params=rec.params, distributions=rec.distributions, state=state, values=values))
    return study


def test_tpe_window_keeps_the_good_trials_of_the_whole_study() -> None:
    """With a window of 100 on 600 trials, TPE's "good" set (the best 25: Optuna's gamma) is
    the same as without the window; the rest of the window is the most recent trials."""
    study = filled(FLAT, 600)
    sampler = build_sampler("tpe", {"window": 100}, 0, FLAT, ["maximize"])
    windowed = sampler._windowed(study)
    trials = windowed._get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    assert len(trials) == 100
    everything = study.get_trials(deepcopy=False)
    best = sorted(everything, key=lambda t: t.value, reverse=True)[:25]
    top = {t.number for t in best}
    recent = [t.number for t in reversed(everything) if t.number not in top][:75]
    assert [t.number for t in trials] == sorted(top | set(recent))
    below, _ = optuna.samplers._tpe.sampler._split_trials(windowed, trials, 25)
    full_below, _ = optuna.samplers._tpe.sampler._split_trials(study, everything, 25)
    assert [t.number for t in below] == [t.number for t in full_below]
    # Still proposes, and no more trials than the window reach the Parzen estimator.
    trial = study.ask()
    FLAT.suggest(trial)
    assert build_sampler("tpe", {}, 0, FLAT, ["maximize"])._windowed(study) is study  # 1,000


def test_tpe_window_lies_about_the_most_recent_running_trials_only() -> None:
    """With the constant liar, the window holds ``window`` finished trials and at most
    ``window // 10`` running ones, the most recently asked: 1,024 running trials do not crowd
    the results out of TPE's "bad" set."""
    study = filled(FLAT, 120, running=40)
    sampler = build_sampler("tpe", {"window": 100, "constant_liar": True}, 0, FLAT, ["maximize"])
    windowed = sampler._windowed(study)
    finished = windowed._get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    running = windowed._get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    assert len(finished) == 100
    assert [t.number for t in running] == list(range(150, 160))
    assert build_sampler("tpe", {"window": 100, "constant_liar": False}, 0, FLAT,
                         ["maximize"])._windowed(study)._get_trials(
        deepcopy=False, states=(TrialState.RUNNING,)) == []


def test_window_of_several_objectives_keeps_the_pareto_front() -> None:
    study = filled(FLAT, 400, directions=2)
    trials = study.get_trials(deepcopy=False)
    picked = Window().pick(study, trials, size=80, best=0)
    front = {t.number for t in study.best_trials}
    assert len(picked) == 80 and front <= {t.number for t in picked}


def test_window_is_incremental_and_matches_a_fresh_one() -> None:
    """Kept across asks (each trial looked at once), the window equals one built from scratch,
    also when an older trial finishes after newer ones."""
    study = filled(FLAT, 300, running=5, running_first=True)  # they finish last, best
    kept = Window()
    for step in range(4):
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if running:
            study.tell(running[0].number, float(10 + step))  # old number, best value
        trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        got = kept.pick(study, trials, size=60, best=10)
        fresh = Window().pick(study, trials, size=60, best=10)
        assert [t.number for t in got] == [t.number for t in fresh]
        assert running[0].number in {t.number for t in got}


def test_incremental_group_space_gives_optunas_groups_in_optunas_order() -> None:
    rng = np.random.default_rng(1)
    names = [f"x{i}" for i in range(7)]
    study = optuna.create_study()
    ours, theirs = IncrementalGroupSpace(True), _GroupDecomposedSearchSpace(True)
    for _ in range(40):
        picked = [n for n in names if rng.random() < 0.5] or names[:1]
        dists = {n: optuna.distributions.FloatDistribution(0, 1) for n in picked}
        study.add_trial(optuna.trial.create_trial(
            params={n: 0.5 for n in picked}, distributions=dists, value=0.0))
        a = ours.calculate(study).search_spaces
        b = theirs.calculate(study).search_spaces
        assert [sorted(g) for g in a] == [sorted(g) for g in b]
    assert len(b) > 2  # the names did split into several groups


def _recount_params(t: optuna.trial.FrozenTrial) -> dict:
    """A trial's parameters, a WAITING (enqueued) one's from Optuna's ``fixed_params`` (its
    ``params`` stay empty until it is asked)."""
    if t.state == TrialState.WAITING:
        return dict(t.system_attrs["fixed_params"])
    return t.params


def test_seen_keys_incremental_equals_a_full_recount() -> None:
    """Running trials that complete, fail or stay running, and enqueued (WAITING) ones: the
    kept keys equal a recount."""
    study = filled(CELL, 50, running=30)
    cache = KeyCache()

    def key(params: dict) -> tuple | None:
        return candidate_key(CELL, params)

    rng = np.random.default_rng(2)
    waiting = []
    for _ in range(5):
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            u = rng.random()
            if u < 0.2:
                study.tell(t.number, float(u))
            elif u < 0.4:
                study.tell(t.number, state=TrialState.FAIL)
        rec = draw(CELL, uniform_choice, rng)  # a candidate queued for later (warm start, retry)
        study.enqueue_trial(rec.params)
        waiting.append(key(rec.params))
        study._thread_local.cached_all_trials = None  # as ask() does before a proposal
        got = seen_keys(study, -1, cache, key)
        recount = {
            key(_recount_params(t)) for t in study.get_trials(deepcopy=False)
            if t.state != TrialState.FAIL
        }
        assert got == recount - {None}
        assert set(waiting) <= got  # the blind spot of issue 28: a waiting one proposed again
    failed = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.FAIL]
    assert failed and any(key(t.params) not in got for t in failed)


def test_latest_complete_is_the_tail_of_complete_in_order() -> None:
    """Trials that finish out of number order: the population is by finishing time."""
    study = filled(FLAT, 0, running=40)
    latest = LatestComplete(7)
    rng = np.random.default_rng(3)
    order = rng.permutation(40)
    for k, number in enumerate(order):
        study.tell(int(number), float(rng.normal()))
        if k % 5 == 0:
            expected = [t.number for t in complete_in_order(study)[-7:]]
            assert [t.number for t in latest(study)] == expected
    got = [t.number for t in latest(study)]
    assert got == [t.number for t in complete_in_order(study)[-7:]]
    assert got != list(range(33, 40))  # not simply the highest numbers


def test_complete_so_far_equals_complete_in_order_and_feeds_the_window() -> None:
    """Trials that finish out of number order, some failing, some with a key the filter
    drops: the kept lists equal a full recount each time, the fresh ones are exactly the new
    ones, and a window fed only the fresh trials picks what a window shown all of them does."""
    study = filled(FLAT, 30, running=120, running_first=True)
    odd_width = lambda _study, t: t.params["width"] % 2 == 1  # noqa: E731
    kept = CompleteSoFar(odd_width)
    by_fresh, by_all = Window(), Window()
    rng = np.random.default_rng(4)
    order = [int(n) for n in rng.permutation(120)]
    before: set[int] = set()
    for start in range(0, 120, 9):
        for number in order[start:start + 9]:
            if rng.random() < 0.15:
                study.tell(number, state=TrialState.FAIL)
            else:
                study.tell(number, float(rng.normal()))
        in_finish_order, in_number_order, fresh = kept(study)
        expected = [t for t in complete_in_order(study) if odd_width(study, t)]
        assert [t.number for t in in_finish_order] == [t.number for t in expected]
        assert [t.number for t in in_number_order] == sorted(t.number for t in expected)
        assert {t.number for t in fresh} == {t.number for t in expected} - before
        before = {t.number for t in expected}
        got = by_fresh.pick(study, in_number_order, size=20, best=4, fresh=fresh)
        full = by_all.pick(study, in_number_order, size=20, best=4)
        assert [t.number for t in got] == [t.number for t in full]
    assert [t.number for t in in_finish_order] != sorted(before)  # out of number order indeed
    assert len(before) > 20  # the window was active


def test_gp_window_fits_at_most_window_trials() -> None:
    study = filled(FLAT, 60, running=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sampler = build_sampler("gp", {"window": 30, "startup_trials": 5}, 0, FLAT, ["maximize"])
        study.sampler = sampler
        trial = study.ask()
        FLAT.suggest(trial)
    assert sampler._gprs_cache_list[0]._X_train.shape[0] == 30
    whole = build_sampler("gp", {"window": 0, "startup_trials": 5}, 0, FLAT, ["maximize"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study.sampler = whole
        FLAT.suggest(study.ask())
    assert whole._gprs_cache_list[0]._X_train.shape[0] == 60


def _study(strategy: dict) -> dict:
    return {"name": "w", "objective": "nb201:cifar10", "metric": "val_accuracy",
            "strategy": strategy, "space": {"genome": {"family": "cell"}}}


@pytest.mark.parametrize("name", ["tpe", "gp"])
def test_window_is_a_study_file_option_of_tpe_and_gp(name: str) -> None:
    assert parse_study(_study({"name": name, "window": 0})).strategy.window == 0
    with pytest.raises(StudyError, match="strategy.window"):
        build_sampler(name, {"window": 3}, 0, FLAT, ["maximize"])


def test_window_is_not_an_evolution_option() -> None:
    with pytest.raises(StudyError, match="strategy.window.*not an option"):
        parse_study(_study({"name": "evolution", "window": 100}))
