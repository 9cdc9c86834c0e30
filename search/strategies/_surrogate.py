"""The predictor strategy's surrogate: a Gaussian process over embedding vectors, on normal
scores of rank-normalised targets, with per-point noise (so that warm-start points count for less
than the study's own) and acquisition functions over candidate vectors.

Small and exact: at 200 points one fit is a handful of 200 x 200 Cholesky factorisations (the
kernel's length scale and the noise level are picked from a grid by marginal likelihood), about a
millisecond each. numpy only.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> x = rng.random((30, 3))
>>> gp = GaussianProcess.fit(x, normal_scores(x.sum(axis=1)))
>>> mean, std = gp.predict(np.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
>>> bool(mean[0] > mean[1])
True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
from scipy.linalg import solve_triangular  # scipy: a dependency of scikit-learn
from threadpoolctl import ThreadpoolController

# Length scales tried, as multiples of the median distance between training points, and noise
# variances tried, as a fraction of the targets' (unit) variance.
_SCALES = (0.25, 0.5, 1.0, 2.0)
_NOISES = (0.02, 0.1, 0.3)
_JITTER = 1e-8
_ARD_GROUPS = 8  # more groups than this: one length scale for all (the search grows costly)
_RELEVANCE = (0.3, 3.0)  # factors tried on each group's relevance
_ND = NormalDist()


@functools.cache
def _blas() -> ThreadpoolController:
    """Made on first use: it looks for the loaded BLAS libraries."""
    return ThreadpoolController()


def one_blas_thread() -> Any:
    """A context in which BLAS (numpy's OpenBLAS) runs on one thread. The GP's matrices are a
    few hundred rows: a second thread made a proposal at 10,000 trials 2.4x slower here (8 ms
    on one thread, 20 ms on two, with twice the CPU time) and spun a core the trials need."""
    return _blas().limit(limits=1, user_api="blas")


def quantiles(values: np.ndarray) -> np.ndarray:
    """Each value's rank in (0, 1), higher value -> higher quantile; ties share their mean rank:
    ``(rank + 0.5) / n``."""
    v = np.asarray(values, dtype=float)
    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v))
    ranks[order] = np.arange(len(v), dtype=float)
    unique, counts = np.unique(v, return_counts=True)
    for value in unique[counts > 1]:
        ties = v == value
        ranks[ties] = ranks[ties].mean()
    return (ranks + 0.5) / max(len(v), 1)


def normal_scores(values: np.ndarray) -> np.ndarray:
    """Rank-normalised values mapped through the inverse normal CDF (Gaussian targets)."""
    return probit(quantiles(values))


def probit(q: np.ndarray) -> np.ndarray:
    """The inverse normal CDF of scores in [0, 1] (clipped to [0.005, 0.995])."""
    return np.array([_ND.inv_cdf(min(0.995, max(0.005, float(x)))) for x in np.ravel(q)])


def _matern52(d: np.ndarray, scale: float) -> np.ndarray:
    r = math.sqrt(5.0) * d / scale
    return (1.0 + r + r * r / 3.0) * np.exp(-r)


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    sq = (a * a).sum(axis=1)[:, None] + (b * b).sum(axis=1)[None, :] - 2.0 * a @ b.T
    return np.sqrt(np.maximum(sq, 0.0))


@dataclass(frozen=True)
class GaussianProcess:
    """A fitted GP: Matérn 5/2 kernel of unit variance, constant mean, per-point noise."""

    x: np.ndarray  # training inputs, times ``weights``
    mean: float
    scale: float
    weights: np.ndarray  # per input column: the relevance ARD found for its group (1: none)
    chol: np.ndarray  # of K + noise, K the kernel between training points
    alpha: np.ndarray  # (K + noise)^-1 (y - mean)
    resid: np.ndarray  # y - mean

    @classmethod
    def fit(
        cls,
        x: np.ndarray,
        y: np.ndarray,
        extra_noise: np.ndarray | None = None,
        groups: list[np.ndarray] | None = None,
    ) -> GaussianProcess:
        """Fit to ``y`` at ``x`` (rows); ``extra_noise`` adds a variance per point on top of the
        fitted noise level (a less trusted point). Length scale and noise by marginal
        likelihood over a grid; then, with ``groups`` (column indices, e.g. one per space
        dimension), one pass of coordinate search over each group's relevance (x0.3, x3)."""
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        if x.ndim != 2 or len(x) != len(y) or len(y) == 0:
            raise ValueError(f"x, y: expected (n, d) and (n,), got {x.shape} and {y.shape}")
        extra = np.zeros(len(y)) if extra_noise is None else np.asarray(extra_noise, dtype=float)
        dist = _distances(x, x)
        upper = dist[np.triu_indices(len(y), 1)]
        positive = upper[upper > 0]
        median = float(np.median(positive)) if len(positive) else 1.0
        mean = float(y.mean())
        r = y - mean
        best: tuple[float, float, np.ndarray] | None = None
        best_lml = -np.inf
        for s in _SCALES:
            k = _matern52(dist, s * median)
            for noise in _NOISES:
                try:
                    chol = np.linalg.cholesky(k + np.diag(noise + extra + _JITTER))
                except np.linalg.LinAlgError:
                    continue
                w = solve_triangular(chol, r, lower=True)
                lml = -0.5 * float(w @ w) - float(np.log(np.diag(chol)).sum())
                if lml > best_lml:
                    best_lml, best = lml, (s * median, noise, chol)
        assert best is not None, "no kernel factorised"  # the largest noise always does
        scale, noise, chol = best
        weights = np.ones(x.shape[1])
        if groups is not None and 1 < len(groups) <= _ARD_GROUPS:
            parts = [_distances(x[:, g], x[:, g]) ** 2 for g in groups]
            factors = np.ones(len(groups))
            for i in range(len(groups)):
                for f in _RELEVANCE:
                    trial = factors.copy()
                    trial[i] *= f
                    d = np.sqrt(sum(t * t * p for t, p in zip(trial, parts, strict=True)))
                    try:
                        c = np.linalg.cholesky(
                            _matern52(d, scale) + np.diag(noise + extra + _JITTER))
                    except np.linalg.LinAlgError:
                        continue
                    w = solve_triangular(c, r, lower=True)
                    lml = -0.5 * float(w @ w) - float(np.log(np.diag(c)).sum())
                    if lml > best_lml:
                        best_lml, factors, chol = lml, trial, c
            for g, f in zip(groups, factors, strict=True):
                weights[g] = f
        return cls(x=x * weights, mean=mean, scale=scale, weights=weights, chol=chol,
                   alpha=_solve(chol, r), resid=r)

    def with_points(self, x: np.ndarray, y: np.ndarray, noise: float = 0.02) -> GaussianProcess:
        """The same kernel conditioned on more points (the believer's fantasies)."""
        if len(x) == 0:
            return self
        xs = np.vstack([self.x, np.asarray(x, dtype=float) * self.weights])
        k = _matern52(_distances(xs, xs), self.scale)
        n = len(self.x)
        # The old block's noise is recovered from its factor: K_old + D = L L^T.
        old = self.chol @ self.chol.T
        k[:n, :n] = old
        k[n:, n:] += np.eye(len(x)) * (noise + _JITTER)
        chol = np.linalg.cholesky(k)
        r = np.concatenate([self.resid, np.asarray(y, dtype=float) - self.mean])
        return GaussianProcess(x=xs, mean=self.mean, scale=self.scale, weights=self.weights,
                               chol=chol, alpha=_solve(chol, r), resid=r)

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation (of the latent function) at rows ``x``."""
        ks = _matern52(_distances(np.asarray(x, dtype=float) * self.weights, self.x), self.scale)
        mean = self.mean + ks @ self.alpha
        v = solve_triangular(self.chol, ks.T, lower=True)
        var = np.maximum(1.0 - (v * v).sum(axis=0), 1e-12)
        return mean, np.sqrt(var)


def _solve(chol: np.ndarray, r: np.ndarray) -> np.ndarray:
    return solve_triangular(chol.T, solve_triangular(chol, r, lower=True), lower=False)


def expected_improvement(
    mean: np.ndarray, std: np.ndarray, best: float, rng: np.random.Generator, beta: float
) -> np.ndarray:
    z = (mean - best) / std
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
    return (mean - best) * cdf + std * pdf


def upper_confidence(
    mean: np.ndarray, std: np.ndarray, best: float, rng: np.random.Generator, beta: float
) -> np.ndarray:
    return mean + beta * std


def thompson(
    mean: np.ndarray, std: np.ndarray, best: float, rng: np.random.Generator, beta: float
) -> np.ndarray:
    """An independent draw per candidate from its marginal posterior."""
    return mean + std * rng.standard_normal(len(mean))


Acquisition = Callable[[np.ndarray, np.ndarray, float, np.random.Generator, float], np.ndarray]
ACQUISITIONS: dict[str, Acquisition] = {
    "ei": expected_improvement,
    "ucb": upper_confidence,
    "thompson": thompson,
}
