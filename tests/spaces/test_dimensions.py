"""Dimensions validate at construction and sample through Optuna (define-by-run)."""

from __future__ import annotations

import optuna
import pytest

from spaces import Categorical, Float, Int, Space

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Float(low=1.0, high=0.1), r"low \(1.0\) must be <= high \(0.1\)"),
        (lambda: Float(low=0.0, high=1.0, log=True), "log scale needs low > 0"),
        (lambda: Int(low=-1, high=8, log=True), "log scale needs low > 0"),
        (lambda: Float(low=0.0, high=float("inf")), "must be finite"),
        (lambda: Float(low=0.1, high=1.0, log=True, step=0.1), "step and log"),
        (lambda: Int(low=1, high=8, step=0), "step must be > 0"),
        (lambda: Categorical(()), "must not be empty"),
        (lambda: Categorical(("a", "a")), "distinct"),
    ],
)
def test_invalid_dimensions_say_what_is_wrong(make, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_space_samples_every_dimension_within_bounds() -> None:
    space = Space({
        "lr": Float(low=1e-4, high=1e-1, log=True),
        "width": Int(low=8, high=64, step=8),
        "act": Categorical(("relu", "tanh")),
    })
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(30):
        trial = study.ask()
        params = space.suggest(trial)
        assert list(params) == ["lr", "width", "act"]
        assert 1e-4 <= params["lr"] <= 1e-1
        assert params["width"] % 8 == 0 and 8 <= params["width"] <= 64
        seen.add(params["act"])
        assert trial.params == params  # reconstructible from trial.params alone
        study.tell(trial, params["lr"])
    assert seen == {"relu", "tanh"}
    assert isinstance(study.trials[0].distributions["lr"], optuna.distributions.FloatDistribution)
    assert study.trials[0].distributions["lr"].log
