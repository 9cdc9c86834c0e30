"""The predictor strategy's exact rules (search.strategies._predictor), in process and small: its
options, the units of the embedding and their weights, the start-up draws, the direction, what
the model is fitted on (own results, a warm-start prior with its noise and relevance), which
candidates the acquisition weighs, and the best a proposal is measured against."""

from __future__ import annotations

from typing import Any

import numpy as np
import optuna
import pytest

import spaces
from search.strategies import PredictorSampler, candidate_key
from search.strategies._base import draw, uniform_choice
from search.strategies._predictor import _unit_of, unit_weights
from search.strategies._surrogate import GaussianProcess, normal_scores, probit

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

FLAT = spaces.Space(
    {
        "x": spaces.Int(low=0, high=60),
        "act": spaces.Categorical(("relu", "tanh", "gelu")),
    }
)


@pytest.fixture(autouse=True)
def _quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def _score(p: dict[str, Any]) -> float:
    return -abs(p["x"] - 37) - 5.0 * (p["act"] != "tanh")


def _run(
    study: optuna.Study, n: int, space: spaces.Space = FLAT, score: Any = _score, sign: float = 1.0
) -> list[dict[str, Any]]:
    out = []
    for _ in range(n):
        trial = study.ask()
        params = space.suggest(trial)
        study.tell(trial, sign * score(params))
        out.append(dict(trial.params))
    return out


def _study(direction: str = "maximize", space: spaces.Space = FLAT, **options: Any) -> optuna.Study:
    sampler = PredictorSampler(space=space, **{"startup_trials": 4, "seed": 0, **options})
    return optuna.create_study(sampler=sampler, direction=direction)


# -- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"window": 19}, r"^window: must be >= 20 \(or 0 for every trial\), got 19$"),
        ({"startup_trials": 0}, r"^startup_trials: must be >= 1, got 0$"),
        ({"candidates": 0}, r"^candidates: must be >= 1, got 0$"),
        ({"parents": 0}, r"^parents: must be >= 1, got 0$"),
        (
            {"acquisition": "pi"},
            r"^acquisition: expected one of \['ei', 'thompson', 'ucb'\], got 'pi'$",
        ),
        ({"beta": -0.5}, r"^beta: must be >= 0, got -0.5$"),
        ({"embedding": "paths"}, r"^embedding: unknown encoding 'paths'"),
    ],
)
def test_bad_options_are_one_line_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PredictorSampler(space=FLAT, **options)


def test_window_0_is_every_trial_as_its_error_says() -> None:
    every, none = PredictorSampler(space=FLAT, window=0), PredictorSampler(space=FLAT, window=None)
    assert every._window is None and none._window is None  # noqa: SLF001


def test_the_edges_of_the_options_are_accepted() -> None:
    study = _study(
        window=20, startup_trials=1, candidates=1, parents=1, beta=0.0, acquisition="ucb"
    )
    asked = _run(study, 3)
    assert len({candidate_key(FLAT, p) for p in asked}) == 3
    PredictorSampler(space=FLAT, window=None)


# -- units and their weights -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("feature", "genome", "unit"),
    [
        ("lr:absent", "genome", "lr"),
        ("act=relu", "genome", "act"),
        ("genome.path=a>b", "genome", "genome"),
        ("arch.wl:3=x", "arch", "arch"),
        ("genomex", "genome", "genomex"),
        ("genome.path=a", None, "genome.path"),
        ("k", None, "k"),
    ],
)
def test_each_feature_belongs_to_its_dimension(feature: str, genome: str | None, unit: str) -> None:
    assert _unit_of(feature, genome) == unit


