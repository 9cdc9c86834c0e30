"""NSGA-II's genome children (issue 33): the probabilities it refuses, the binary tournament
(two different members, a population of one), how many units mutate (exactly one at
``mutation_prob=0``, only units that apply, 1 / units by default, all at 1), what crossover
takes from the second parent, and ``reseed_rng`` reaching the child generator."""

from __future__ import annotations

from typing import Any

import numpy as np
import optuna
import pytest
from optuna.trial import FrozenTrial, create_trial

import spaces
from search.strategies._base import draw, uniform_choice
from search.strategies._nsga2 import GenomeChildGeneration, GenomeNSGAIISampler

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

CELL = spaces.CellFamily()
SPACE = spaces.Space(
    {"genome": CELL, "x": spaces.Float(low=-1.0, high=1.0), "c": spaces.Categorical(("p", "q"))}
)
STUDY = optuna.create_study(directions=["maximize", "maximize"])


def _member(space: spaces.Space, values: list[float], seed: int, **fixed: Any) -> FrozenTrial:
    rec = draw(space, uniform_choice, np.random.default_rng(seed))
    params = rec.params | fixed
    return create_trial(values=values, params=params, distributions=rec.distributions)


P = _member(SPACE, [1.0, 0.0], 0, x=-0.5, c="p")
Q_EDGES = tuple(
    next(op for op in CELL.ops if op not in ("none", e)) for e in CELL.from_params(P.params).edges
)  # every edge differs from P's
Q = create_trial(
    values=[0.0, 1.0],
    distributions=P.distributions,
    params=P.params
    | CELL.to_params(spaces.CellGenome(nodes=4, edges=Q_EDGES))
    | {"x": 0.5, "c": "q"},
)


def _children(
    n: int, *, parents: tuple[FrozenTrial, ...] = (P,), space: spaces.Space = SPACE, **options: Any
) -> list[dict[str, Any]]:
    """``n`` children, each child's tournament winners replaced by ``parents`` (the first
    parent, then the second for crossover)."""
    generation = GenomeChildGeneration(space=space, seed=0, **options)
    out = []
    for _ in range(n):
        turn = iter(parents)  # this child's parents, in the order it asks for them
        generation._parent = lambda study, population, turn=turn: dict(  # type: ignore[method-assign]
            next(turn).params
        )
        out.append(generation(STUDY, P.distributions if space is SPACE else _DISTS, [P]))
    return out


def _changed(child: dict[str, Any], parent: FrozenTrial = P) -> set[str]:
    out = {name for name in ("x", "c") if child[name] != parent.params[name]}
    if CELL.from_params(child).key != CELL.from_params(parent.params).key:
        out.add("genome")
    return out


def test_probabilities_outside_0_1_are_refused_and_both_ends_are_accepted() -> None:
    for name in ("crossover_prob", "mutation_prob"):
        for bad in (-0.1, 1.5):
            with pytest.raises(ValueError, match=rf"^{name}: must be in \[0, 1\], got {bad}$"):
                GenomeChildGeneration(space=SPACE, **{name: bad})
        for ok in (0.0, 1.0):
            GenomeChildGeneration(space=SPACE, **{name: ok})(STUDY, P.distributions, [P, Q])


def test_the_tournament_takes_two_different_members_and_a_lone_member_is_the_parent() -> None:
    generation = GenomeChildGeneration(space=SPACE, seed=0)
    better = create_trial(values=[2.0, 2.0], params=Q.params, distributions=Q.distributions)
    picks = [generation._parent(STUDY, [P, better])["x"] for _ in range(100)]
    assert set(picks) == {0.5}  # never P against itself: the better of two always wins
    assert generation._parent(STUDY, [P]) == P.params
    ties = [generation._parent(STUDY, [P, Q])["x"] for _ in range(400)]
    assert 120 < ties.count(-0.5) < 280  # neither dominates: either, about half the time


def test_at_mutation_prob_0_exactly_one_unit_changes_each_unit_alike() -> None:
    changed = [_changed(child) for child in _children(300, mutation_prob=0.0, crossover_prob=0.0)]
    assert all(len(c) == 1 for c in changed)
    for unit in ("genome", "x", "c"):
        assert 60 < sum(unit in c for c in changed) < 140, unit


def test_by_default_each_unit_mutates_with_probability_one_over_units_and_all_at_1() -> None:
    counts = [len(_changed(child)) for child in _children(300, crossover_prob=0.0)]
    assert 1.15 < np.mean(counts) < 1.45  # 3 units at 1/3, at least one: 1.30 expected
    assert all(
        _changed(c) == {"genome", "x", "c"}
        for c in _children(50, crossover_prob=0.0, mutation_prob=1.0)
    )


def test_crossover_takes_scalars_half_the_time_and_genome_edges_from_the_second_parent() -> None:
    crossed = _children(300, parents=(P, Q), crossover_prob=1.0, mutation_prob=0.0)
    # x swapped half the time, then mutated (to neither) one time in three: 1/3 of children;
    # c (two choices) swapped half the time, a mutation flips it: 1/2
    assert 60 < sum(child["x"] == 0.5 for child in crossed) < 140
    assert 110 < sum(child["c"] == "q" for child in crossed) < 190
    from_q = [
        sum(a == b for a, b in zip(CELL.from_params(child).edges, Q_EDGES, strict=True))
        for child in crossed
    ]
    assert np.mean([n >= 2 for n in from_q]) > 0.8
    alone = _children(100, parents=(P, Q), crossover_prob=0.0, mutation_prob=0.0)
    assert not any(
        child["x"] == 0.5 or child["c"] == "q" and _changed(child) != {"c"} for child in alone
    )


