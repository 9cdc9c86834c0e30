"""The predictor's surrogate (search.strategies._surrogate) against the textbook, in process and
small: targets as normal scores of ranks, the Matérn 5/2 kernel, the grid of length scales and
noise picked by marginal likelihood, the posterior mean and deviation, conditioning on more
points, the relevance of groups of columns, the acquisition functions and BLAS on one thread."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from search.strategies._surrogate import (
    ACQUISITIONS,
    GaussianProcess,
    expected_improvement,
    normal_scores,
    one_blas_thread,
    probit,
    quantiles,
    thompson,
    upper_confidence,
)

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

SCALES = (0.25, 0.5, 1.0, 2.0)  # times the median distance (the module's grid, as documented)
NOISES = (0.02, 0.1, 0.3)


def matern(d: np.ndarray, scale: float) -> np.ndarray:
    r = math.sqrt(5.0) * np.asarray(d) / scale
    return (1.0 + r + r * r / 3.0) * np.exp(-r)


def dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([[float(np.linalg.norm(p - q)) for q in b] for p in a])


def lml(k: np.ndarray, r: np.ndarray) -> float:
    """The log marginal likelihood, up to its constant."""
    return float(-0.5 * r @ np.linalg.solve(k, r) - 0.5 * np.linalg.slogdet(k)[1])


def posterior(
    x: np.ndarray, y: np.ndarray, cov: np.ndarray, scale: float, mean: float, at: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The textbook GP posterior, with dense solves."""
    ks = matern(dist(at, x), scale)
    m = mean + ks @ np.linalg.solve(cov, y - mean)
    v = 1.0 - np.einsum("ij,ji->i", ks, np.linalg.solve(cov, ks.T))
    return m, np.sqrt(np.maximum(v, 1e-12))


