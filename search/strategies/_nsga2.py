"""NSGA-II's child generation with the genome operators, and ``GenomeNSGAIISampler``, Optuna's
``NSGAIISampler`` that keeps those children whole.

Optuna's NSGA-II keeps its own parts (generations, non-dominated sorting, crowding, elites) and
takes the step that makes a child from the parent population as an argument
(``child_generation_strategy``). This one makes children the way evolution does: a binary
tournament by Pareto dominance picks each parent, the genomes cross with ``spaces.crossover``
(scalars swap uniformly) with probability ``crossover_prob``, then each unit (the genome, each
scalar) mutates with probability ``mutation_prob`` (default 1 / units; at least one), the genome
through ``spaces.mutate``. Dominance is Optuna's own test, with its constraint handling (a
feasible parent beats an infeasible one) when the sampler has a ``constraints_func``.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers.nsgaii._constraints_evaluation import _constrained_dominates
from optuna.study import Study
from optuna.study._constrained_optimization import _is_constrained_optimization
from optuna.study._multi_objective import _dominates
from optuna.trial import FrozenTrial

import spaces
from search.strategies._base import GENOME, family_of, genome_or_fresh
from search.strategies._evolution import mutate_scalar


class GenomeChildGeneration:
    """A ``child_generation_strategy`` for :class:`optuna.samplers.NSGAIISampler`."""

    def __init__(
        self,
        *,
        space: spaces.Space,
        crossover_prob: float = 0.9,
        mutation_prob: float | None = None,
        seed: int | None = None,
    ) -> None:
        if not 0 <= crossover_prob <= 1:
            raise ValueError(f"crossover_prob: must be in [0, 1], got {crossover_prob}")
        if mutation_prob is not None and not 0 <= mutation_prob <= 1:
            raise ValueError(f"mutation_prob: must be in [0, 1], got {mutation_prob}")
        self._space = space
        self._family = family_of(space)
        self._crossover_prob = crossover_prob
        self._mutation_prob = mutation_prob
        self._rng = np.random.default_rng(seed)
        self.last_child: dict[str, Any] | None = None  # the whole child of the last call

    def reseed_rng(self) -> None:
        self._rng = np.random.default_rng()

    def _parent(self, study: Study, population: list[FrozenTrial]) -> dict[str, Any]:
        # Optuna's own dominance tests, the constrained one when the trials carry constraints
        # (as Optuna's child generation does): a feasible trial beats an infeasible one.
        dominates = (_constrained_dominates if _is_constrained_optimization(population)
                     else _dominates)
        i, j = self._rng.choice(len(population), size=2, replace=len(population) < 2)
        a, b = population[i], population[j]
        b_wins = dominates(b, a, study.directions)
        tie = not b_wins and not dominates(a, b, study.directions)
        if b_wins or (tie and self._rng.random() < 0.5):
            a = b
        return dict(a.params)

    def __call__(
        self,
        study: Study,
        search_space: dict[str, BaseDistribution],
        parent_population: list[FrozenTrial],
    ) -> dict[str, Any]:
        rng, family = self._rng, self._family
        child = self._parent(study, parent_population)
        units = [u for u in self._space if u == GENOME or self._space.is_active(u, child)]
        genome = genome_or_fresh(family, child, rng) if family is not None else None
        if rng.random() < self._crossover_prob:
            other = self._parent(study, parent_population)
            for name in units:
                if name != GENOME and name in other and rng.random() < 0.5:
                    child[name] = other[name]
            if family is not None and genome is not None:
                genome = spaces.crossover(family, genome, genome_or_fresh(family, other, rng), rng)
        prob = self._mutation_prob if self._mutation_prob is not None else 1 / len(units)
        chosen = [u for u in units if rng.random() < prob] or [
            units[int(rng.integers(len(units)))]
        ]
        for name in chosen:
            if name == GENOME and family is not None and genome is not None:
                genome = spaces.mutate(family, genome, rng)
            elif name in search_space and name in child:
                child[name] = mutate_scalar(search_space[name], child[name], rng)
        if family is not None and genome is not None:
            child = {k: v for k, v in child.items() if not k.startswith(GENOME + ".")}
            child |= family.to_params(genome, prefix=GENOME)
        # NSGA-II takes only its intersection search space from here; on variable-depth
        # genomes the rest of the child (deeper layers) is served by GenomeNSGAIISampler's
        # sample_independent from this whole child, not redrawn at random.
        self.last_child = child
        return {k: v for k, v in child.items() if k in search_space}


class GenomeNSGAIISampler(optuna.samplers.NSGAIISampler):
    """Optuna's NSGA-II with genome children that stay whole.

    NSGA-II makes a child over its intersection search space (the parameters every trial has)
    and draws every other parameter at random. On a variable-depth genome that is most of it:
    the deeper layers. Here the child generator's whole child is kept per trial and
    ``sample_independent`` answers from it, so a child is its parents' crossover and mutation
    through and through (``decisions`` counts where each genome value came from). Its
    ``reseed_rng`` also reseeds the child generator.
    """

    def __init__(self, *, child_generation_strategy: GenomeChildGeneration, **kwargs: Any) -> None:
        super().__init__(child_generation_strategy=child_generation_strategy, **kwargs)
        self._children = child_generation_strategy
        self._whole: dict[int, dict[str, Any]] = {}  # trial id -> its whole child
        self._lock = threading.Lock()  # last_child is per call: one child made at a time
        self.decisions = {"child": 0, "random": 0}  # genome values of children, by source

    def reseed_rng(self) -> None:
        super().reseed_rng()
        self._children.reseed_rng()

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, Any]
    ) -> dict[str, Any]:
        with self._lock:
            self._children.last_child = None
            params = super().sample_relative(study, trial, search_space)
            whole = self._children.last_child
        if whole is not None:
            self._whole[trial._trial_id] = whole  # noqa: SLF001
            for name in params:
                self._count(name, "child")
        return params

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: Any
    ) -> Any:
        whole = self._whole.get(trial._trial_id)  # noqa: SLF001
        if whole is not None and param_name in whole:
            value = whole[param_name]
            try:
                ok = param_distribution._contains(param_distribution.to_internal_repr(value))  # noqa: SLF001
            except (ValueError, TypeError):
                ok = False
            if ok:
                self._count(param_name, "child")
                return value
        if whole is not None:
            self._count(param_name, "random")
        return super().sample_independent(study, trial, param_name, param_distribution)

    def _count(self, name: str, source: str) -> None:
        if name.startswith("genome."):
            self.decisions[source] += 1

    def after_trial(
        self, study: optuna.Study, trial: FrozenTrial, state: Any, values: Any
    ) -> None:
        self._whole.pop(trial._trial_id, None)  # noqa: SLF001
        super().after_trial(study, trial, state, values)
