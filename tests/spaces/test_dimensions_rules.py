"""Dimensions' exact rules: each refusal word for word, the edges that are accepted, and what
Optuna is asked (name, bounds, log scale, step), read back from the trial's distributions."""

from __future__ import annotations

import re

import optuna
import pytest

from spaces import Categorical, Float, Int
from spaces._dimensions import Dimension

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: Float(low=float("-inf"), high=1.0),
            "low (-inf) and high (1.0) must be finite numbers",
        ),
        (
            lambda: Float(low=0.0, high=float("nan")),
            "low (0.0) and high (nan) must be finite numbers",
        ),
        (lambda: Int(low=3, high=2), "low (3) must be <= high (2)"),
        (lambda: Float(low=0.0, high=1.0, log=True), "log scale needs low > 0, got low=0.0"),
        (lambda: Float(low=-1.0, high=1.0, log=True), "log scale needs low > 0, got low=-1.0"),
        (
            lambda: Float(low=0.1, high=1.0, log=True, step=0.1),
            "step and log cannot be used together",
        ),
        (lambda: Int(low=1, high=8, log=True, step=2), "step and log cannot be used together"),
        (lambda: Float(low=0.0, high=1.0, step=0.0), "step must be > 0, got 0.0"),
        (lambda: Float(low=0.0, high=1.0, step=-0.5), "step must be > 0, got -0.5"),
        (lambda: Int(low=0, high=8, step=-2), "step must be > 0, got -2"),
        (lambda: Categorical(()), "choices must not be empty"),
        (lambda: Categorical(("a", "b", "a")), "choices must be distinct, got ['a', 'b', 'a']"),
    ],
)
def test_each_refusal_word_for_word(make, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        make()


@pytest.mark.parametrize(
    "dim",
    [
        Float(low=0.5, high=0.5),  # a single point
        Int(low=3, high=3),
        Float(low=1e-9, high=1.0, log=True),  # any positive low on a log scale
        Int(low=1, high=8, log=True),  # an int's default step 1 goes with log
        Float(low=-1.0, high=1.0, step=0.5),
        Int(low=0, high=8, step=2),
        Categorical((1, True, 1.0, "1", None)),  # distinct as values, not as equals
    ],
)
def test_the_edges_are_accepted(dim: Dimension) -> None:
    assert dim.values_to_check()


def _asked(dim: Dimension) -> tuple[object, optuna.distributions.BaseDistribution]:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    trial = study.ask()
    value = dim.suggest(trial, "x")
    assert trial.params == {"x": value}
    return value, trial.distributions["x"]


def test_float_asks_optuna_for_its_bounds_scale_and_step() -> None:
    _, dist = _asked(Float(low=1e-3, high=1e-1, log=True))
    assert dist == optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True)
    value, dist = _asked(Float(low=-1.0, high=1.0, step=0.5))
    assert dist == optuna.distributions.FloatDistribution(-1.0, 1.0, step=0.5)
    assert value in (-1.0, -0.5, 0.0, 0.5, 1.0)


def test_int_asks_optuna_for_its_bounds_scale_and_step() -> None:
    _, dist = _asked(Int(low=2, high=64, log=True))
    assert dist == optuna.distributions.IntDistribution(2, 64, log=True)
    value, dist = _asked(Int(low=3, high=11, step=4))
    assert dist == optuna.distributions.IntDistribution(3, 11, step=4)
    assert value in (3, 7, 11)


def test_categorical_asks_optuna_for_its_choices() -> None:
    value, dist = _asked(Categorical(("relu", "tanh", None)))
    assert dist == optuna.distributions.CategoricalDistribution(("relu", "tanh", None))
    assert value in ("relu", "tanh", None)


def test_values_to_check_are_the_edges_or_every_choice() -> None:
    assert Float(low=-2.5, high=4.0).values_to_check() == [-2.5, 4.0]
    assert Int(low=3, high=11, step=4).values_to_check() == [3, 11]
    assert Categorical(("a", None, 2)).values_to_check() == ["a", None, 2]
