"""Optuna's Gaussian-process sampler with a window: the GP is fitted on at most ``window``
complete trials -- the best tenth of the whole study and the most recent others
(``search.strategies._window``) -- and conditions on at most ``window // 10`` running trials, the
most recently started. A GP fit is cubic in its trials and its batch acquisition grows with the
running trials it conditions on, so without a window one proposal takes seconds at 1,000 trials
(5.4 s with 1,024 running) and grows without bound.

**Output warping**: the GP models the trials' values rank-normalised through the inverse normal
CDF (as the predictor does; HEBO warps its outputs for the same reason), not as they are: one
diverged run (a loss 10x the median, or 1e30) would otherwise stretch Optuna's standardisation so
that every other trial looks alike. A non-finite value never reaches the model (Optuna fails the
trial).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.samplers import GPSampler
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial

from search.strategies._base import study_key
from search.strategies._surrogate import normal_scores
from search.strategies._window import Window

_MIN_WINDOW = 20  # a window holds its best tenth, the most recent trials and a few running ones


class WindowedGPSampler(GPSampler):
    """:class:`optuna.samplers.GPSampler` (same keyword arguments, plus ``window``; see the
    module docstring). ``window=None`` (or 0) fits every trial, as Optuna does."""

    def __init__(self, *, window: int | None = None, **gp: Any) -> None:
        if window and window < _MIN_WINDOW:  # (0, as None: every trial)
            raise ValueError(
                f"window: must be >= {_MIN_WINDOW} (or 0 for every trial), got {window}"
            )
        super().__init__(**gp)
        self._window = window
        self._windows: dict[tuple[int, int], Window] = {}  # study_key -> its window

    def _sample_relative_impl(
        self,
        study: Study,
        completed_trials: list[FrozenTrial],
        running_trials: list[FrozenTrial],
        search_space: dict[str, BaseDistribution],
    ) -> dict[str, Any]:
        if self._window:
            kept = self._windows.setdefault(study_key(study), Window())
            completed_trials = kept.pick(
                study, completed_trials, size=self._window, best=self._window // 10
            )
            running_trials = running_trials[-(self._window // 10):]
        return super()._sample_relative_impl(
            study, warped(study, completed_trials), running_trials, search_space
        )


def warped(study: Study, trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """Copies of ``trials`` whose values are their normal scores per objective, in the
    objective's direction (a larger loss stays larger): ranks, so no single value can stretch
    the others together."""
    if not trials:
        return trials
    signs = np.array([1.0 if d == StudyDirection.MAXIMIZE else -1.0 for d in study.directions])
    values = np.array([t.values for t in trials], dtype=float) * signs
    scores = np.column_stack([normal_scores(values[:, i]) for i in range(values.shape[1])])
    out = []
    for t, row in zip(trials, scores * signs, strict=True):
        c = copy.copy(t)
        c.values = [float(v) for v in row]
        out.append(c)
    return out