_CONDITIONAL = spaces.Space(
    {
        "algorithm": spaces.Categorical(("sync", "asgd")),
        "send_every": spaces.Int(low=1, high=8),
        "x": spaces.Float(low=-1.0, high=1.0),
    },
    when={"send_every": {"algorithm": ["asgd"]}},
)
_SYNC = _member(_CONDITIONAL, [0.0, 0.0], 1, algorithm="sync")
_DISTS = {k: v for k, v in _SYNC.distributions.items() if k != "send_every"}


def test_only_units_that_apply_mutate_and_a_space_without_a_genome_works() -> None:
    parent = create_trial(
        values=[0.0, 0.0],
        distributions=_DISTS,
        params={k: v for k, v in _SYNC.params.items() if k in _DISTS},
    )
    children = _children(
        200, parents=(parent,), space=_CONDITIONAL, mutation_prob=0.0, crossover_prob=0.0
    )
    changed = [{k for k in _DISTS if child[k] != parent.params[k]} for child in children]
    assert all(len(c) == 1 for c in changed)  # never the absent send_every: a no-op
    assert 60 < sum(c == {"algorithm"} for c in changed) < 140


def test_reseed_rng_reseeds_the_child_generator() -> None:
    def child(reseed: bool) -> dict[str, Any]:
        generation = GenomeChildGeneration(space=SPACE, seed=0)
        with pytest.warns(optuna.exceptions.ExperimentalWarning):
            sampler = GenomeNSGAIISampler(
                population_size=4, seed=0, child_generation_strategy=generation
            )
        if reseed:
            sampler.reseed_rng()
        return generation(STUDY, P.distributions, [P, Q])

    assert child(False) == child(False)
    assert child(True) != child(False)


STACK = spaces.make_family(
    "stack",
    min_conv_layers=0,
    max_conv_layers=3,
    min_dense_layers=1,
    max_dense_layers=2,
    channels=[16, 32, 64],
    kernels=[3, 5, 7],
    widths=[64, 128, 256],
)
STACK_SPACE = spaces.Space({"genome": STACK, "lr": spaces.Float(low=1e-4, high=1e-2, log=True)})


def _stack_study(**kwargs: Any) -> tuple[optuna.Study, GenomeNSGAIISampler, GenomeChildGeneration]:
    children = GenomeChildGeneration(space=STACK_SPACE, seed=0, mutation_prob=1.0)
    with pytest.warns(optuna.exceptions.ExperimentalWarning):
        sampler = GenomeNSGAIISampler(
            population_size=4, seed=0, child_generation_strategy=children, **kwargs
        )
    return (
        optuna.create_study(directions=["maximize", "minimize"], sampler=sampler),
        sampler,
        children,
    )


def test_a_child_trial_is_its_whole_child_with_exactly_its_genomes_parameters() -> None:
    # Variable depth: a child that lost a layer keeps none of its parameters, the trial asks
    # its deeper layers from the whole child (not at random), and every genome decision of a
    # child is counted once, as the child's.
    study, sampler, children = _stack_study()
    made = 0
    for i in range(16):
        trial = study.ask()
        genome = STACK_SPACE.suggest(trial)["genome"]
        whole = children.last_child
        if whole is not None:
            names = {k for k in whole if k.startswith("genome.")}
            assert names == set(STACK.to_params(STACK.from_params(whole)))
            assert STACK.from_params(whole) == genome
            made += sum(k.startswith("genome.") for k in trial.params)
        study.tell(trial, [float(len(genome.layers)), float(i % 5)])
    assert made > 20 and sampler.decisions == {"child": made, "random": 0}


def test_a_value_the_distribution_cannot_hold_is_drawn_afresh_and_counted() -> None:
    study, sampler, children = _stack_study()
    for i in range(4):
        trial = study.ask()
        STACK_SPACE.suggest(trial)
        study.tell(trial, [float(i), float(-i)])
    trial = study.ask()
    assert trial.relative_params is not None and children.last_child is not None
    frozen = study._storage.get_trial(trial._trial_id)
    genome_name = next(k for k in children.last_child if k.startswith("genome."))
    other = optuna.distributions.CategoricalDistribution(("not-a-value",))
    before = dict(sampler.decisions)
    assert sampler.sample_independent(study, frozen, genome_name, other) == "not-a-value"
    lr = optuna.distributions.FloatDistribution(5.0, 6.0)  # the child's lr is below 1e-2
    assert 5.0 <= sampler.sample_independent(study, frozen, "lr", lr) <= 6.0
    assert sampler.decisions == {"child": before["child"], "random": before["random"] + 1}


def test_constraints_given_to_the_sampler_are_recorded_for_each_trial() -> None:
    with pytest.warns(FutureWarning):  # Optuna 5 deprecates constraints_func
        study, _, _ = _stack_study(constraints_func=lambda t: [t.params["lr"] - 5e-3])
    for i in range(6):
        trial = study.ask()
        STACK_SPACE.suggest(trial)
        study.tell(trial, [float(i), float(-i)])
    assert [t.system_attrs["constraints"] for t in study.trials] == [
        (t.params["lr"] - 5e-3,) for t in study.trials
    ]