def test_unit_weights_give_every_dimension_the_same_spread() -> None:
    space = spaces.Space(
        {
            "genome": spaces.CellFamily(),
            "lr": spaces.Float(low=1e-4, high=1.0, log=True),
            "act": spaces.Categorical(("relu", "tanh", "gelu")),
            "one": spaces.Categorical(("only",)),
            "k": spaces.Int(low=1, high=9),
        }
    )
    embed = spaces.SpaceEmbedding(space, kind="path+wl")
    weights = unit_weights(space, embed)
    units = [_unit_of(n, embed.genome_name) for n in embed.names]
    rng = np.random.default_rng(123)  # draws the weights were not estimated from
    x = embed.many([draw(space, uniform_choice, rng).params for _ in range(600)]) * weights
    sq = (x[::2] - x[1::2]) ** 2
    spread = {
        u: float(sq[:, [i for i, v in enumerate(units) if v == u]].sum(axis=1).mean())
        for u in dict.fromkeys(units)
    }
    assert spread.pop("one") == 0.0  # a constant: nothing to spread, its weight stays 1
    assert weights[list(embed.names).index("one=only")] == 1.0
    assert all(0.6 < s < 1.5 for s in spread.values()), spread
    raw = embed.many([draw(space, uniform_choice, rng).params for _ in range(600)])
    raw_sq = (raw[::2] - raw[1::2]) ** 2
    genome_cols = [i for i, v in enumerate(units) if v == "genome"]
    assert raw_sq[:, genome_cols].sum(axis=1).mean() > 10  # unweighted, the genome drowns lr
    # the same in every process, whatever the sampler's seed
    np.testing.assert_array_equal(
        PredictorSampler(space=space, seed=1)._weights,  # noqa: SLF001
        weights,
    )


# -- start-up, direction, best ---------------------------------------------------------------


def test_uniform_draws_until_startup_trials_are_complete() -> None:
    early = _run(_study(startup_trials=4), 5)
    late = _run(_study(startup_trials=50), 5)
    assert early[:4] == late[:4]  # the same seed: the same uniform draws
    assert early[4] != late[4]  # the fifth comes from the model


def test_a_failed_trial_does_not_count_toward_startup() -> None:
    study = _study(startup_trials=3)
    _run(study, 2)
    trial = study.ask()
    FLAT.suggest(trial)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    plain = _study(startup_trials=50)
    _run(plain, 2)
    trial = plain.ask()
    FLAT.suggest(trial)
    plain.tell(trial, state=optuna.trial.TrialState.FAIL)
    assert _run(study, 1) == _run(plain, 1)  # still two complete: a uniform draw


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_it_climbs_in_either_direction(direction: str) -> None:
    sign = 1.0 if direction == "maximize" else -1.0
    study = _study(direction, startup_trials=4)
    asked = _run(study, 14, sign=sign)
    late = [_score(p) for p in asked[8:]]
    assert max(late) >= -3.0, asked
    assert np.mean(late) > np.mean([_score(p) for p in asked[:4]]) + 5.0


