"""The exact expected incumbent of uniform random search, by order statistics: the yardstick of
every table benchmark (NAS-Bench-201 in :mod:`._nb201`, the flat tables in :mod:`._flat`)."""

from __future__ import annotations

import numpy as np


def expected_best(observed: np.ndarray, score: np.ndarray, weight: np.ndarray, n: int,
                  *, maximize: bool) -> float:
    """Exact expected score of the incumbent of ``n`` independent draws (with replacement):
    outcome ``i`` is drawn with probability ``weight[i]``, observed as ``observed[i]`` and
    scored as ``score[i]``; the incumbent is the best observed outcome. By order statistics:
    with outcomes sorted worst first and F their cumulative weight, the ``i``-th is the best of
    ``n`` draws with probability F_i**n - F_(i-1)**n. Ties keep one order (stable sort).

    >>> expected_best(np.array([1.0, 2.0]), np.array([1.0, 2.0]), np.array([0.5, 0.5]), 2,
    ...               maximize=True)  # best of two fair coins: 2 unless both are 1
    1.75
    """
    if n < 1:
        raise ValueError(f"n: needs at least one evaluation, got {n}")
    key = observed if maximize else -observed
    order = np.argsort(key, kind="stable")
    cdf = np.minimum(np.cumsum(weight[order]), 1.0)
    p_max = cdf**n - np.concatenate(([0.0], cdf[:-1])) ** n  # P(this outcome is the best)
    return float(np.sum(p_max * score[order]))
