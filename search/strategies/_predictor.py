"""A predictor strategy: a Gaussian process over the space's embedding (``spaces.SpaceEmbedding``:
the canonical genome and the scalar dimensions as one fixed-length vector) predicts how a
candidate ranks, with uncertainty; each proposal is the candidate that maximises an acquisition
(expected improvement by default) among mutations of the best-predicted known candidates and
uniform draws from the space.

- **Targets**: the study's values rank-normalised (quantiles, higher = better whatever the
  direction), through the inverse normal CDF. Warm-start points (:meth:`PredictorSampler.
  set_prior`) arrive as scores in [0, 1] and take the same path, so sources on other datasets
  or scales are comparable.
- **Asynchrony** ("kriging believer"): every running or waiting trial is added to the model at
  its predicted mean, so its uncertainty collapses there and concurrent asks spread out instead
  of piling onto one region.
- **Partial curves** (``partial``, off by default; BOHB's rule, Falkner et al. 2018): until
  ``startup_trials`` configurations are complete, the model is fitted on the highest epoch that
  at least ``startup_trials`` configurations reached: each one's value there, read from its
  reported curve (a paused or pruned trial's, a promoted continuation's). Under early stopping
  few trials complete, and without it the proposals stay uniform draws; yet on the anytime
  benchmark's tables (docs/anytime.md, ``detol-partial``) it did worse, not better: where the
  first epochs rank configurations poorly, it steers towards large networks that learn fast
  early and cost twice the mean to train.
- **Never a repeat**: a candidate the study holds (evaluated, running, waiting; canonical genome
  key) is not proposed.
- **State**: rebuilt from storage on every ask (a resumed study goes on as an uninterrupted one
  would); proposals come from the seed and the trial number. Until ``startup_trials`` trials
  are complete (and without a prior) proposals are uniform draws of unseen candidates.
- **Warm start**: source trials join the training data with extra noise that grows as the study's
  own trials accumulate (``_PRIOR_FADE``) and with the source's measured relevance: once the study
  has ``_RELEVANCE_AFTER`` results, a model of the source alone predicts them; the rank correlation
  of prediction and result scales the source's weight (no correlation: the source is dropped).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

import spaces
from search.strategies._base import (
    CompleteSoFar,
    ProposalSampler,
    candidate_key,
    consistent,
    draw,
    scalar_distributions,
    sign,
    study_key,
    trials_of_this_ask,
    uniform_choice,
    with_genome,
)
from search.strategies._evolution import mutate_params
from search.strategies._surrogate import (
    ACQUISITIONS,
    GaussianProcess,
    normal_scores,
    one_blas_thread,
    probit,
)
from search.strategies._window import Window

_RANDOM_SHARE = 0.1  # of the candidates: uniform draws; the rest children of the parents
_MIN_WINDOW = 20  # the window holds its best tenth, the most recent trials, a few running ones
_BELIEVER_NOISE = 0.02  # noise variance of a running trial's fantasised result
_PRIOR_MAX = 300  # source points kept: the best half of them, the rest spread over the ranks
_PRIOR_NOISE = 0.1  # extra noise variance of a source point at the start ...
_PRIOR_FADE = 20  # ... times (1 + own results / _PRIOR_FADE)
_RELEVANCE_AFTER = 5  # own results before the source's rank correlation weighs it
_CACHE = 100_000  # candidate embeddings kept before the cache is cleared
_PENDING = (TrialState.RUNNING, TrialState.WAITING)
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
_Known = tuple[Any, dict[str, Any]]  # (candidate key, params)
_Prior = tuple[list[_Known], np.ndarray, np.ndarray]  # known points, vectors, normal scores


class PredictorSampler(ProposalSampler):
    """The predictor strategy as an Optuna sampler (single objective); see the module docstring.

    >>> import optuna, spaces
    >>> space = spaces.Space({"genome": spaces.CellFamily()})
    >>> sampler = PredictorSampler(space=space, startup_trials=4, seed=0)
    >>> study = optuna.create_study(sampler=sampler, direction="maximize")
    >>> for _ in range(8):
    ...     trial = study.ask()
    ...     g = space.suggest(trial)["genome"]
    ...     _ = study.tell(trial, g.edges.count("nor_conv_3x3"))
    >>> len({candidate_key(space, t.params) for t in study.trials})
    8
    """

    def __init__(
        self,
        *,
        space: spaces.Space,
        startup_trials: int = 10,
        candidates: int = 200,
        parents: int = 10,
        acquisition: str = "ei",
        beta: float = 1.0,
        embedding: str = "path+wl",
        window: int | None = 100,
        partial: bool = False,
        seed: int | None = None,
    ) -> None:
        super().__init__(space=space, seed=seed)
        window = window or None  # 0, as None: every trial (what the error below says)
        if window is not None and window < _MIN_WINDOW:
            raise ValueError(
                f"window: must be >= {_MIN_WINDOW} (or 0 for every trial), got {window}"
            )
        if startup_trials < 1:
            raise ValueError(f"startup_trials: must be >= 1, got {startup_trials}")
        if candidates < 1:
            raise ValueError(f"candidates: must be >= 1, got {candidates}")
        if parents < 1:
            raise ValueError(f"parents: must be >= 1, got {parents}")
        if acquisition not in ACQUISITIONS:
            raise ValueError(
                f"acquisition: expected one of {sorted(ACQUISITIONS)}, got {acquisition!r}"
            )
        if beta < 0:
            raise ValueError(f"beta: must be >= 0, got {beta}")
        try:
            self._embed = spaces.SpaceEmbedding(space, kind=embedding)
        except ValueError as exc:
            raise ValueError(f"embedding: {str(exc).removeprefix('kind: ')}") from None
        self._weights = unit_weights(space, self._embed)
        units = [_unit_of(name, self._embed.genome_name) for name in self._embed.names]
        self._groups = [
            np.array([i for i, u in enumerate(units) if u == unit]) for unit in dict.fromkeys(units)
        ]
        self._startup = startup_trials
        self._candidates = candidates
        self._parents = parents
        self._acquisition = ACQUISITIONS[acquisition]
        self._beta = beta
        self._scalars = scalar_distributions(space)
        self._vectors: dict[tuple[tuple[int, int], int], tuple[int, np.ndarray]] = {}
        self._trial_keys: dict[tuple[tuple[int, int], int], tuple[int, tuple[Any, ...] | None]] = {}
        self._by_key: dict[tuple[Any, ...] | None, np.ndarray] = {}
        self._pools: dict[tuple[Any, ...] | None, list[_Known]] = {}
        # the warm-start points (key, params), their vectors and normal scores; a model of them
        self._prior: _Prior | None = None
        self._prior_model: GaussianProcess | None = None
        # The GP is cubic in its points: fitted on a window (search.strategies._window) of the
        # best tenth of all complete trials + the most recent, believing at most window/10
        # running trials (the most recently started); None fits every trial.
        self._window = window
        self._windows: dict[tuple[int, int], Window] = {}  # study_key -> its window
        # the complete trials with a candidate key, kept incrementally (no O(n) work per ask
        # beyond Optuna's listing of the trials)
        self._complete = CompleteSoFar(lambda study, t: self._trial_key(study, t) is not None)
        # per study: the reported curves of its finished trials, by epoch (see ``partial``)
        self._partial = partial
        self._curves: dict[tuple[int, int], PartialCurves] = {}

    # -- warm start --------------------------------------------------------------------------

    def set_prior(self, prior: Sequence[tuple[Mapping[str, Any], float]]) -> None:
        """Source-study points: (params restricted to this space's dimensions, score in [0, 1],
        1 = best, rank-normalised per source). They inform the model and the parents; they
        are never trials of this study. An empty sequence removes the prior."""
        points: list[tuple[dict[str, Any], float]] = []
        for i, (params, score) in enumerate(prior):
            if not 0.0 <= float(score) <= 1.0:
                raise ValueError(f"prior[{i}]: score must be in [0, 1], got {score}")
            # what a source point lacks, drawn from a stream no trial number uses
            rng = np.random.default_rng([self._seed & (2**63 - 1), 2**62, i])
            full = consistent(self._space, with_genome(self._space, dict(params), rng),
                              self._scalars, rng)
            points.append((full, float(score)))
        if not points:
            self._prior, self._prior_model = None, None
            return
        points.sort(key=lambda p: -p[1])
        if len(points) > _PRIOR_MAX:
            half = _PRIOR_MAX // 2
            rest = points[half:]
            spread = np.linspace(0, len(rest) - 1, _PRIOR_MAX - half).round().astype(int)
            points = points[:half] + [rest[i] for i in spread]
        chosen = [p for p, _ in points]
        x = self._embed.many(chosen) * self._weights
        y = probit(np.array([s for _, s in points]))
        with one_blas_thread():
            self._prior_model = GaussianProcess.fit(x, y, groups=self._groups)
        self._prior = ([(self._key(p), p) for p in chosen], x, y)

    def reseed_rng(self) -> None:
        """A new seed, and children made afresh from it."""
        super().reseed_rng()
        self._pools = {}

    # -- proposals ---------------------------------------------------------------------------

    def propose(self, study: Study, trial: FrozenTrial, rng: np.random.Generator) -> dict[str, Any]:
        with one_blas_thread():
            return self._propose(study, trial, rng)

    def _propose(
        self, study: Study, trial: FrozenTrial, rng: np.random.Generator
    ) -> dict[str, Any]:
        seen = self.seen_keys(study, exclude=trial._trial_id)  # noqa: SLF001 (caches the keys)
        done, by_number, fresh = self._complete(study)
        if self._window and len(done) > self._window:
            kept = self._windows.setdefault(study_key(study), Window())
            done = kept.pick(
                study, by_number, size=self._window, best=self._window // 10, fresh=fresh
            )
        prior = self._prior
        values = None
        if len(done) < self._startup and self._partial:
            curves = self._curves.setdefault(study_key(study), PartialCurves())
            curves.update(study, lambda t: self._trial_key(study, t))
            at = curves.at_least(self._startup)
            if at is not None:
                done = _recent_and_best(list(at.values()), sign(study), self._window)
                values = [v for _, v in done]
                done = [t for t, _ in done]
        if len(done) < self._startup and prior is None:
            return self.random_unique(rng, seen)
        gp, known, means = self._model(study, trial, done, prior, values)
        best = float(means[: len(done)].max()) if done else float(means.max())
        candidates = self._candidates_from(known, means, seen, rng)
        if not candidates:
            return self.random_unique(rng, seen)
        mean, std = gp.predict(np.array([self._embedded(k, c) for k, c in candidates]))
        score = self._acquisition(mean, std, best, rng, self._beta)
        return candidates[int(np.argmax(score))][1]

    def _model(
        self,
        study: Study,
        trial: FrozenTrial,
        done: list[FrozenTrial],
        prior: _Prior | None,
        values: list[float] | None = None,
    ) -> tuple[GaussianProcess, list[_Known], np.ndarray]:
        """The model with running trials believed; the known candidates (own, then source) and
        the model's mean at each. ``values``: each of ``done``'s value to model (default: its
        objective value)."""
        s = sign(study)
        if values is None:
            values = [t.values[0] for t in done]
        known = [(self._trial_key(study, t), t.params) for t in done]
        xs = [self._vector(study, t) for t in done]
        ys = [normal_scores(np.array([s * v for v in values]))] if done else []
        noise = [np.zeros(len(done))]
        if prior is not None:
            weight = self._relevance(np.array(xs), ys[0]) if done else 1.0
            if weight > 0:
                extra = _PRIOR_NOISE * (1 + len(done) / _PRIOR_FADE) / weight
                known += prior[0]
                xs += list(prior[1])
                ys.append(prior[2])
                noise.append(np.full(len(prior[2]), extra))
        x = np.array(xs)
        gp = GaussianProcess.fit(x, np.concatenate(ys), np.concatenate(noise), self._groups)
        means = gp.predict(x)[0]
        pending = [
            t for t in trials_of_this_ask(study, _PENDING)
            if t._trial_id != trial._trial_id  # noqa: SLF001
            and self._trial_key(study, t) is not None
        ]
        if self._window:
            pending = pending[-(self._window // 10):]
        if pending:  # kriging believer: a running trial's result is what the model expects
            xp = np.array([self._vector(study, t) for t in pending])
            gp = gp.with_points(xp, gp.predict(xp)[0], _BELIEVER_NOISE)
        return gp, known, means

    def _relevance(self, x_own: np.ndarray, y_own: np.ndarray) -> float:
        """How well the source alone ranks the study's results: Spearman's rho, clipped at 0
        (1 until there are enough results to tell)."""
        model = self._prior_model
        if model is None or len(y_own) < _RELEVANCE_AFTER:
            return 1.0
        predicted = model.predict(x_own)[0]
        rho = np.corrcoef(normal_scores(predicted), y_own)[0, 1]
        return float(max(rho, 0.0)) if np.isfinite(rho) else 0.0

    def _candidates_from(
        self,
        known: list[_Known],
        means: np.ndarray,
        seen: set[tuple[Any, ...]],
        rng: np.random.Generator,
    ) -> list[_Known]:
        """Unseen, distinct candidates: the children of the known candidates the model rates
        best, and uniform draws."""
        pools: list[list[_Known]] = []
        parent_keys: set[tuple[Any, ...] | None] = set()
        for i in np.argsort(-means, kind="stable"):
            key, params = known[i]
            if key not in parent_keys:
                parent_keys.add(key)
                pools.append(self._children(params, key))
            if len(pools) == self._parents:
                break
        out: list[_Known] = []
        taken = set(seen)
        for pool in pools:
            for key, child in pool:
                if key not in taken:
                    taken.add(key)
                    out.append((key, child))
        for _ in range(int(round(self._candidates * _RANDOM_SHARE))):
            params = draw(self._space, uniform_choice, rng).params
            key = self._key(params)
            if key is not None and key not in taken:
                taken.add(key)
                out.append((key, params))
        return out

    def _children(self, parent: dict[str, Any], key: tuple[Any, ...] | None) -> list[_Known]:
        """A parent's children (one mutation step; every third, two), with their keys: made
        once per parent from the seed and the parent's key, so every ask, process and resumed
        run sees the same ones (mutating is the costly part of an ask)."""
        hit = self._pools.get(key)
        if hit is not None:
            return hit
        digest = hashlib.sha256(repr(key).encode()).digest()
        rng = np.random.default_rng([self._seed & (2**63 - 1), int.from_bytes(digest[:8], "big")])
        # a parent from before [space] was edited: what it lacks is drawn, extras dropped
        parent = consistent(self._space, with_genome(self._space, parent, rng), self._scalars, rng)
        per_parent = max(1, round(self._candidates * (1 - _RANDOM_SHARE) / self._parents))
        pool: list[_Known] = []
        keys: set[tuple[Any, ...]] = set()
        for j in range(per_parent):
            child = mutate_params(self._space, self._scalars, parent, rng)
            if j % 3 == 2:
                child = mutate_params(self._space, self._scalars, child, rng)
            child_key = self._key(child)
            if child_key is not None and child_key not in keys:
                keys.add(child_key)
                pool.append((child_key, child))
        if len(self._pools) > _CACHE:
            self._pools.clear()
        self._pools[key] = pool
        return pool

    def _embedded(self, key: tuple[Any, ...], params: dict[str, Any]) -> np.ndarray:
        """A candidate's embedding, cached by its key (the same children recur ask after ask;
        isomorphic genomes embed alike)."""
        hit = self._by_key.get(key)
        if hit is None:
            if len(self._by_key) > _CACHE:
                self._by_key.clear()
            hit = self._by_key[key] = self._embed(params) * self._weights
        return hit

    def _key(self, params: dict[str, Any]) -> tuple[Any, ...] | None:
        return candidate_key(self._space, params)

    def _trial_key(self, study: Study, t: FrozenTrial) -> tuple[Any, ...] | None:
        """A trial's candidate key, cached per trial with its parameter count (parameters only
        grow, never change)."""
        where = (study_key(study), t._trial_id)  # noqa: SLF001
        hit = self._trial_keys.get(where)
        if hit is not None and hit[0] == len(t.params):
            return hit[1]
        key = self._key(t.params)
        if len(self._trial_keys) > _CACHE:
            self._trial_keys.clear()
        self._trial_keys[where] = (len(t.params), key)
        return key

    def _vector(self, study: Study, t: FrozenTrial) -> np.ndarray:
        """A trial's embedding, cached per trial (parameters only grow, never change). Only
        trials with a candidate key come here: every dimension that applies is in their
        parameters and their genome parses (a trial from before ``[space]`` gained a dimension
        has no key and is not modelled)."""
        where = (study_key(study), t._trial_id)  # noqa: SLF001
        hit = self._vectors.get(where)
        if hit is not None and hit[0] == len(t.params):
            return hit[1]
        vector = self._embed(dict(t.params)) * self._weights
        self._vectors[where] = (len(t.params), vector)
        return vector


class PartialCurves:
    """One study's reported curves, by epoch: ``epoch -> {candidate key: (trial, value)}``, over
    its finished trials (complete or pruned: a paused trial is a pruned one, and their curves
    never change again), each trial looked at once. A promoted continuation starts with its
    parent's values, so a configuration's value at an epoch is the same whichever of its
    trials holds it."""

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self._at: dict[int, dict[tuple[Any, ...], tuple[FrozenTrial, float]]] = {}

    def update(self, study: Study, key_of: Any) -> None:
        """Take in the trials new since the last call (``key_of(trial)``: its candidate key,
        None for one that is not modelled)."""
        for t in trials_of_this_ask(study, _FINISHED):
            if t._trial_id in self._seen:  # noqa: SLF001
                continue
            self._seen.add(t._trial_id)  # noqa: SLF001
            key = key_of(t)
            if key is None:
                continue
            for epoch, value in t.intermediate_values.items():
                if math.isfinite(value):
                    self._at.setdefault(epoch, {}).setdefault(key, (t, value))

    def at_least(self, n: int) -> dict[tuple[Any, ...], tuple[FrozenTrial, float]] | None:
        """The configurations at the highest epoch that at least ``n`` of them reached."""
        epochs = [e for e, v in self._at.items() if len(v) >= n]
        return self._at[max(epochs)] if epochs else None


def _recent_and_best(points: list[tuple[FrozenTrial, float]], s: float, window: int | None,
                     ) -> list[tuple[FrozenTrial, float]]:
    """At most ``window`` points: the best tenth and the most recent (by trial number)."""
    if not window or len(points) <= window:
        return points
    ranked = sorted(points, key=lambda p: (-s * p[1], p[0].number))
    best = ranked[: window // 10]
    kept = {id(p[0]) for p in best}
    rest = sorted((p for p in points if id(p[0]) not in kept), key=lambda p: -p[0].number)
    return best + rest[: window - len(best)]


def unit_weights(space: spaces.Space, embed: spaces.SpaceEmbedding) -> np.ndarray:
    """A weight per embedding feature such that each unit of the space (the genome, each scalar
    dimension with its one-hot or ``absent`` features) contributes the same mean squared
    distance between two uniform draws: without it, a genome's hundreds of features drown a
    learning rate's one. From 64 draws of a fixed seed (the same in every process)."""
    rng = np.random.default_rng(0)
    x = embed.many([draw(space, uniform_choice, rng).params for _ in range(64)])
    units = [_unit_of(name, embed.genome_name) for name in embed.names]
    weights = np.ones(embed.dim)
    diffs = (x[::2] - x[1::2]) ** 2  # 32 independent pairs
    for unit in set(units):
        cols = [i for i, u in enumerate(units) if u == unit]
        spread = float(diffs[:, cols].sum(axis=1).mean())
        if spread > 0:
            weights[cols] = 1.0 / np.sqrt(spread)
    return weights


def _unit_of(feature: str, genome: str | None) -> str:
    """The space dimension an embedding feature belongs to (``lr:absent`` -> ``lr``,
    ``act=relu`` -> ``act``, ``genome.path:...`` -> ``genome``)."""
    if genome is not None and feature.startswith(genome + "."):
        return genome
    return feature.split(":")[0].split("=")[0]
