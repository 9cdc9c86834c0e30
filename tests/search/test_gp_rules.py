"""The GP's window (issue 33): which trials Optuna's GP is given -- the best tenth of the whole
study and the most recent others, ``window`` in all, and the ``window // 10`` most recent
running ones -- per study, in either direction; the smallest window."""

from __future__ import annotations

from typing import Any

import numpy as np
import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.samplers import GPSampler
from optuna.storages import InMemoryStorage
from optuna.trial import FrozenTrial, TrialState, create_trial

from search.strategies._gp import WindowedGPSampler

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

DIST = {"x": FloatDistribution(0.0, 1.0)}


def _study(
    values: list[float], running: int, *, direction: str = "maximize", storage: Any = None
) -> optuna.Study:
    study = optuna.create_study(direction=direction, storage=storage)
    for v in values:
        study.add_trial(create_trial(params={"x": 0.5}, distributions=DIST, value=v))
    for _ in range(running):
        study.add_trial(
            create_trial(params={"x": 0.5}, distributions=DIST, state=TrialState.RUNNING)
        )
    return study


@pytest.fixture
def given(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """The trial numbers Optuna's GP (the parent class) is given, instead of fitting it."""
    got: dict[str, list[int]] = {}

    def fit(
        self: GPSampler,
        study: optuna.Study,
        completed: list[FrozenTrial],
        running: list[FrozenTrial],
        search_space: dict[str, Any],
    ) -> dict[str, Any]:
        got["complete"] = [t.number for t in completed]
        got["running"] = [t.number for t in running]
        return {}

    monkeypatch.setattr(GPSampler, "_sample_relative_impl", fit)
    return got


def _ask(sampler: WindowedGPSampler, study: optuna.Study) -> None:
    trials = study.get_trials(deepcopy=False)
    sampler._sample_relative_impl(
        study,
        [t for t in trials if t.state == TrialState.COMPLETE],
        [t for t in trials if t.state == TrialState.RUNNING],
        DIST,
    )


def test_a_window_below_20_is_refused_with_its_value() -> None:
    with pytest.raises(
        ValueError,
        match=r"^window: must be >= 20 \(or 0 for every trial\), "
        r"got 19$",
    ):
        WindowedGPSampler(window=19)


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_the_gp_is_given_the_best_tenth_the_most_recent_others_and_running_ones(
    direction: str, given: dict[str, list[int]]
) -> None:
    values = [float(v) for v in np.random.default_rng(0).permutation(60)]
    study = _study(values, 15, direction=direction)
    _ask(WindowedGPSampler(window=20, seed=0), study)  # the smallest window
    order = sorted(range(60), key=lambda n: values[n], reverse=direction == "maximize")
    best = order[:2]
    recent = [n for n in range(59, -1, -1) if n not in best][:18]
    assert given["complete"] == sorted(best + recent)
    assert given["running"] == [73, 74]  # the two most recently asked of 15
    for whole in (None, 0):  # every trial, as Optuna's GP
        _ask(WindowedGPSampler(window=whole, seed=0), study)
        assert given["complete"] == list(range(60)) and len(given["running"]) == 15


def test_one_sampler_keeps_a_window_per_study(given: dict[str, list[int]]) -> None:
    storage = InMemoryStorage()  # one storage: the studies' ids differ
    first = _study([10.0 if n in (3, 4, 5) else 0.0 for n in range(40)], 0, storage=storage)
    second = _study([10.0 if n < 3 else 0.0 for n in range(40)], 0, storage=storage)
    sampler = WindowedGPSampler(window=30, seed=0)
    _ask(sampler, first)
    assert given["complete"] == [3, 4, 5, *range(13, 40)]
    _ask(sampler, second)
    assert given["complete"] == [0, 1, 2, *range(13, 40)]  # its own best, not the first's


def _proposals(values: list[float], direction: str) -> list[float]:
    """The next three x a seeded GP proposes after trials at x = 0, 0.1, ..., with ``values``."""
    study = optuna.create_study(direction=direction,
                                sampler=WindowedGPSampler(seed=3, n_startup_trials=2))
    for i, v in enumerate(values):
        study.add_trial(create_trial(params={"x": i / 10}, distributions=DIST, value=v))
    out = []
    for _ in range(3):
        trial = study.ask(DIST)
        out.append(trial.params["x"])
        study.tell(trial, (trial.params["x"] - 0.35) ** 2 * (1 if direction == "minimize" else -1))
    return out


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_one_diverged_value_weighs_no_more_than_the_worst_ordinary_one(direction: str) -> None:
    sign = 1.0 if direction == "minimize" else -1.0
    values = [sign * (i / 10 - 0.35) ** 2 for i in range(8)]
    diverged = [*values[:3], sign * 1e6, *values[4:]]  # the fourth trial's loss blew up
    # the same rank: worse than any (x - 0.35)^2 the search can see, but no outlier
    merely_worst = [*values[:3], sign * 0.5, *values[4:]]
    assert _proposals(diverged, direction) == _proposals(merely_worst, direction)
    assert _proposals(values, direction) != _proposals(merely_worst, direction)  # it did read it
