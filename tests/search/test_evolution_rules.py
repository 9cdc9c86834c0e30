"""Aging evolution's own rules on a space with a genome, categoricals, a condition and crossover
(issue 33: on a cell genome alone, with crossover off, 16 of 21 mutants lived): at least one
unit mutates, each with ``mutation_prob``; a switched condition drops or draws dimensions; the
tournament takes the best; children widen after repeats instead of repeating."""

from __future__ import annotations

from typing import Any

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import create_trial

import spaces
from search.strategies import EvolutionSampler
from search.strategies._base import scalar_distributions
from search.strategies._evolution import mutate_params, mutate_scalar

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

FAMILY = spaces.MacroFamily(min_nodes=1, max_nodes=4, ops=("conv", "max_pool"), widths=(4, 8),
                            kernels=(1, 3), max_inputs=2)
SPACE = spaces.Space(
    {
        "genome": FAMILY,
        "opt": spaces.Categorical(("sgd", "adam")),
        "momentum": spaces.Float(low=0.0, high=0.9),
        "beta": spaces.Categorical((0.9, 0.99)),
        "lr": spaces.Float(low=1e-3, high=1e-1, log=True),
    },
    when={"momentum": {"opt": "sgd"}, "beta": {"opt": "adam"}},
)
SCALARS = scalar_distributions(SPACE)


def _parent(seed: int, opt: str = "sgd") -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    params: dict[str, Any] = FAMILY.to_params(FAMILY.sample(rng), prefix="genome")
    params |= {"opt": opt, "lr": 0.01}
    params |= {"momentum": 0.5} if opt == "sgd" else {"beta": 0.9}
    return params


def _changed(parent: dict[str, Any], child: dict[str, Any]) -> set[str]:
    units = {"genome"} if any(
        parent.get(k) != child.get(k) for k in set(parent) | set(child)
        if k.startswith("genome.")) else set()
    scalars = {k for k in ("opt", "momentum", "beta", "lr")
               if k in parent and parent.get(k) != child.get(k)}
    if "opt" in scalars:  # momentum / beta follow the condition, not a mutation of their own
        scalars -= {"momentum", "beta"}
    return units | scalars


def test_with_probability_zero_exactly_one_applicable_unit_mutates_each_in_turn() -> None:
    picked = set()
    for seed in range(60):
        parent = _parent(seed)
        child = mutate_params(SPACE, SCALARS, parent, np.random.default_rng(seed), 0.0)
        changed = _changed(parent, child)
        assert len(changed) == 1, (parent, child)
        picked |= changed
    # every unit that applies to an sgd parent, never beta (its condition fails)
    assert picked == {"genome", "opt", "momentum", "lr"}


def test_with_probability_one_every_unit_mutates_and_the_condition_follows() -> None:
    for seed in range(20):
        parent = _parent(seed)
        child = mutate_params(SPACE, SCALARS, parent, np.random.default_rng(seed), 1.0)
        assert _changed(parent, child) >= {"genome", "opt", "lr"}
        assert child["opt"] == "adam"
        assert "momentum" not in child and child["beta"] in (0.9, 0.99)  # drawn afresh
        assert set(SPACE.active(child)) - {"genome"} == {"opt", "beta", "lr"}


def test_the_default_probability_is_one_over_the_applicable_units() -> None:
    counts = [len(_changed(p, mutate_params(SPACE, SCALARS, p, np.random.default_rng(s))))
              for s in range(400) for p in [_parent(s)]]
    # 4 units at 1/4 each, at least one: 1 + (3/4) ** 4 = 1.32 on average (2.1 at 1/2)
    assert 1.15 < np.mean(counts) < 1.5