def _data(n: int = 12, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.random((n, d))
    return x, np.sin(3 * x[:, 0]) + 0.3 * x[:, 1] + 0.1 * rng.standard_normal(n)


# -- targets ---------------------------------------------------------------------------------


def test_quantiles_of_ties_unsorted_and_single_values() -> None:
    np.testing.assert_allclose(
        quantiles(np.array([2.0, 5.0, 2.0, 2.0, -1.0])), [0.5, 0.9, 0.5, 0.5, 0.1]
    )
    np.testing.assert_allclose(
        quantiles(np.array([4.0, 3.0, 2.0, 1.0])), [0.875, 0.625, 0.375, 0.125]
    )
    np.testing.assert_allclose(quantiles(np.array([7.0])), [0.5])
    np.testing.assert_allclose(quantiles(np.array([1.0, 1.0])), [0.5, 0.5])
    assert quantiles(np.array([])).shape == (0,)


def test_probit_is_the_inverse_normal_cdf_clipped() -> None:
    nd = NormalDist()
    np.testing.assert_allclose(
        probit(np.array([0.0, 0.001, 0.005, 0.2, 0.5, 0.975, 0.995, 0.999, 1.0])),
        [
            nd.inv_cdf(0.005),
            nd.inv_cdf(0.005),
            nd.inv_cdf(0.005),
            nd.inv_cdf(0.2),
            0.0,
            1.959963984540054,
            nd.inv_cdf(0.995),
            nd.inv_cdf(0.995),
            nd.inv_cdf(0.995),
        ],
    )
    assert probit(np.array([[0.5, 0.975]])).shape == (2,)


def test_normal_scores_are_probits_of_the_ranks() -> None:
    nd = NormalDist()
    np.testing.assert_allclose(
        normal_scores(np.array([10.0, -3.0, 4.0, 4.0])),
        [nd.inv_cdf(0.875), nd.inv_cdf(0.125), 0.0, 0.0],
        atol=1e-12,
    )


# -- the fit ---------------------------------------------------------------------------------


def _best_on_grid(x: np.ndarray, y: np.ndarray, extra: np.ndarray) -> tuple[float, float]:
    d = dist(x, x)
    upper = d[np.triu_indices(len(x), 1)]
    median = float(np.median(upper[upper > 0])) if (upper > 0).any() else 1.0
    r = y - y.mean()
    scored = [
        (lml(matern(d, s * median) + np.diag(n + extra + 1e-8), r), s * median, n)
        for s in SCALES
        for n in NOISES
    ]
    best = max(scored)
    return best[1], best[2]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_fit_picks_the_grid_point_of_highest_marginal_likelihood(seed: int) -> None:
    x, y = _data(seed=seed)
    if seed == 3:  # a smooth target of few points: a long length scale, little noise
        x = np.linspace(0, 1, 8)[:, None]
        y = np.sin(2 * x[:, 0])
    if seed == 2:  # noise only: short scale or much noise
        y = np.random.default_rng(9).standard_normal(len(y))
    extra = np.zeros(len(y))
    scale, noise = _best_on_grid(x, y, extra)
    gp = GaussianProcess.fit(x, y)
    assert gp.scale == pytest.approx(scale)
    assert gp.mean == pytest.approx(float(y.mean()))
    np.testing.assert_allclose(gp.weights, np.ones(x.shape[1]))
    np.testing.assert_allclose(gp.x, x)
    np.testing.assert_allclose(gp.resid, y - y.mean())
    cov = matern(dist(x, x), scale) + np.diag(np.full(len(y), noise + 1e-8))
    np.testing.assert_allclose(gp.chol @ gp.chol.T, cov, rtol=0, atol=1e-11)
    np.testing.assert_allclose(gp.alpha, np.linalg.solve(cov, y - y.mean()), rtol=1e-6)
    at = np.random.default_rng(seed + 10).random((5, x.shape[1]))
    m, s = gp.predict(at)
    em, es = posterior(x, y, cov, scale, float(y.mean()), at)
    np.testing.assert_allclose(m, em, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(s, es, rtol=1e-6)


def test_the_grid_reaches_each_length_scale_and_noise() -> None:
    # which grid point wins depends on the data; over these data sets each one wins somewhere
    scales, noises = set(), set()
    for seed in range(24):
        rng = np.random.default_rng(seed)
        x = rng.random((10, 1))
        wiggle = [0.5, 2.0, 5.0, 8.0, 20.0][seed % 5]
        y = np.sin(wiggle * x[:, 0]) + [0.0, 0.3, 1.0][seed % 3] * rng.standard_normal(10)
        gp = GaussianProcess.fit(x, y)
        scale, noise = _best_on_grid(x, y, np.zeros(10))
        assert gp.scale == pytest.approx(scale)
        np.testing.assert_allclose(np.diag(gp.chol @ gp.chol.T), 1 + noise + 1e-8)
        upper = dist(x, x)[np.triu_indices(10, 1)]
        scales.add(round(scale / float(np.median(upper)), 6))
        noises.add(noise)
    assert scales == set(SCALES) and noises == set(NOISES)


def test_extra_noise_is_added_per_point() -> None:
    x, y = _data()
    extra = np.linspace(0.0, 2.0, len(y))
    gp = GaussianProcess.fit(x, y, extra)
    scale, noise = _best_on_grid(x, y, extra)
    assert gp.scale == pytest.approx(scale)
    cov = matern(dist(x, x), scale) + np.diag(noise + extra + 1e-8)
    np.testing.assert_allclose(gp.chol @ gp.chol.T, cov, rtol=0, atol=1e-11)
    # a noisier point pulls the mean less: at the last (noisiest) point the fit strays further
    m = gp.predict(x)[0]
    assert abs(m[-1] - y[-1]) > abs(m[0] - y[0])


def test_repeated_points_take_a_unit_median_and_the_first_scale() -> None:
    # No positive distance: the median is taken as 1; every length scale explains identical
    # points alike (a tie), and the first of the grid is kept.
    x = np.zeros((4, 2))
    y = np.array([0.0, 1.0, 2.0, 3.0])
    gp = GaussianProcess.fit(x, y)
    assert gp.scale == 0.25
    cov = gp.chol @ gp.chol.T
    at = np.array([[0.0, 0.0], [0.1, 0.0], [0.3, 0.2], [10.0, 10.0]])
    m, s = gp.predict(at)
    em, es = posterior(x, y, cov, 0.25, 1.5, at)
    np.testing.assert_allclose(m, em, atol=1e-9)
    np.testing.assert_allclose(s, es, rtol=1e-6)
    assert m[0] == pytest.approx(1.5, abs=1e-6) and s[3] == pytest.approx(1.0, abs=1e-3)


def test_one_point_and_far_points() -> None:
    gp = GaussianProcess.fit(np.array([[0.5, 0.5]]), np.array([2.0]))
    m, s = gp.predict(np.array([[0.5, 0.5], [100.0, 100.0]]))
    np.testing.assert_allclose(m, [2.0, 2.0])
    assert s[0] < 0.5 and s[1] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("x", "y"),
    [
        (np.zeros(3), np.zeros(3)),
        (np.zeros((3, 2)), np.zeros(2)),
        (np.zeros((0, 2)), np.zeros(0)),
        (np.zeros((2, 2, 1)), np.zeros(2)),
    ],
)
def test_bad_shapes_are_refused(x: np.ndarray, y: np.ndarray) -> None:
    with pytest.raises(ValueError, match=r"^x, y: expected \(n, d\) and \(n,\), got "):
        GaussianProcess.fit(x, y)


# -- relevance per group ---------------------------------------------------------------------


def test_an_irrelevant_group_counts_for_less_and_a_relevant_one_for_more() -> None:
    rng = np.random.default_rng(4)
    x = rng.random((30, 4))
    y = np.sin(6 * x[:, 0]) + np.cos(5 * x[:, 1])  # columns 2, 3: no effect
    groups = [np.array([0, 1]), np.array([2, 3])]
    gp = GaussianProcess.fit(x, y, groups=groups)
    w = gp.weights
    assert w[0] == w[1] and w[2] == w[3]
    assert w[2] == pytest.approx(0.3) and w[0] in (pytest.approx(1.0), pytest.approx(3.0))
    np.testing.assert_allclose(gp.x, x * w)
    plain = GaussianProcess.fit(x, y)
    assert plain.scale == gp.scale  # the relevance search keeps the grid's length scale
    # the relevance makes the fit likelier, and it predicts unseen points better
    test = rng.random((40, 4))
    truth = np.sin(6 * test[:, 0]) + np.cos(5 * test[:, 1])
    err = np.abs(gp.predict(test)[0] - truth).mean()
    assert err < np.abs(plain.predict(test)[0] - truth).mean()
    # and the posterior is the textbook one over the weighted inputs
    cov = gp.chol @ gp.chol.T
    m, s = posterior(x * w, y, cov, gp.scale, gp.mean, test[:5] * w)
    got = gp.predict(test[:5])
    np.testing.assert_allclose(got[0], m, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(got[1], s, rtol=1e-6)


def test_relevance_search_takes_each_improvement_in_turn() -> None:
    # The coordinate search by hand: each group in turn tries x0.3 then x3 of its factor,
    # keeping a change when the marginal likelihood rises (strictly: a group that does not
    # vary in the data, here the last, keeps relevance 1); per-point noise included.
    rng = np.random.default_rng(7)
    x = rng.random((25, 4))
    x[:, 3] = 0.5
    y = np.sin(8 * x[:, 2]) + 0.5 * x[:, 0]
    extra = np.linspace(0.0, 0.2, 25)
    groups = [np.array([0]), np.array([1]), np.array([2]), np.array([3])]
    gp = GaussianProcess.fit(x, y, extra, groups=groups)
    base = GaussianProcess.fit(x, y, extra)
    noise = float((base.chol @ base.chol.T)[0, 0] - 1.0 - 1e-8)
    r = y - y.mean()

    def cov(f: np.ndarray) -> np.ndarray:
        return matern(dist(x * f, x * f), base.scale) + np.diag(noise + extra + 1e-8)

    factors, best = np.ones(4), lml(cov(np.ones(4)), r)
    for i in range(4):
        for f in (0.3, 3.0):
            trial = factors.copy()
            trial[i] *= f
            if lml(cov(trial), r) > best:
                factors, best = trial, lml(cov(trial), r)
    np.testing.assert_allclose(gp.weights, factors)
    assert not np.allclose(factors, 1.0) and factors[3] == 1.0
    np.testing.assert_allclose(gp.chol @ gp.chol.T, cov(factors), rtol=0, atol=1e-11)


def test_a_relevance_is_multiplied_in_turn_not_replaced() -> None:
    # Data where the second group first takes x0.3 and then x3 of that (0.9, not 3): the
    # search multiplies the factor it has. The by-hand search agrees.
    rng = np.random.default_rng(394149)
    n = int(rng.integers(8, 20))
    x = rng.random((n, 2))
    a, b, c = rng.uniform(0.5, 10, 3)
    y = np.sin(a * x[:, 0]) * c / 5 + np.sin(b * x[:, 1])
    y = y + rng.uniform(0, 0.5) * rng.standard_normal(n)
    gp = GaussianProcess.fit(x, y, groups=[np.array([0]), np.array([1])])
    np.testing.assert_allclose(gp.weights, [3.0, 0.9])
    base = GaussianProcess.fit(x, y)
    noise = float((base.chol @ base.chol.T)[0, 0] - 1.0 - 1e-8)
    r = y - y.mean()

    def likelihood(f: list[float]) -> float:
        d = dist(x * np.array(f), x * np.array(f))
        return lml(matern(d, base.scale) + np.eye(n) * (noise + 1e-8), r)

    assert likelihood([3.0, 0.3]) > likelihood([3.0, 1.0])  # x0.3 taken first
    assert likelihood([3.0, 0.9]) > likelihood([3.0, 0.3])  # then x3 of it
    assert likelihood([3.0, 0.9]) > likelihood([3.0, 3.0])  # 3 itself would fit worse


def test_relevance_needs_two_to_eight_groups() -> None:
    rng = np.random.default_rng(4)
    x = rng.random((20, 9))
    y = np.sin(6 * x[:, 0])
    one = GaussianProcess.fit(x, y, groups=[np.arange(9)])
    np.testing.assert_allclose(one.weights, 1.0)
    # one group on data where shrinking it would fit better (a plane): still no search
    plane = np.random.default_rng(0).random((20, 2))
    alone = GaussianProcess.fit(plane, plane.sum(axis=1), groups=[np.arange(2)])
    np.testing.assert_array_equal(alone.weights, [1.0, 1.0])
    noise = float((alone.chol @ alone.chol.T)[0, 0] - 1.0 - 1e-8)
    r = plane.sum(axis=1) - plane.sum(axis=1).mean()

    def likelihood(f: float) -> float:
        d = dist(plane * f, plane * f)
        return lml(matern(d, alone.scale) + np.eye(20) * (noise + 1e-8), r)

    assert likelihood(0.3) > likelihood(1.0)  # a search would have taken x0.3
    nine = GaussianProcess.fit(x, y, groups=[np.array([i]) for i in range(9)])
    np.testing.assert_allclose(nine.weights, 1.0)
    eight = GaussianProcess.fit(
        x, y, groups=[np.array([0, 8])] + [np.array([i]) for i in range(1, 8)]
    )
    assert not np.allclose(eight.weights, 1.0)
    assert eight.weights[0] == eight.weights[8]


# -- more points -----------------------------------------------------------------------------


def test_with_points_conditions_on_the_fantasies_with_their_noise() -> None:
    x, y = _data()
    gp = GaussianProcess.fit(x, y, groups=[np.array([0]), np.array([1, 2])])
    old = gp.chol @ gp.chol.T
    xp = np.random.default_rng(3).random((3, 3))
    yp = np.array([0.5, -1.0, 2.0])
    more = gp.with_points(xp, yp, noise=0.05)
    w = gp.weights
    xs = np.vstack([x * w, xp * w])
    cov = matern(dist(xs, xs), gp.scale)
    cov[:12, :12] = old
    cov[12:, 12:] += np.eye(3) * (0.05 + 1e-8)
    np.testing.assert_allclose(more.chol @ more.chol.T, cov, rtol=0, atol=1e-11)
    assert (more.scale, more.mean) == (gp.scale, gp.mean)
    np.testing.assert_allclose(more.weights, w)
    np.testing.assert_allclose(more.x, xs)
    np.testing.assert_allclose(more.resid, np.concatenate([y, yp]) - gp.mean)
    at = np.random.default_rng(5).random((4, 3))
    m, s = posterior(xs, np.concatenate([y, yp]), cov, gp.scale, gp.mean, at * w)
    got = more.predict(at)
    np.testing.assert_allclose(got[0], m, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(got[1], s, rtol=1e-6)
    # the default noise of a fantasy is 0.02
    default = gp.with_points(xp, yp)
    np.testing.assert_allclose(np.diag(default.chol @ default.chol.T)[12:], 1 + 0.02 + 1e-8)
    assert gp.with_points(np.zeros((0, 3)), np.zeros(0)) is gp
    # one point is conditioned on too, and points added in two goes make the same model
    one = gp.with_points(xp[:1], yp[:1], noise=0.05)
    assert len(one.x) == 13
    twice = one.with_points(xp[1:], yp[1:], noise=0.05)
    np.testing.assert_allclose(twice.predict(at)[0], got[0], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(twice.predict(at)[1], got[1], rtol=1e-6)


def test_a_believed_point_at_its_mean_keeps_the_mean_and_shrinks_the_deviation() -> None:
    x, y = _data()
    gp = GaussianProcess.fit(x, y)
    xp = np.array([[0.9, 0.1, 0.5]])
    m0, s0 = gp.predict(xp)
    m1, s1 = gp.with_points(xp, m0).predict(xp)
    assert m1[0] == pytest.approx(m0[0])
    assert s1[0] < 0.2 < s0[0]


# -- acquisitions ----------------------------------------------------------------------------


def test_expected_improvement_is_the_closed_form() -> None:
    mean = np.array([0.0, 1.0, 2.0, -1.0, 0.5])
    std = np.array([1.0, 0.5, 2.0, 0.1, 1e-9])
    best = 0.5
    nd = NormalDist()
    expected = [
        (m - best) * nd.cdf((m - best) / s) + s * nd.pdf((m - best) / s)
        for m, s in zip(mean, std, strict=True)
    ]
    got = expected_improvement(mean, std, best, np.random.default_rng(0), 1.0)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    assert ACQUISITIONS["ei"] is expected_improvement


def test_upper_confidence_bound_weighs_the_deviation_by_beta() -> None:
    mean, std = np.array([0.0, 1.0]), np.array([2.0, 0.5])
    rng = np.random.default_rng(0)
    np.testing.assert_allclose(upper_confidence(mean, std, 9.0, rng, 0.5), [1.0, 1.25])
    np.testing.assert_allclose(upper_confidence(mean, std, 9.0, rng, 0.0), mean)
    assert ACQUISITIONS["ucb"] is upper_confidence


def test_thompson_draws_each_candidate_from_its_marginal() -> None:
    mean, std = np.array([0.0, 5.0, -2.0]), np.array([1.0, 0.1, 3.0])
    rng = np.random.default_rng(0)
    draws = np.array([thompson(mean, std, 0.0, rng, 1.0) for _ in range(4000)])
    np.testing.assert_allclose(draws.mean(axis=0), mean, atol=0.15)
    np.testing.assert_allclose(draws.std(axis=0), std, rtol=0.05)
    assert abs(np.corrcoef(draws[:, 0], draws[:, 2])[0, 1]) < 0.05  # independent
    assert ACQUISITIONS["thompson"] is thompson
    assert sorted(ACQUISITIONS) == ["ei", "thompson", "ucb"]


def test_blas_runs_on_one_thread_inside_and_as_before_after() -> None:
    import torch  # noqa: F401  (its OpenMP pool: training's threads, which are not limited)
    from threadpoolctl import threadpool_info

    def threads(api: str) -> list[int]:
        return [p["num_threads"] for p in threadpool_info() if p["user_api"] == api]

    from search.strategies import _surrogate

    # the libraries are looked up once, on first use: here with OpenMP loaded too
    _surrogate._blas.cache_clear()  # noqa: SLF001
    blas, openmp = threads("blas"), threads("openmp")
    assert blas and openmp  # numpy's BLAS and torch's OpenMP are loaded
    with one_blas_thread():
        assert threads("blas") == [1] * len(blas)
        assert threads("openmp") == openmp
    assert threads("blas") == blas
