"""TPE that proposes new candidates: Optuna's TPE, except that among its EI candidates it picks
the best one not yet evaluated, running or waiting (canonical genome included: isomorphic cells
are one network). With a noisy objective, re-asking a cell spends an evaluation on a second seed
of one network instead of on a new one; TPE's density ratio favours exactly the cells it has seen.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.samplers import TPESampler
from optuna.study import Study
from optuna.trial import FrozenTrial

import spaces
from search._samplers._base import _ALL_STATES, candidate_key

_CACHE = 100_000  # raw params -> candidate key entries kept before the cache is cleared


class DistinctTPESampler(TPESampler):
    """:class:`optuna.samplers.TPESampler` (same keyword arguments, plus ``space``) whose relative
    proposals avoid candidates already in the study (see the module docstring). When every EI
    candidate is a repeat, TPE's own choice stands."""

    def __init__(self, *, space: spaces.Space, **tpe: Any) -> None:
        if not isinstance(space, spaces.Space):
            raise TypeError(f"space: expected a spaces.Space, got {type(space).__name__}")
        super().__init__(**tpe)
        self._space = space
        self._keys: dict[tuple[Any, ...], tuple[Any, ...] | None] = {}
        # What one trial's sample needs (seen keys, its distributions), per thread: a user may
        # call optimize(n_jobs > 1) with this sampler, and two trials sample at once.
        self._call = threading.local()

    def _key(self, params: dict[str, Any]) -> tuple[Any, ...] | None:
        raw = tuple(sorted((k, repr(v)) for k, v in params.items()))
        if raw not in self._keys:
            if len(self._keys) > _CACHE:
                self._keys.clear()
            self._keys[raw] = candidate_key(self._space, params)
        return self._keys[raw]

    def _seen_keys(self, study: Study, trial: FrozenTrial) -> set[tuple[Any, ...]]:
        seen = set()
        for t in study.get_trials(deepcopy=False, states=_ALL_STATES):
            if t.number != trial.number:
                key = self._key(self._get_params(t, study))
                if key is not None:
                    seen.add(key)
        return seen

    def _sample(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        self._call.seen, self._call.dists = self._seen_keys(study, trial), search_space
        try:
            return super()._sample(study, trial, search_space)
        finally:
            self._call.seen, self._call.dists = None, {}

    def _compute_acquisition_func(self, samples: dict[str, np.ndarray], *args: Any) -> np.ndarray:
        values = super()._compute_acquisition_func(samples, *args)
        seen: set[tuple[Any, ...]] | None = getattr(self._call, "seen", None)
        dists: dict[str, BaseDistribution] = getattr(self._call, "dists", {})
        if not seen or not samples:
            return values
        n = next(iter(samples.values())).size
        names = [name for name in samples if name in dists]
        repeat = np.zeros(n, dtype=bool)
        for i in range(n):
            params = {
                name: dists[name].to_external_repr(samples[name][i].item()) for name in names
            }
            repeat[i] = self._key(params) in seen
        if repeat.all():
            return values
        return np.where(repeat, -np.inf, values)