def _spy_fit(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    fit = GaussianProcess.fit

    def spy(
        x: np.ndarray, y: np.ndarray, extra_noise: Any = None, groups: Any = None
    ) -> GaussianProcess:
        calls.append({"x": np.array(x), "y": np.array(y), "extra": extra_noise, "groups": groups})
        return fit(x, y, extra_noise, groups)

    monkeypatch.setattr(GaussianProcess, "fit", staticmethod(spy))
    return calls


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_the_model_is_fitted_on_normal_scores_of_own_results(
    monkeypatch: pytest.MonkeyPatch, direction: str
) -> None:
    sign = 1.0 if direction == "maximize" else -1.0
    study = _study(direction)
    _run(study, 6, sign=sign)
    calls = _spy_fit(monkeypatch)
    _run(study, 1, sign=sign)
    (call,) = calls
    scores = [_score(t.params) for t in study.trials[:6]]
    np.testing.assert_allclose(call["y"], normal_scores(np.array(scores)))  # higher: better
    np.testing.assert_array_equal(call["extra"], np.zeros(6))
    sampler = study.sampler
    expected = sampler._embed.many([t.params for t in study.trials[:6]])  # noqa: SLF001
    np.testing.assert_allclose(call["x"], expected * sampler._weights)  # noqa: SLF001
    units = [_unit_of(n, None) for n in sampler._embed.names]  # noqa: SLF001
    assert [list(g) for g in call["groups"]] == [
        [i for i, u in enumerate(units) if u == "x"],
        [i for i, u in enumerate(units) if u == "act"],
    ]


# -- warm start ------------------------------------------------------------------------------


def _prior(n: int, seed: int = 5) -> list[tuple[dict[str, Any], float]]:
    rng = np.random.default_rng(seed)
    points = []
    for _ in range(n):
        p = draw(FLAT, uniform_choice, rng).params
        points.append((p, float(rng.random())))
    return points


def test_prior_scores_at_0_and_1_are_accepted_and_an_empty_prior_removes_it() -> None:
    study = _study()
    sampler = study.sampler
    assert isinstance(sampler, PredictorSampler)
    sampler.set_prior([(_prior(1)[0][0], 0.0), (_prior(2)[1][0], 1.0)])
    with_prior = _run(study, 1)
    sampler.set_prior([])
    assert sampler._prior is None and sampler._prior_model is None  # noqa: SLF001
    plain = _study()
    assert _run(study, 3) == _run(plain, 4)[1:]  # as if there never was a prior
    assert with_prior != _run(_study(), 1)


def test_a_large_prior_keeps_its_best_half_and_spreads_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    points = _prior(450)
    sampler = PredictorSampler(space=FLAT, seed=0)
    calls = _spy_fit(monkeypatch)
    sampler.set_prior(points)
    kept = sampler._prior  # noqa: SLF001
    assert kept is not None and len(kept[0]) == 300
    ranked = sorted(points, key=lambda p: -p[1])
    scores = np.sort(np.array([s for _, s in ranked]))[::-1]
    rest = scores[150:]
    spread = rest[np.linspace(0, len(rest) - 1, 150).round().astype(int)]
    np.testing.assert_allclose(kept[2], probit(np.concatenate([scores[:150], spread])))
    assert kept[2][-1] == pytest.approx(probit(np.array([scores[-1]]))[0])  # the worst kept
    assert [p for _, p in kept[0][:3]] == [p for p, _ in ranked[:3]]
    assert kept[0][0][0] == candidate_key(FLAT, ranked[0][0])
    np.testing.assert_allclose(
        kept[1], sampler._embed.many([p for _, p in kept[0]]) * sampler._weights
    )  # noqa: SLF001
    (call,) = calls  # the source's own model, over the same points and groups
    np.testing.assert_allclose(call["x"], kept[1])
    np.testing.assert_allclose(call["y"], kept[2])
    assert call["groups"] is not None and len(call["groups"]) == 2
    # exactly 300: nothing dropped
    sampler.set_prior(points[:300])
    assert len(sampler._prior[0]) == 300  # noqa: SLF001


def test_what_a_prior_point_lacks_is_drawn_from_the_seed() -> None:
    space = spaces.Space(
        {
            "genome": spaces.CellFamily(),
            "x": spaces.Int(low=0, high=60),
            "lr": spaces.Float(low=1e-3, high=1.0),
        }
    )
    prior = [({"x": i}, i / 10) for i in range(10)]

    def drawn(seed: int) -> list[tuple[Any, float]]:
        sampler = PredictorSampler(space=space, seed=seed)
        sampler.set_prior(prior)
        kept = sampler._prior  # noqa: SLF001
        assert kept is not None
        return [(key[0], p["lr"]) for key, p in kept[0]]

    three = drawn(3)
    assert three == drawn(3)  # the same seed, the same draws
    # another seed, other draws (seeds that differ in one low bit too)
    others = [drawn(s) for s in (1, 2, 4)]
    assert all(o != three for o in others) and len({str(o) for o in others}) == 3
    assert len({lr for _, lr in three}) == 10  # one draw per point, not one for all
    assert len({g for g, _ in three}) == 10  # and a genome each
    assert all(1e-3 <= lr <= 1.0 for _, lr in three)


def test_source_points_join_with_noise_that_grows_with_own_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    study = _study()
    sampler = study.sampler
    assert isinstance(sampler, PredictorSampler)
    sampler.set_prior(_prior(30))
    calls = _spy_fit(monkeypatch)
    _run(study, 4)  # fewer than 5 results: the source's weight is 1
    assert [len(c["y"]) for c in calls] == [30, 31, 32, 33]
    first = calls[0]
    np.testing.assert_allclose(first["extra"], np.full(30, 0.1))
    np.testing.assert_allclose(first["y"], sampler._prior[2])  # noqa: SLF001
    last = calls[3]
    np.testing.assert_array_equal(last["extra"][:3], 0.0)
    np.testing.assert_allclose(last["extra"][3:], 0.1 * (1 + 3 / 20))
    own = [_score(t.params) for t in study.trials[:3]]
    np.testing.assert_allclose(last["y"][:3], normal_scores(np.array(own)))


def test_the_source_weighs_by_how_well_it_ranks_own_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a source that agrees with the study: after 5 results its weight is its rank correlation
    rng = np.random.default_rng(2)
    source = [
        (p, float(np.clip((_score(p) + 70) / 70, 0, 1)))
        for p in (draw(FLAT, uniform_choice, rng).params for _ in range(40))
    ]
    study = _study(startup_trials=50)
    sampler = study.sampler
    assert isinstance(sampler, PredictorSampler)
    sampler.set_prior(source)
    _run(study, 6)
    calls = _spy_fit(monkeypatch)
    _run(study, 1)
    (call,) = calls
    done = study.trials[:6]
    x = sampler._embed.many([t.params for t in done]) * sampler._weights  # noqa: SLF001
    y = normal_scores(np.array([_score(t.params) for t in done]))
    model = sampler._prior_model  # noqa: SLF001
    assert model is not None
    rho = float(np.corrcoef(normal_scores(model.predict(x)[0]), y)[0, 1])
    assert 0.2 < rho <= 1.0
    assert sampler._relevance(x, y) == pytest.approx(rho)  # noqa: SLF001
    np.testing.assert_allclose(call["extra"][6:], 0.1 * (1 + 6 / 20) / rho)
    # too few results to tell: weight 1; a source that ranks them backwards: dropped
    assert sampler._relevance(x[:4], y[:4]) == 1.0  # noqa: SLF001
    assert sampler._relevance(x[:5], y[:5]) != 1.0  # noqa: SLF001
    assert sampler._relevance(x, -y) == 0.0  # noqa: SLF001
    assert sampler._relevance(x, np.zeros(6)) == 0.0  # noqa: SLF001  (no correlation: nan)


def test_a_dropped_source_leaves_only_own_results(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(2)
    backwards = [
        (p, float(np.clip(1 - (_score(p) + 70) / 70, 0, 1)))
        for p in (draw(FLAT, uniform_choice, rng).params for _ in range(40))
    ]
    study = _study(startup_trials=50)
    sampler = study.sampler
    assert isinstance(sampler, PredictorSampler)
    sampler.set_prior(backwards)
    _run(study, 8)
    calls = _spy_fit(monkeypatch)
    _run(study, 1)
    assert len(calls[0]["y"]) == 8


def test_with_only_a_prior_the_best_is_the_best_source_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    study = _study()
    sampler = study.sampler
    assert isinstance(sampler, PredictorSampler)
    sampler.set_prior(_prior(30))
    bests: list[float] = []
    ei = sampler._acquisition  # noqa: SLF001

    def spy(mean: np.ndarray, std: np.ndarray, best: float, *rest: Any) -> np.ndarray:
        bests.append(best)
        return ei(mean, std, best, *rest)

    monkeypatch.setattr(sampler, "_acquisition", spy)
    fits = _spy_fit(monkeypatch)
    _run(study, 2)
    gp0 = GaussianProcess.fit(fits[0]["x"], fits[0]["y"], fits[0]["extra"], fits[0]["groups"])
    assert bests[0] == pytest.approx(float(gp0.predict(fits[0]["x"])[0].max()))
    # with a result of its own, the best is the model's best own point, not a source's
    gp1 = GaussianProcess.fit(fits[1]["x"], fits[1]["y"], fits[1]["extra"], fits[1]["groups"])
    assert bests[1] == pytest.approx(float(gp1.predict(fits[1]["x"][:1])[0][0]))


# -- candidates ------------------------------------------------------------------------------


def test_candidates_are_children_of_the_best_and_a_tenth_uniform_draws(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    space = spaces.Space({"genome": spaces.CellFamily()})
    study = _study(space=space, startup_trials=6, candidates=40, parents=3)
    _run(study, 6, space, lambda p: float(p["genome"].edges.count("nor_conv_3x3")))
    sampler = study.sampler
    assert isinstance(sampler, PredictorSampler)
    rows: list[int] = []
    predict = GaussianProcess.predict

    def spy(self: GaussianProcess, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows.append(len(x))
        return predict(self, x)

    children: list[Any] = []
    make = sampler._children  # noqa: SLF001

    def spy_children(parent: dict[str, Any], key: Any) -> Any:
        children.append(key)
        return make(parent, key)

    monkeypatch.setattr(GaussianProcess, "predict", spy)
    monkeypatch.setattr(sampler, "_children", spy_children)
    trial = study.ask()
    space.suggest(trial)
    # 3 parents, each round(40 * 0.9 / 3) = 12 children (fewer when two coincide), and
    # round(40 * 0.1) = 4 uniform draws; the model's own points are predicted first
    assert len(children) == 3 and len(set(children)) == 3
    done = study.trials[:6]
    keys = [candidate_key(space, t.params) for t in done]
    means = GaussianProcess.fit(  # the parents are the three the model rates best
        sampler._embed.many([t.params for t in done]) * sampler._weights,  # noqa: SLF001
        normal_scores(np.array([t.value for t in done])),
    )
    assert set(children) <= set(keys)
    assert rows[0] == 6 and 30 <= rows[-1] <= 40
    assert means is not None
    pools = [sampler._pools[k] for k in children]  # noqa: SLF001
    assert all(9 <= len(p) <= 12 for p in pools)
    proposal = candidate_key(space, trial.params)
    assert proposal not in keys


# -- defaults --------------------------------------------------------------------------------

WIDE = spaces.Space(
    {"x": spaces.Int(low=0, high=1000), "act": spaces.Categorical(("relu", "tanh", "gelu"))}
)


def _added(study: optuna.Study, n: int, space: spaces.Space = WIDE) -> None:
    """``n`` complete trials written straight into storage (no asks): distinct candidates."""
    rng = np.random.default_rng(11)
    dists = {
        "x": optuna.distributions.IntDistribution(0, 1000),
        "act": optuna.distributions.CategoricalDistribution(("relu", "tanh", "gelu")),
    }
    xs = rng.choice(1001, size=n, replace=False)
    for i, x in enumerate(xs):
        params = {"x": int(x), "act": ("relu", "tanh", "gelu")[i % 3]}
        study.add_trial(
            optuna.trial.create_trial(
                params=params, distributions=dists, value=float(-abs(x - 500))
            )
        )


class _Spy:
    """What one ask fitted and predicted, and which parents it made children of."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, sampler: PredictorSampler) -> None:
        self.fitted: list[int] = []
        self.predicted: list[int] = []
        self.parents: list[Any] = []
        self.betas: list[float] = []
        fit, predict = GaussianProcess.fit, GaussianProcess.predict
        children, acquisition = sampler._children, sampler._acquisition  # noqa: SLF001

        def spy_fit(x: np.ndarray, *args: Any, **kwargs: Any) -> GaussianProcess:
            self.fitted.append(len(x))
            return fit(x, *args, **kwargs)

        def spy_predict(gp: GaussianProcess, x: np.ndarray) -> Any:
            self.predicted.append(len(x))
            return predict(gp, x)

        def spy_children(parent: dict[str, Any], key: Any) -> Any:
            self.parents.append(key)
            return children(parent, key)

        def spy_acquisition(mean: Any, std: Any, best: float, rng: Any, beta: float) -> Any:
            self.betas.append(beta)
            return acquisition(mean, std, best, rng, beta)

        monkeypatch.setattr(GaussianProcess, "fit", staticmethod(spy_fit))
        monkeypatch.setattr(GaussianProcess, "predict", spy_predict)
        monkeypatch.setattr(sampler, "_children", spy_children)
        monkeypatch.setattr(sampler, "_acquisition", spy_acquisition)


def _default_study() -> tuple[optuna.Study, PredictorSampler]:
    sampler = PredictorSampler(space=WIDE, seed=0)
    return optuna.create_study(sampler=sampler, direction="maximize"), sampler


def test_default_startup_is_10_complete_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    study, sampler = _default_study()
    _added(study, 9)
    spy = _Spy(monkeypatch, sampler)
    WIDE.suggest(study.ask())
    assert spy.fitted == []  # a uniform draw
    study, sampler = _default_study()
    _added(study, 10)
    spy = _Spy(monkeypatch, sampler)
    WIDE.suggest(study.ask())
    assert spy.fitted == [10]


def test_default_candidates_parents_and_beta(monkeypatch: pytest.MonkeyPatch) -> None:
    study, sampler = _default_study()
    _added(study, 14)
    spy = _Spy(monkeypatch, sampler)
    WIDE.suggest(study.ask())
    # 10 parents (of 14 known), 18 children each and 20 uniform draws: 200 at most
    assert len(spy.parents) == 10 == len(set(spy.parents))
    assert spy.predicted[0] == 14 and 100 < spy.predicted[-1] <= 200  # less the repeats
    assert spy.betas == [1.0]


def test_default_ucb_weighs_the_deviation_once(monkeypatch: pytest.MonkeyPatch) -> None:
    sampler = PredictorSampler(space=WIDE, seed=0, acquisition="ucb")
    study = optuna.create_study(sampler=sampler, direction="maximize")
    _added(study, 10)
    spy = _Spy(monkeypatch, sampler)
    WIDE.suggest(study.ask())
    assert spy.betas == [1.0]


def test_default_window_is_100_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    study, sampler = _default_study()
    _added(study, 100)
    spy = _Spy(monkeypatch, sampler)
    WIDE.suggest(study.ask())
    study.tell(study.trials[-1].number, 0.0)
    WIDE.suggest(study.ask())  # 101 complete: the window's 100
    assert spy.fitted == [100, 100]


def test_a_complete_trial_without_a_candidate_key_is_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # e.g. from before the space gained a dimension: it is neither fitted nor a parent
    study, sampler = _default_study()
    _added(study, 10)
    study.add_trial(
        optuna.trial.create_trial(
            params={"x": 3},
            distributions={"x": optuna.distributions.IntDistribution(0, 1000)},
            value=1e6,
        )
    )
    spy = _Spy(monkeypatch, sampler)
    WIDE.suggest(study.ask())
    assert spy.fitted == [10]
    assert None not in spy.parents


def test_the_genome_is_one_group_and_each_scalar_another(monkeypatch: pytest.MonkeyPatch) -> None:
    space = spaces.Space(
        {
            "genome": spaces.CellFamily(),
            "lr": spaces.Float(low=1e-4, high=1.0, log=True),
            "act": spaces.Categorical(("relu", "tanh")),
        }
    )
    sampler = PredictorSampler(space=space, startup_trials=3, seed=0)
    study = optuna.create_study(sampler=sampler, direction="maximize")
    _run(study, 3, space, lambda p: p["lr"])
    calls = _spy_fit(monkeypatch)
    _run(study, 1, space, lambda p: p["lr"])
    names = sampler._embed.names  # noqa: SLF001
    groups = [[names[i] for i in g] for g in calls[0]["groups"]]
    assert [len(g) for g in groups] == [len(names) - 3, 1, 2]
    assert all(n.startswith("genome.") for n in groups[0])
    assert groups[1:] == [["lr"], ["act=relu", "act=tanh"]]


def _flat_trials(study: optuna.Study, values: list[float]) -> None:
    dists = {
        "x": optuna.distributions.IntDistribution(0, 60),
        "act": optuna.distributions.CategoricalDistribution(("relu", "tanh", "gelu")),
    }
    for i, v in enumerate(values):
        study.add_trial(
            optuna.trial.create_trial(
                params={"x": i, "act": "relu"}, distributions=dists, value=float(v)
            )
        )


def test_the_window_holds_each_study_s_best_tenth_and_its_most_recent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # window 20: the 2 best of all trials and the 18 most recent others; one sampler asked
    # by two studies keeps a window for each
    sampler = PredictorSampler(space=FLAT, seed=0, window=20, startup_trials=4)
    storage = optuna.storages.InMemoryStorage()
    a = optuna.create_study(sampler=sampler, direction="maximize", storage=storage)
    b = optuna.create_study(sampler=sampler, direction="maximize", storage=storage)
    _flat_trials(a, [100.0 - i for i in range(30)])  # the best are the oldest: 0 and 1
    _flat_trials(b, [float(i) for i in range(30)])  # the best are the most recent
    calls = _spy_fit(monkeypatch)
    FLAT.suggest(a.ask())
    FLAT.suggest(b.ask())
    embed = sampler._embed  # noqa: SLF001
    for call, study, picked in (
        (calls[0], a, [0, 1, *range(12, 30)]),
        (calls[1], b, list(range(10, 30))),
    ):
        expected = embed.many([study.trials[n].params for n in picked]) * sampler._weights  # noqa: SLF001
        np.testing.assert_allclose(call["x"], expected)


def test_an_exhausted_space_still_gets_a_proposal() -> None:
    space = spaces.Space({"c": spaces.Categorical(("a", "b", "c"))})
    sampler = PredictorSampler(space=space, startup_trials=1, seed=0)
    study = optuna.create_study(sampler=sampler, direction="maximize")
    _run(study, 3, space, lambda p: float("abc".index(p["c"])))
    assert {t.params["c"] for t in study.trials} == {"a", "b", "c"}
    trial = study.ask()  # nothing unseen is left: a repeat, drawn uniformly
    assert space.suggest(trial)["c"] in ("a", "b", "c")
    assert not any(k.startswith("detol:fallback") for k in study.trials[-1].system_attrs)


def test_thompson_draws_come_from_the_trial_s_seed() -> None:
    def asked(seed: int) -> list[dict[str, Any]]:
        return _run(_study(acquisition="thompson", startup_trials=3, seed=seed), 6)

    first = asked(0)
    assert first == asked(0) and first[3:] != asked(1)[3:]


def test_only_running_trials_with_a_whole_candidate_are_believed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    study = _study(startup_trials=4)
    _run(study, 5)
    half = study.ask()  # running, but it has not asked for "x" yet: no candidate to believe
    half.suggest_categorical("act", ("relu", "tanh", "gelu"))
    whole = study.ask()
    FLAT.suggest(whole)
    believed: list[int] = []
    with_points = GaussianProcess.with_points

    def spy(gp: GaussianProcess, x: np.ndarray, y: np.ndarray, *args: Any) -> GaussianProcess:
        believed.append(len(x))
        # at the model's mean there: a fantasy that moves no mean, only narrows the spread
        np.testing.assert_allclose(y, gp.predict(x)[0])
        return with_points(gp, x, y, *args)

    monkeypatch.setattr(GaussianProcess, "with_points", spy)
    FLAT.suggest(study.ask())
    assert believed == [1]  # "whole" only; neither "half" nor the asking trial itself


class _Candidates:
    """The candidate rows one ask predicts, and the parents it makes children of."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, sampler: PredictorSampler) -> None:
        self.rows: list[np.ndarray] = []
        self.parents: list[Any] = []
        predict = GaussianProcess.predict
        children = sampler._children  # noqa: SLF001

        def spy_predict(gp: GaussianProcess, x: np.ndarray) -> Any:
            self.rows.append(np.array(x))
            return predict(gp, x)

        def spy_children(parent: dict[str, Any], key: Any) -> Any:
            self.parents.append(key)
            return children(parent, key)

        monkeypatch.setattr(GaussianProcess, "predict", spy_predict)
        monkeypatch.setattr(sampler, "_children", spy_children)


def test_candidates_are_distinct_unseen_and_parents_distinct(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a small space (183 candidates): children of different parents and uniform draws meet
    study = _study(startup_trials=50, candidates=200, parents=4)
    _run(study, 8)
    sampler = study.sampler
    assert isinstance(sampler, PredictorSampler)
    # a source that repeats the study's own candidates, ranked alike (so it is kept): each
    # candidate is a parent once
    values = np.array([t.value for t in study.trials])
    ranks = (np.argsort(np.argsort(values)) + 0.5) / len(values)
    sampler.set_prior(
        [(dict(t.params), float(q)) for t, q in zip(study.trials, ranks, strict=True)]
    )
    fits = _spy_fit(monkeypatch)
    spy = _Candidates(monkeypatch, sampler)
    FLAT.suggest(study.ask())
    assert len(fits[0]["y"]) == 16  # the source was kept
    assert len(spy.parents) == 4 == len(set(spy.parents))
    rows = spy.rows[-1]
    assert len(np.unique(rows, axis=0)) == len(rows)
    own = sampler._embed.many([t.params for t in study.trials[:8]]) * sampler._weights  # noqa: SLF001
    assert not any((rows == r).all(axis=1).any() for r in own)


def test_parents_are_the_best_rated_of_own_and_source_points(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    study = _study(startup_trials=50, parents=3)
    sampler = study.sampler
    assert isinstance(sampler, PredictorSampler)
    sampler.set_prior(_prior(20))
    _run(study, 2)
    fits = _spy_fit(monkeypatch)
    spy = _Candidates(monkeypatch, sampler)
    FLAT.suggest(study.ask())
    fit = fits[0]
    gp = GaussianProcess.fit(fit["x"], fit["y"], fit["extra"], fit["groups"])
    means = gp.predict(fit["x"])[0]
    kept = sampler._prior  # noqa: SLF001
    assert kept is not None
    keys = [candidate_key(FLAT, t.params) for t in study.trials[:2]] + [k for k, _ in kept[0]]
    best = []
    for i in np.argsort(-means, kind="stable"):
        if keys[i] not in best:
            best.append(keys[i])
    assert spy.parents == best[:3]


def test_a_tenth_of_the_candidates_are_uniform_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    study = optuna.create_study(
        sampler=PredictorSampler(space=WIDE, seed=0, candidates=40, parents=3),
        direction="maximize",
    )
    _added(study, 12)
    sampler = study.sampler
    assert isinstance(sampler, PredictorSampler)
    spy = _Candidates(monkeypatch, sampler)
    WIDE.suggest(study.ask())
    seen = {candidate_key(WIDE, t.params) for t in study.trials[:12]}
    children = {k for p in spy.parents for k, _ in sampler._pools[p]} - seen  # noqa: SLF001
    assert len(spy.rows[-1]) == len(children) + 4  # round(40 * 0.1) draws, none repeated


def test_a_parent_s_children_are_made_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import search.strategies._predictor as predictor

    study = _study(startup_trials=4, parents=2, candidates=20)
    _run(study, 4)
    made: list[int] = []
    mutate = predictor.mutate_params

    def counted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        made.append(1)
        return mutate(*args, **kwargs)

    monkeypatch.setattr(predictor, "mutate_params", counted)
    trial = study.ask()
    FLAT.suggest(trial)
    first = len(made)
    # 2 parents, 9 children each, every third of them mutated twice: 2 * (9 + 3)
    assert first == 24
    FLAT.suggest(study.ask())  # the same two parents (nothing told since): no new children
    assert len(made) == first


def test_children_streams_differ_per_parent_and_per_seed() -> None:
    parents = [{"x": 10, "act": "relu"}, {"x": 40, "act": "relu"}]

    def pools(seed: int, candidates: int = 40) -> list[list[tuple[bool, str]]]:
        sampler = PredictorSampler(space=FLAT, seed=seed, candidates=candidates, parents=1)
        return [
            [(c["x"] != p["x"], c["act"]) for _, c in sampler._children(p, candidate_key(FLAT, p))]  # noqa: SLF001
            for p in parents
        ]

    two = pools(2)
    assert two == pools(2)
    assert len({str(pools(s)) for s in (1, 2, 3)}) == 3  # the whole seed counts
    assert [len(p) for p in pools(2, candidates=1)] == [1, 1]  # round(0.9): one child


def test_each_parent_s_children_come_from_a_stream_of_their_own() -> None:
    # one continuous dimension: with one stream for all parents, each child of 0.3 would be
    # the same step (or the same fresh draw) as the matching child of 0.6
    space = spaces.Space({"f": spaces.Float(low=0.0, high=1.0)})
    sampler = PredictorSampler(space=space, seed=2, candidates=40, parents=1)
    low, high = (
        [c["f"] for _, c in sampler._children({"f": f}, candidate_key(space, {"f": f}))]  # noqa: SLF001
        for f in (0.3, 0.6)
    )
    assert len(low) == len(high) == 36
    alike = [a == b or abs((a - 0.3) - (b - 0.6)) < 1e-9 for a, b in zip(low, high, strict=True)]
    assert not any(alike)


# -- partial curves (BOHB's rule) ------------------------------------------------------------


def _paused(study: optuna.Study, n: int, epochs: int, score: Any = _score) -> list[dict[str, Any]]:
    """``n`` trials that report ``epochs`` epochs (value at epoch e: score + e) and pause there
    (pruned, as pause-and-promote tells Optuna)."""
    out = []
    for _ in range(n):
        trial = study.ask()
        params = FLAT.suggest(trial)
        for e in range(1, epochs + 1):
            trial.report(score(params) + e, e)
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        out.append(dict(trial.params))
    return out


def test_paused_trials_curves_are_modelled_before_startup_trials_complete(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    study = _study(startup_trials=4, partial=True)
    _paused(study, 3, epochs=3)
    _paused(study, 2, epochs=1)  # epoch 1: five configurations, epoch 3: three
    calls = _spy_fit(monkeypatch)
    asked = _paused(study, 1, epochs=1)
    (call,) = calls  # none complete, yet a model: fitted at epoch 1, the highest with >= 4
    values = [_score(t.params) + 1 for t in study.trials[:5]]
    np.testing.assert_allclose(call["y"], normal_scores(np.array(values)))
    _paused(study, 1, epochs=3)  # epoch 3 now has four: the model moves up to it
    calls.clear()
    _paused(study, 1, epochs=1)
    values = [_score(t.params) + 3 for t in study.trials if len(t.intermediate_values) == 3]
    np.testing.assert_allclose(calls[0]["y"], normal_scores(np.array(values)))
    off = _study(startup_trials=4, partial=False)
    _paused(off, 5, epochs=1)
    assert asked != _paused(off, 1, epochs=1)  # off: the same seed's sixth uniform draw


def test_a_search_that_never_completes_a_trial_proposes_as_if_its_curves_were_results() -> None:
    complete = _run(_study(startup_trials=4), 14)
    assert _paused(_study(startup_trials=4, partial=True), 14, epochs=1) == complete  # same ranks
    assert _paused(_study(startup_trials=4), 14, epochs=1) != complete  # off by default