def test_mutate_scalar_takes_another_choice_or_stays_in_range() -> None:
    rng = np.random.default_rng(0)
    cat = CategoricalDistribution(("a", "b", "c"))
    assert all(mutate_scalar(cat, "a", rng) in ("b", "c") for _ in range(50))
    assert mutate_scalar(CategoricalDistribution(("only",)), "only", rng) == "only"
    dist = FloatDistribution(0.0, 1.0)
    values = [mutate_scalar(dist, 0.5, rng) for _ in range(200)]
    assert all(0.0 <= v <= 1.0 for v in values)
    near = [v for v in values if abs(v - 0.5) < 0.6]
    assert len(set(values)) > 150 and len(near) == len(values)
    steps = sorted(abs(v - 0.5) for v in values)
    assert steps[len(steps) // 4] < 0.1  # half are small Gaussian steps (sigma 0.15)


def _study(sampler: EvolutionSampler, done: list[dict[str, Any]],
           dists: dict[str, Any]) -> optuna.Study:
    study = optuna.create_study(sampler=sampler, direction="maximize")
    for i, params in enumerate(done):
        study.add_trial(create_trial(params=params, distributions=dists, value=float(i)))
    return study


def test_the_tournament_of_the_whole_population_takes_the_best_either_direction() -> None:
    space = spaces.Space({"a": spaces.Categorical((0, 1, 2, 3))})
    dists = {"a": CategoricalDistribution((0, 1, 2, 3))}
    sampler = EvolutionSampler(space=space, population=4, tournament=4, seed=0)
    study = _study(sampler, [{"a": a} for a in (3, 1, 0, 2)], dists)  # values 0, 1, 2, 3
    members = sampler.population(study)
    rng = np.random.default_rng(0)
    assert [sampler._select(members, 1.0, rng)["a"] for _ in range(5)] == [2] * 5
    assert [sampler._select(members, -1.0, rng)["a"] for _ in range(5)] == [3] * 5


def test_children_widen_after_repeats_instead_of_proposing_a_seen_candidate() -> None:
    # a, b in {0, 1, 2}; one unit mutates per step. The population (0, 0) and (0, 1) and every
    # point one step from them are evaluated: only (1, 2) and (2, 2), two steps away, are new.
    space = spaces.Space({"a": spaces.Categorical((0, 1, 2)), "b": spaces.Categorical((0, 1, 2))})
    dists = {n: CategoricalDistribution((0, 1, 2)) for n in "ab"}
    done = [(1, 0), (2, 0), (0, 2), (1, 1), (2, 1), (0, 0), (0, 1)]
    for seed in range(4):
        sampler = EvolutionSampler(space=space, population=2, tournament=1, mutation_prob=0.0,
                                   seed=seed)
        study = _study(sampler, [{"a": a, "b": b} for a, b in done], dists)
        trial = study.ask()
        child = (space["a"].suggest(trial, "a"), space["b"].suggest(trial, "b"))
        assert child in {(1, 2), (2, 2)}, (seed, child)


@pytest.mark.parametrize("seed", range(3))
def test_crossover_takes_each_dimension_from_a_parent_that_has_it(seed: int) -> None:
    sampler = EvolutionSampler(space=SPACE, population=2, tournament=1, crossover_prob=1.0,
                               seed=seed)
    a, b = _parent(1, "sgd") | {"lr": 0.002}, _parent(2, "adam") | {"lr": 0.05}
    sources = set()
    for s in range(30):
        child = sampler._crossover(a, b, np.random.default_rng(100 * seed + s))
        assert child["lr"] in (0.002, 0.05)
        sources.add(child["lr"])
        if child["opt"] == "sgd":
            assert child["momentum"] == 0.5 and "beta" not in child  # only a has it
        else:
            assert child["beta"] == 0.9 and "momentum" not in child
        FAMILY.check(FAMILY.from_params(child, prefix="genome"))
    assert sources == {0.002, 0.05}


def test_the_default_population_is_the_last_30_complete_trials() -> None:
    space = spaces.Space({"a": spaces.Categorical(tuple(range(40)))})
    dists = {"a": CategoricalDistribution(tuple(range(40)))}
    sampler = EvolutionSampler(space=space, seed=0)
    study = _study(sampler, [{"a": a} for a in range(31)], dists)
    assert [t.params["a"] for t in sampler.population(study)] == list(range(1, 31))


def test_options_are_checked_and_named() -> None:
    for kwargs, message in (({"population": 1}, "^population: must be >= 2, got 1$"),
                            ({"population": 4, "tournament": 5},
                             r"^tournament: must be in \[1, population=4\], got 5$"),
                            ({"tournament": 0}, r"^tournament: must be in \[1, population=30\]"),
                            ({"mutation_prob": 1.5}, r"^mutation_prob: must be in \[0, 1\], got 1.5$"),
                            ({"crossover_prob": -0.1},
                             r"^crossover_prob: must be in \[0, 1\], got -0.1$"),
                            ({"crossover_prob": 1.5},
                             r"^crossover_prob: must be in \[0, 1\], got 1.5$")):
        with pytest.raises(ValueError, match=message):
            EvolutionSampler(space=SPACE, **kwargs)
    EvolutionSampler(space=SPACE, population=2, tournament=2, mutation_prob=0, crossover_prob=1)
    EvolutionSampler(space=SPACE, population=2, tournament=1, mutation_prob=1, crossover_prob=0)


def test_proposals_with_crossover_on_are_valid_members_of_the_space() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = EvolutionSampler(space=SPACE, population=4, tournament=2, crossover_prob=1.0,
                               seed=0)
    study = optuna.create_study(sampler=sampler, direction="minimize")
    study.optimize(lambda t: SPACE.suggest(t)["lr"], n_trials=10)
    for t in study.trials[4:]:  # evolved: crossed and mutated
        params = t.params
        FAMILY.check(FAMILY.from_params(params, prefix="genome"))
        assert ("momentum" in params) == (params["opt"] == "sgd")
        assert ("beta" in params) == (params["opt"] == "adam")


# --- the full mutant set (issue 33): what the tests above still let live --------------------

WIDE = spaces.Space({f"c{i}": spaces.Categorical(tuple(range(10))) for i in range(6)})
WIDE_DISTS = {f"c{i}": CategoricalDistribution(tuple(range(10))) for i in range(6)}


def _ask(space: spaces.Space, study: optuna.Study) -> dict[str, Any]:
    trial = study.ask()
    return {name: space[name].suggest(trial, name) for name in space}


@pytest.mark.parametrize("seed", range(6))
def test_a_full_population_evolves_one_step_from_a_member_without_crossover(seed: int) -> None:
    # Four members six steps apart; with the defaults (no crossover) and one unit a step, the
    # first child is one step from its parent: not a random draw (at exactly `population`
    # complete trials evolution has begun), not two steps, not a cross of two members.
    sampler = EvolutionSampler(space=WIDE, population=4, tournament=1, mutation_prob=0.0,
                               seed=seed)
    members = [{f"c{i}": v for i in range(6)} for v in (0, 3, 6, 9)]
    study = _study(sampler, members, WIDE_DISTS)
    child = _ask(WIDE, study)
    distance = min(sum(child[k] != m[k] for k in child) for m in members)
    assert distance == 1, child


@pytest.mark.parametrize("seed", range(3))
def test_mutation_prob_one_given_to_the_sampler_changes_every_unit(seed: int) -> None:
    sampler = EvolutionSampler(space=WIDE, population=4, tournament=4, mutation_prob=1.0,
                               seed=seed)
    study = _study(sampler, [{f"c{i}": v for i in range(6)} for v in (0, 3, 6, 9)], WIDE_DISTS)
    child = _ask(WIDE, study)  # the parent is the best member, all 9s: no unit keeps its 9
    assert all(v != 9 for v in child.values()), child


def test_a_tie_in_the_tournament_goes_to_the_oldest_member() -> None:
    space = spaces.Space({"a": spaces.Categorical((0, 1, 2, 3))})
    sampler = EvolutionSampler(space=space, population=4, tournament=4, seed=0)
    study = optuna.create_study(sampler=sampler, direction="maximize")
    for a in (2, 0, 3, 1):
        study.add_trial(create_trial(params={"a": a}, value=1.0,
                                     distributions={"a": CategoricalDistribution((0, 1, 2, 3))}))
    members = sampler.population(study)
    rng = np.random.default_rng(0)
    for s in (1.0, -1.0):
        assert [sampler._select(members, s, rng)["a"] for _ in range(5)] == [2] * 5


def test_a_parent_from_before_the_space_grew_gets_what_it_lacks_drawn() -> None:
    # members hold only "a": the space has since gained a genome and "b"
    family = spaces.CellFamily(nodes=3)
    space = spaces.Space({"genome": family, "a": spaces.Categorical((0, 1)),
                          "b": spaces.Float(low=0.0, high=1.0)})
    sampler = EvolutionSampler(space=space, population=2, tournament=2, seed=0)
    study = _study(sampler, [{"a": 0}, {"a": 1}], {"a": CategoricalDistribution((0, 1))})
    for seed in range(5):
        parent = sampler._select(sampler.population(study), 1.0, np.random.default_rng(seed))
        assert parent["a"] == 1 and 0.0 <= parent["b"] <= 1.0  # the best, "b" drawn
        family.check(family.from_params(parent, prefix="genome"))  # a genome drawn


def test_crossover_keeps_the_scalars_that_come_before_the_genome() -> None:
    space = spaces.Space({"lr": spaces.Float(low=1e-3, high=1e-1, log=True), "genome": FAMILY})
    assert list(space) == ["lr", "genome"]
    sampler = EvolutionSampler(space=space, population=2, tournament=1, crossover_prob=1.0,
                               seed=0)
    a, b = _parent(1) | {"lr": 0.002}, _parent(2) | {"lr": 0.05}
    for seed in range(10):
        child = sampler._crossover(a, b, np.random.default_rng(seed))
        assert child["lr"] in (0.002, 0.05)
        FAMILY.check(FAMILY.from_params(child, prefix="genome"))


def test_a_mutated_genome_leaves_no_parameter_of_the_old_one_behind() -> None:
    sizes = set()
    for seed in range(30):
        parent = _parent(seed)
        child = mutate_params(SPACE, SCALARS, parent, np.random.default_rng(seed), 1.0)
        genome = FAMILY.from_params(child, prefix="genome")
        own = FAMILY.to_params(genome, prefix="genome")
        assert {k: v for k, v in child.items() if k.startswith("genome.")} == own
        sizes.add(len(genome.nodes) - len(FAMILY.from_params(parent, prefix="genome").nodes))
    assert {-1, 1} <= sizes  # nodes were added and removed, so parameters came and went


def test_a_parent_lacking_a_dimension_that_applies_gets_it_drawn_not_mutated() -> None:
    for seed in range(10):
        parent = _parent(seed)
        del parent["lr"]
        child = mutate_params(SPACE, SCALARS, parent, np.random.default_rng(seed), 1.0)
        assert 1e-3 <= child["lr"] <= 1e-1
