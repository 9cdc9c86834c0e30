"""Aging (regularized) evolution (Real et al. 2019) over genomes and hyperparameters.

The population is the ``population`` most recently finished COMPLETE trials, read from storage on
every ask (the oldest leaves as a new one finishes), so a resumed study has the same population as
an uninterrupted one. A child: the best of ``tournament`` members drawn at random (optionally
crossed with a second winner), then mutated: each unit (the genome, each scalar dimension) with
probability ``mutation_prob`` (default 1 / units), at least one. The genome mutates through
``spaces.mutate`` (one edge / node change); a scalar is resampled or perturbed. Only dimensions
that apply to the parent mutate; when a mutation or crossover changes a value that a condition
names, the dimensions it switches on are drawn afresh and those it switches off are dropped.
Candidates already evaluated, running or waiting are avoided (canonical genome included): when a
parent's children keep repeating, the child takes more mutation steps.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.study import Study
from optuna.trial import FrozenTrial

import spaces
from search.strategies._base import (
    GENOME,
    LatestComplete,
    ProposalSampler,
    candidate_key,
    consistent,
    family_of,
    from_unit,
    scalar_distributions,
    sign,
    to_unit,
    uniform_choice,
    with_genome,
)

# (also TPE's, search.strategies._tpe, when its proposal repeats a network)
_TRIES = 50  # children tried to find one that is not a repeat
_WIDEN = 10  # failed tries before children move one more mutation step away
_SIGMA = 0.15  # perturbation of a numeric scalar, as a fraction of its (log) range


def mutate_scalar(dist: BaseDistribution, value: Any, rng: np.random.Generator) -> Any:
    """Another value: a categorical takes another choice; a number is resampled (half the time)
    or moved by a Gaussian step of ``_SIGMA`` of its range."""
    if isinstance(dist, CategoricalDistribution):
        others = [c for c in dist.choices if c != value] or list(dist.choices)
        return others[int(rng.integers(len(others)))]
    if rng.random() < 0.5:
        return uniform_choice(rng, "", dist)
    return from_unit(dist, to_unit(dist, value) + _SIGMA * float(rng.standard_normal()))  # type: ignore[arg-type]


class EvolutionSampler(ProposalSampler):
    """Aging evolution as an Optuna sampler (single objective); see the module docstring.

    >>> import optuna, spaces
    >>> space = spaces.Space({"genome": spaces.CellFamily()})
    >>> sampler = EvolutionSampler(space=space, population=4, tournament=2, seed=0)
    >>> study = optuna.create_study(sampler=sampler, direction="maximize")
    >>> for _ in range(6):
    ...     trial = study.ask()
    ...     g = space.suggest(trial)["genome"]
    ...     _ = study.tell(trial, g.edges.count("nor_conv_3x3"))
    >>> len(sampler.population(study))
    4
    """

    def __init__(
        self,
        *,
        space: spaces.Space,
        population: int = 30,
        tournament: int = 30,
        mutation_prob: float | None = None,
        crossover_prob: float = 0.0,
        seed: int | None = None,
    ) -> None:
        super().__init__(space=space, seed=seed)
        if population < 2:
            raise ValueError(f"population: must be >= 2, got {population}")
        if not 1 <= tournament <= population:
            raise ValueError(
                f"tournament: must be in [1, population={population}], got {tournament}"
            )
        if mutation_prob is not None and not 0 <= mutation_prob <= 1:
            raise ValueError(f"mutation_prob: must be in [0, 1], got {mutation_prob}")
        if not 0 <= crossover_prob <= 1:
            raise ValueError(f"crossover_prob: must be in [0, 1], got {crossover_prob}")
        self._size = population
        self._tournament = tournament
        self._mutation_prob = mutation_prob
        self._crossover_prob = crossover_prob
        # Scalar distributions as the space asks for them, conditional ones included.
        self._scalars = scalar_distributions(space)
        self._latest = LatestComplete(population)  # incremental: 10,000 trials are not sorted

    def population(self, study: Study) -> list[FrozenTrial]:
        """The current population: the last ``population`` COMPLETE trials, oldest first."""
        return self._latest(study)

    def propose(self, study: Study, trial: FrozenTrial, rng: np.random.Generator) -> dict[str, Any]:
        seen = self.seen_keys(study, exclude=trial._trial_id)  # noqa: SLF001
        members = self.population(study)
        if len(members) < self._size:
            return self.random_unique(rng, seen)
        s = sign(study)
        child: dict[str, Any] = {}
        for attempt in range(_TRIES):
            parent = self._select(members, s, rng)
            if rng.random() < self._crossover_prob:
                parent = self._crossover(parent, self._select(members, s, rng), rng)
            child = parent
            # Every _WIDEN failed attempts, one more mutation step: when a parent's neighbours
            # have all been tried, look one step further instead of repeating one.
            for _ in range(1 + attempt // _WIDEN):
                child = self._mutate(child, rng)
            if candidate_key(self._space, child) not in seen:
                break
        return child

    def _select(
        self, members: list[FrozenTrial], s: float, rng: np.random.Generator
    ) -> dict[str, Any]:
        picks = rng.choice(len(members), size=self._tournament, replace=False)
        best = max(picks, key=lambda i: (s * members[i].values[0], -i))
        # A parent from before [space] was edited: what it lacks is sampled, extras dropped.
        return consistent(
            self._space, with_genome(self._space, dict(members[best].params), rng),
            self._scalars, rng,
        )

    def _crossover(
        self, a: dict[str, Any], b: dict[str, Any], rng: np.random.Generator
    ) -> dict[str, Any]:
        child: dict[str, Any] = {}
        family = family_of(self._space)
        for name in self._space:
            if name == GENOME and family is not None:
                ga = family.from_params(a, prefix=GENOME)
                gb = family.from_params(b, prefix=GENOME)
                child |= family.to_params(spaces.crossover(family, ga, gb, rng), prefix=GENOME)
            else:  # a dimension only one parent has (a condition held for it) comes from it
                first, second = (a, b) if rng.random() < 0.5 else (b, a)
                if name in first or name in second:
                    child[name] = first[name] if name in first else second[name]
        return consistent(self._space, child, self._scalars, rng)

    def _mutate(self, parent: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        return mutate_params(self._space, self._scalars, parent, rng, self._mutation_prob)


def mutate_params(
    space: spaces.Space,
    scalars: dict[str, BaseDistribution],
    parent: dict[str, Any],
    rng: np.random.Generator,
    mutation_prob: float | None = None,
) -> dict[str, Any]:
    """A child of ``parent``: each unit (the genome, each scalar dimension that applies) mutates
    with probability ``mutation_prob`` (default 1 / units), at least one."""
    units = [u for u in space if u == GENOME or space.is_active(u, parent)]
    prob = mutation_prob if mutation_prob is not None else 1 / len(units)
    chosen = [u for u in units if rng.random() < prob]
    if not chosen:
        chosen = [units[int(rng.integers(len(units)))]]
    family = family_of(space)
    child = dict(parent)
    if GENOME in chosen and family is not None:
        genome = spaces.mutate(family, family.from_params(parent, prefix=GENOME), rng)
        child = {k: v for k, v in child.items() if not k.startswith(GENOME + ".")}
        child |= family.to_params(genome, prefix=GENOME)
    for name in chosen:
        if name in scalars and name in child:
            child[name] = mutate_scalar(scalars[name], child[name], rng)
    # A mutated condition switches dimensions on (drawn afresh) or off (dropped).
    return consistent(space, child, scalars, rng)
