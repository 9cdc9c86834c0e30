"""The predictor strategy (search.strategies._predictor): a GP over the space's embedding proposes
unseen candidates, learns fast on a toy objective, resumes from storage, works without a genome,
takes a warm-start prior without creating trials, and believes its running trials."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import optuna
import pytest

import spaces
from search._errors import StudyError
from search.strategies import PredictorSampler, candidate_key
from search.strategies._registry import build_sampler
from search.strategies._surrogate import GaussianProcess, normal_scores, quantiles
from tests.search.test_strategies import SPACE, objective

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

SMALL = {"startup_trials": 5}
CELL = spaces.Space({"genome": spaces.CellFamily()})


@pytest.fixture(autouse=True)
def _quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def _study(seed: int, space: spaces.Space = SPACE, storage: Any = None, name: str | None = None,
           **options: Any) -> optuna.Study:
    sampler = build_sampler("predictor", SMALL | options, seed, space, ["maximize"])
    return optuna.create_study(sampler=sampler, direction="maximize", storage=storage,
                               study_name=name, load_if_exists=name is not None)


def _run(study: optuna.Study, trials: int, space: spaces.Space = SPACE,
         score: Any = objective) -> list[dict[str, Any]]:
    asked = []
    for _ in range(trials):
        trial = study.ask()
        params = space.suggest(trial)
        study.tell(trial, score(params))
        asked.append(dict(trial.params))
    return asked


def _convs(params: dict[str, Any]) -> float:
    return float(params["genome"].edges.count("nor_conv_3x3"))


def test_never_proposes_a_known_network() -> None:
    study = _study(0, CELL)
    _run(study, 30, CELL, _convs)  # the objective has few levels: the model favours a corner
    pending = [study.ask() for _ in range(8)]
    for t in pending:
        CELL.suggest(t)
    keys = [candidate_key(CELL, t.params) for t in study.trials]
    assert len(set(keys)) == len(keys) == 38


def test_beats_random_within_few_trials() -> None:
    # Defaults (10 random trials first), 40 trials in all, as the other strategies' test.
    def best(name: str, seed: int) -> float:
        study = optuna.create_study(
            sampler=build_sampler(name, {}, seed, SPACE, ["maximize"]), direction="maximize")
        _run(study, 40)
        return study.best_value

    mine = np.array([best("predictor", s) for s in range(6)])
    rand = np.array([best("random", 100 + s) for s in range(6)])
    margin = 2 * math.sqrt(mine.var(ddof=1) / 6 + rand.var(ddof=1) / 6)
    assert mine.mean() > rand.mean() + margin, (mine.mean(), rand.mean(), margin)


def test_same_seed_same_sequence() -> None:
    a, b = _run(_study(7), 12), _run(_study(7), 12)
    assert a == b
    assert _run(_study(8), 12) != a


def test_resume_continues_as_if_uninterrupted() -> None:
    expected = _run(_study(3), 24)
    storage = optuna.storages.InMemoryStorage()
    first = _study(3, storage=storage, name="s")
    got = _run(first, 12)
    second = _study(3, storage=storage, name="s")  # a new sampler: nothing cached
    assert second.sampler is not first.sampler
    got += _run(second, 12)
    assert got == expected


def test_flat_space_without_a_genome() -> None:
    space = spaces.Space({
        "lr": spaces.Float(low=1e-4, high=1.0, log=True),
        "width": spaces.Int(low=8, high=256, log=True),
        "act": spaces.Categorical(("relu", "tanh")),
    })

    def score(p: dict[str, Any]) -> float:
        return -abs(math.log10(p["lr"]) + 2) - abs(math.log2(p["width"]) - 6) - (p["act"] == "tanh")

    def best(name: str, seed: int) -> float:
        sampler = build_sampler(name, SMALL if name == "predictor" else {}, seed, space,
                                ["maximize"])
        study = optuna.create_study(sampler=sampler, direction="maximize")
        _run(study, 20, space, score)
        assert len({candidate_key(space, t.params) for t in study.trials}) == 20
        return study.best_value

    mine = np.mean([best("predictor", s) for s in range(4)])
    rand = np.mean([best("random", 100 + s) for s in range(4)])
    assert mine > rand + 0.3, (mine, rand)


def _prior(n: int = 60) -> list[tuple[dict[str, Any], float]]:
    """Source points whose score is the number of 3x3 convolutions (rank-normalised)."""
    family = spaces.CellFamily()
    rng = np.random.default_rng(5)
    params = [family.to_params(family.sample(rng), prefix="genome") for _ in range(n)]
    convs = np.array([_convs({"genome": family.from_params(p, prefix="genome")}) for p in params])
    return list(zip(params, quantiles(convs).tolist(), strict=True))


def test_a_prior_shapes_the_first_proposals_and_creates_no_trials() -> None:
    with_prior, without = _study(0, CELL), _study(0, CELL)
    with_prior.sampler.set_prior(_prior())  # type: ignore[attr-defined]
    assert with_prior.trials == []
    first = _run(with_prior, 5, CELL, _convs)
    plain = _run(without, 5, CELL, _convs)
    assert first != plain
    assert len(with_prior.trials) == 5  # the source points are not trials
    # Before any result of its own, the prior's favourites are proposed: 3x3 convolutions.
    def mean_convs(trials: list[dict[str, Any]]) -> float:
        return float(np.mean([_convs(CELL.suggest(optuna.trial.FixedTrial(p))) for p in trials]))

    assert mean_convs(first) >= 3.5 > mean_convs(plain), (mean_convs(first), mean_convs(plain))


def test_a_prior_that_ranks_the_study_backwards_is_dropped() -> None:
    sampler = PredictorSampler(space=CELL, startup_trials=5, seed=0)
    sampler.set_prior(_prior())
    x = sampler._embed.many([p for p, _ in _prior()])  # noqa: SLF001
    agree = normal_scores(np.array([s for _, s in _prior()]))
    assert sampler._relevance(x, agree) > 0.5  # noqa: SLF001
    assert sampler._relevance(x, -agree) == 0.0  # noqa: SLF001


def test_prior_scores_outside_0_1_are_refused() -> None:
    sampler = PredictorSampler(space=CELL, seed=0)
    with pytest.raises(ValueError, match=r"^prior\[1\]: score must be in \[0, 1\], got 1.5$"):
        sampler.set_prior([(_prior()[0][0], 0.5), (_prior()[1][0], 1.5)])


def test_running_trials_are_believed_at_their_predicted_mean() -> None:
    study = _study(1, CELL)
    _run(study, 12, CELL, _convs)
    pending = [study.ask() for _ in range(7)]
    for t in pending:
        CELL.suggest(t)
    sampler = study.sampler
    asker = study.ask()
    frozen = study._storage.get_trial(asker._trial_id)  # noqa: SLF001
    sampler.seen_keys(study, exclude=asker._trial_id)  # type: ignore[attr-defined]  # noqa: SLF001
    done = optuna.study.Study.get_trials(study, states=(optuna.trial.TrialState.COMPLETE,))
    gp, known, _ = sampler._model(study, frozen, done, None)  # type: ignore[attr-defined]  # noqa: SLF001
    assert len(known) == 12 and len(gp.x) == 12 + 7  # the 7 running trials are in the model
    xp = sampler._embed.many([t.params for t in pending]) * sampler._weights  # type: ignore[attr-defined]  # noqa: SLF001
    bare = GaussianProcess.fit(gp.x[:12], normal_scores(np.array([t.value for t in done])))
    assert (gp.predict(xp)[1] < 0.6 * bare.predict(xp)[1]).all()  # surer of them now
    # and the next proposal is none of them
    CELL.suggest(asker)
    keys = {candidate_key(CELL, t.params) for t in pending}
    assert candidate_key(CELL, asker.params) not in keys


def test_refuses_two_objectives_like_the_others() -> None:
    with pytest.raises(StudyError, match=r"^strategy: 'predictor' optimises one objective"):
        build_sampler("predictor", {}, 0, SPACE, ["maximize", "minimize"])


@pytest.mark.parametrize(("options", "message"), [
    ({"acquisition": "pi"}, r"^strategy\.acquisition: expected one of"),
    ({"candidates": 0}, r"^strategy\.candidates: must be >= 1, got 0$"),
    ({"beta": -1.0}, r"^strategy\.beta: must be >= 0, got -1.0$"),
    ({"embedding": "paths"}, r"^strategy\.embedding: unknown encoding 'paths'"),
])
def test_bad_options_are_one_line_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(StudyError, match=message):
        build_sampler("predictor", options, 0, SPACE, ["maximize"])


def test_quantiles_are_ranks_higher_is_better_ties_shared() -> None:
    np.testing.assert_allclose(quantiles(np.array([3.0, 1.0, 2.0, 2.0])),
                               [0.875, 0.125, 0.5, 0.5])


@pytest.mark.parametrize(("window", "fitted", "believed"), [(20, 20, 2), (0, 40, 6)])
def test_the_window_bounds_what_the_gp_is_fitted_on(
    monkeypatch: pytest.MonkeyPatch, window: int, fitted: int, believed: int
) -> None:
    """Cubic in its points, the GP is fitted on a window (best tenth + most recent) and believes
    at most window/10 running trials; ``window = 0`` fits every trial."""
    study = _study(3, CELL, window=window)
    _run(study, 40, CELL, _convs)
    for _ in range(6):
        CELL.suggest(study.ask())
    sizes: dict[str, int] = {}
    fit, with_points = GaussianProcess.fit, GaussianProcess.with_points

    def spy_fit(x: np.ndarray, *args: Any, **kwargs: Any) -> GaussianProcess:
        sizes["fit"] = len(x)
        return fit(x, *args, **kwargs)

    def spy_points(self: GaussianProcess, xp: np.ndarray, *args: Any) -> GaussianProcess:
        sizes["believed"] = len(xp)
        return with_points(self, xp, *args)

    monkeypatch.setattr(GaussianProcess, "fit", staticmethod(spy_fit))
    monkeypatch.setattr(GaussianProcess, "with_points", spy_points)
    CELL.suggest(study.ask())
    assert sizes == {"fit": fitted, "believed": believed}


def test_window_below_its_minimum_is_a_one_line_error() -> None:
    with pytest.raises(StudyError, match=r"^strategy\.window: must be >= 20"):
        build_sampler("predictor", {"window": 5}, 0, SPACE, ["maximize"])
