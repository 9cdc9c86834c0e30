"""TPE that proposes new candidates: Optuna's TPE, except that it does not propose a candidate the
study already holds, evaluated, running or waiting (canonical genome included: isomorphic cells
are one network). With a noisy objective, re-asking a cell spends an evaluation on a second seed
of one network instead of on a new one; TPE's density ratio favours exactly the cells it has seen.

Two levels, because TPE's grouped multivariate mode (``group=True``) samples one group of
parameters at a time and a variable-length genome (a stack of 0-3 layers) spreads over several
groups:

- **per EI candidate**, when one group holds the whole candidate (a fixed-size cell): among TPE's
  ``n_ei_candidates`` the best one not yet in the study wins. This filters inside TPE's private
  ``_sample`` / ``_compute_acquisition_func`` (no public hook sees the candidates); the Optuna
  range in ``pyproject.toml`` pins the version and the tests it names pin the behaviour.
  Within a call, the groups sampled so far complete each later group's candidates, so on a
  variable-length genome the filter works from the group that completes the network;
- **per proposal**, on the merged proposal of every group (``sample_relative``, public): when
  every EI candidate was a repeat (TPE's model is sure of a network the study holds), the
  proposal moves to its nearest unseen neighbour: one mutation (``spaces.mutate`` for the genome,
  evolution's scalar step), more when the neighbours are taken.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.samplers import TPESampler
from optuna.samplers._tpe.sampler import default_gamma, default_gamma_multiobjective
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

import spaces
from search.strategies._base import (
    KeyCache,
    candidate_key,
    consistent,
    scalar_distributions,
    seen_keys,
    study_key,
    with_genome,
)
from search.strategies._evolution import _TRIES, _WIDEN, mutate_params
from search.strategies._window import IncrementalGroupSpace, Window, WindowedStudy

_MIN_WINDOW = 50  # a window holds TPE's good trials (25 at most with one objective) and more
_CACHE = 100_000  # raw params -> candidate key entries kept before the cache is cleared
_MISSING = object()


class DistinctTPESampler(TPESampler):
    """:class:`optuna.samplers.TPESampler` (same keyword arguments, plus ``space`` and
    ``window``) whose relative proposals avoid candidates already in the study (see the module
    docstring). When every EI candidate is a repeat, TPE's own choice stands.

    ``window``: once more trials than this have finished, TPE is fitted on its "good" trials of
    the whole study (the best ``gamma``) plus the most recent others, ``window`` in all
    (``search.strategies._window``); None or 0 fits every trial, as Optuna does."""

    def __init__(self, *, space: spaces.Space, window: int | None = None, **tpe: Any) -> None:
        if not isinstance(space, spaces.Space):
            raise TypeError(f"space: expected a spaces.Space, got {type(space).__name__}")
        if window and window < _MIN_WINDOW:  # (0, as None: every trial)
            raise ValueError(
                f"window: must be >= {_MIN_WINDOW} (or 0 for every trial), got {window}"
            )
        super().__init__(**tpe)
        if self._group_decomposed_search_space is not None:  # same groups, each trial added once
            self._group_decomposed_search_space = IncrementalGroupSpace(True)
        self._space = space
        self._window = window
        self._windows: dict[tuple[int, int], Window] = {}  # study_key -> its window
        self._keys: dict[tuple[Any, ...], tuple[Any, ...] | None] = {}
        self._trial_keys = KeyCache()
        # What one trial's sample needs (seen keys, its distributions), per thread: a user may
        # call optimize(n_jobs > 1) with this sampler, and two trials sample at once.
        self._call = threading.local()
        # Relative proposals so far: "keyed" (the whole network known, so checked for a
        # repeat), "unkeyed" (a parameter no finished trial has yet: not checkable), "moved"
        # (a repeat replaced by its nearest unseen neighbour).
        self._scalars = scalar_distributions(space)
        # The dimensions that hold one value: Optuna leaves them out of every relative search
        # space, so each proposal and EI candidate is completed with them before it is checked
        # (without them none is a whole candidate, and the filter never applies).
        self._fixed = _only_values(self._scalars)
        self.proposals: collections.Counter[str] = collections.Counter()

    def _key(self, params: dict[str, Any]) -> tuple[Any, ...] | None:
        raw = tuple(sorted((k, repr(v)) for k, v in params.items()))
        key = self._keys.get(raw, _MISSING)
        if key is _MISSING:  # (a local: another thread may clear the cache meanwhile)
            if len(self._keys) > _CACHE:
                self._keys.clear()
            key = self._keys[raw] = candidate_key(self._space, params)
        return key  # type: ignore[return-value]

    def _seen_keys(self, study: Study, trial: FrozenTrial) -> set[tuple[Any, ...]]:
        # A running trial's params include what TPE proposed for it (the constant liar's record).
        return seen_keys(
            study, trial._trial_id, self._trial_keys, self._key,  # noqa: SLF001
            lambda t: t.params if t.state.is_finished() else self._get_params(t, study),
        )

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        self._call.seen, self._call.chosen = self._seen_keys(study, trial), {}
        self._call.windowed = self._windowed(study)
        try:
            params = super().sample_relative(study, trial, search_space)
            if not params:
                return params
            whole = self._fixed | params
            key = self._key(whole)
            self.proposals["keyed" if key is not None else "unkeyed"] += 1
            if key is None or key not in self._call.seen:
                return params
            self.proposals["moved"] += 1
            return self._neighbour(whole, self._call.seen)
        finally:
            self._call.seen, self._call.chosen, self._call.windowed = None, {}, None

    def _neighbour(self, params: dict[str, Any], seen: set[tuple[Any, ...]]) -> dict[str, Any]:
        """The nearest candidate to ``params`` the study does not hold (``params`` itself when
        none is found). Names it adds that no finished trial has are sampled independently, as
        Optuna does with any name outside the relative search space. (With ``constant_liar``,
        TPE has already recorded its own proposal for concurrent asks; the trial's real
        parameters replace it as soon as they are suggested.)"""
        rng = np.random.default_rng(self._rng.rng.randint(2**31))
        start = consistent(self._space, with_genome(self._space, params, rng), self._scalars, rng)
        for attempt in range(_TRIES):
            child = start
            for _ in range(1 + attempt // _WIDEN):
                child = mutate_params(self._space, self._scalars, child, rng)
            if candidate_key(self._space, child) not in seen:
                return child
        return params

    def _windowed(self, study: Study) -> Study | WindowedStudy:
        """``study`` as TPE's fit sees it: every trial it would read, or the window of the
        finished ones plus, with the constant liar, at most ``window // 10`` running ones (the
        most recently asked), as the GP's window does: the "bad" set stays mostly results even
        with 1,024 trials running."""
        if not self._window:
            return study
        trials = study._get_trials(  # noqa: SLF001
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED), use_cache=True
        )
        running = study._get_trials(  # noqa: SLF001
            deepcopy=False, states=(TrialState.RUNNING,), use_cache=False
        ) if self._constant_liar else []
        if len(trials) + len(running) <= self._window:
            return study
        multi = len(study.directions) > 1
        gamma = self._gamma or (default_gamma_multiobjective if multi else default_gamma)
        picked = self._windows.setdefault(study_key(study), Window()).pick(
            study, trials, size=self._window, best=gamma(len(trials))
        )
        return WindowedStudy(study, picked + running[-(self._window // 10):])

    def _sample(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        self._call.dists = search_space
        windowed = getattr(self._call, "windowed", None) or self._windowed(study)
        try:
            params = super()._sample(windowed, trial, search_space)  # type: ignore[arg-type]
        finally:
            self._call.dists = {}
        chosen = getattr(self._call, "chosen", None)
        if chosen is not None:
            chosen.update(params)  # the groups sampled so far: later groups complete them
        return params

    def _compute_acquisition_func(self, samples: dict[str, np.ndarray], *args: Any) -> np.ndarray:
        values = super()._compute_acquisition_func(samples, *args)
        seen: set[tuple[Any, ...]] | None = getattr(self._call, "seen", None)
        dists: dict[str, BaseDistribution] = getattr(self._call, "dists", {})
        chosen: dict[str, Any] = getattr(self._call, "chosen", None) or {}
        if not seen or not samples:
            return values
        n = next(iter(samples.values())).size
        names = [name for name in samples if name in dists]
        repeat = np.zeros(n, dtype=bool)
        for i in range(n):
            params = self._fixed | chosen | {
                name: dists[name].to_external_repr(samples[name][i].item()) for name in names
            }
            key = self._key(params)  # None until the groups so far make a whole network
            repeat[i] = key is not None and key in seen
        if repeat.all():
            return values
        return np.where(repeat, -np.inf, values)


def _only_values(dists: dict[str, BaseDistribution]) -> dict[str, Any]:
    """The value of each distribution that holds one (a range or choices of one value): the
    parameters TPE leaves out of its relative proposals."""
    return {
        name: dist.to_external_repr(_only_value(dist))
        for name, dist in dists.items()
        if dist.single()
    }


def _only_value(dist: BaseDistribution) -> float:
    low = getattr(dist, "low", None)
    return 0.0 if low is None else float(low)  # a categorical's one choice has index 0
