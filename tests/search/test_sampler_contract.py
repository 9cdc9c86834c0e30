"""Every strategy keeps Optuna's sampler contract: Optuna's own test classes
(``optuna.testing.pytest_samplers``) run against our samplers built the way ``open_study``
builds them (seed 0; a topology space in the default run, a flat space under ``-m slow``), plus
what the suite does not ask: a study resumed after its ``[space]`` was edited, ``reseed_rng``,
and refusing a multi-objective study.

Not run: ``RelativeSamplerTestCase``. It expects ``sample_relative`` to answer every parameter
from the first trial on; samplers with startup trials return ``{}`` until then, and Optuna's
own ``TPESampler(n_startup_trials=10, multivariate=True)`` fails 42 of its 44 tests the same way
(checked with Optuna 5.0.0)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna
import pytest
from optuna.testing.pytest_samplers import (
    BasicSamplerTestCase,
    MultiObjectiveSamplerTestCase,
    SingleOnlySamplerTestCase,
)

import spaces
from search.strategies import candidate_key
from search.strategies._registry import STRATEGIES, build_sampler

SINGLE_ONLY = ("evolution", "reinforce", "predictor")
CELL = spaces.Space({"genome": spaces.CellFamily()})
FLAT = spaces.Space({"lr": spaces.Float(low=1e-4, high=1.0, log=True), "k": spaces.Int(low=1, high=8),
                     "act": spaces.Categorical(("relu", "tanh"))})
SPACES = [pytest.param(CELL, id="cell"), pytest.param(FLAT, id="flat", marks=pytest.mark.slow)]
# Small populations so that parents, not the random start, make the children within a test.
SMALL = {"evolution": {"population": 4, "tournament": 2}, "nsga2": {"population": 4},
         "tpe": {"startup_trials": 3}, "gp": {"startup_trials": 3},
         "reinforce": {}, "random": {}, "predictor": {"startup_trials": 3}}


def _factory(
    name: str, space: spaces.Space, directions: list[str]
) -> Callable[[], optuna.samplers.BaseSampler]:
    return lambda: build_sampler(name, {}, 0, space, directions)


# `auto` builds one of the others (search.strategies._auto; tests/search/test_auto.py).
CONTRACT = sorted(set(STRATEGIES) - {"auto"})


@pytest.mark.unit
def test_every_strategy_is_covered() -> None:
    assert set(SMALL) | {"auto"} == set(STRATEGIES)


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize("name", CONTRACT)
class TestOptunaBasicContract(BasicSamplerTestCase):
    @pytest.fixture
    def sampler(self, name: str, space: spaces.Space) -> Callable[[], optuna.samplers.BaseSampler]:
        return _factory(name, space, ["minimize"])


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize("name", sorted(set(CONTRACT) - set(SINGLE_ONLY)))
class TestOptunaMultiObjectiveContract(MultiObjectiveSamplerTestCase):
    @pytest.fixture
    def sampler(self, name: str, space: spaces.Space) -> Callable[[], optuna.samplers.BaseSampler]:
        return _factory(name, space, ["minimize", "maximize"])


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize("name", SINGLE_ONLY)
class TestOptunaSingleObjectiveOnlyContract(SingleOnlySamplerTestCase):
    @pytest.fixture
    def sampler(self, name: str, space: spaces.Space) -> Callable[[], optuna.samplers.BaseSampler]:
        return _factory(name, space, ["minimize"])


def _score(params: dict[str, Any]) -> float:
    return float(sum(hash(repr(v)) % 97 for v in params.values()))


def _run(study: optuna.Study, space: spaces.Space, n: int) -> None:
    for _ in range(n):
        trial = study.ask()
        space.suggest(trial)
        study.tell(trial, _score(trial.params))


EDITS = {
    "scalar added": ({"x": spaces.Float(low=0.0, high=1.0)},
                     {"x": spaces.Float(low=0.0, high=1.0), "k": spaces.Int(low=1, high=5)}),
    "genome added": ({"x": spaces.Float(low=0.0, high=1.0)},
                     {"x": spaces.Float(low=0.0, high=1.0), "genome": spaces.CellFamily()}),
    "scalar removed": ({"x": spaces.Float(low=0.0, high=1.0), "k": spaces.Int(low=1, high=5)},
                       {"x": spaces.Float(low=0.0, high=1.0)}),
    # (a categorical's choices cannot change: Optuna's storage refuses that in any study)
    "range narrowed": ({"x": spaces.Float(low=0.0, high=1.0), "k": spaces.Int(low=1, high=9)},
                       {"x": spaces.Float(low=0.5, high=0.7), "k": spaces.Int(low=3, high=4)}),
    "genome family changed": ({"genome": spaces.CellFamily()},
                              {"genome": spaces.StackFamily()}),
}


@pytest.mark.unit
@pytest.mark.parametrize("edit", sorted(EDITS))
@pytest.mark.parametrize("name", CONTRACT)
def test_a_study_resumed_after_its_space_was_edited_goes_on(name: str, edit: str) -> None:
    """Trials made with the old space are parents; the new space's trials must still be
    proposed (a missing value sampled, an extra one ignored), never crash the strategy."""
    before, after = (spaces.Space(d) for d in EDITS[edit])
    study = optuna.create_study(direction="maximize",
                                sampler=build_sampler(name, SMALL[name], 0, before, ["maximize"]))
    _run(study, before, 8)
    study.sampler = build_sampler(name, SMALL[name], 0, after, ["maximize"])
    _run(study, after, 8)
    new = study.trials[8:]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in new)
    for t in new:  # every value is one the edited space can hold
        for dim_name, dim in after.items():
            if dim_name == "genome":
                dim.from_params(t.params, prefix="genome")  # raises if not a valid genome
            else:
                value = t.params[dim_name]
                if isinstance(dim, spaces.Categorical):
                    assert value in dim.choices
                else:
                    assert dim.low <= value <= dim.high


@pytest.mark.unit
@pytest.mark.parametrize("name", ("evolution", "reinforce", "nsga2", "predictor"))
def test_reseed_rng_changes_what_is_proposed(name: str) -> None:
    """Same seed, same history: the proposals agree; after ``reseed_rng`` they do not."""
    def proposals(reseed: bool) -> list[dict[str, Any]]:
        sampler = build_sampler(name, SMALL[name], 0, CELL,
                                ["maximize"])
        study = optuna.create_study(direction="maximize", sampler=sampler)
        _run(study, CELL, 6)
        if reseed:
            sampler.reseed_rng()
        _run(study, CELL, 6)
        return [t.params for t in study.trials[6:]]

    base = proposals(False)
    assert proposals(False) == base  # the comparison below can fail
    # a fresh seed may, by chance, propose the same few (the predictor's model picks the best
    # child of the best trial whatever its seed, now and then): three tries
    assert any(proposals(True) != base for _ in range(3))


@pytest.mark.unit
@pytest.mark.parametrize("name", ("evolution", "reinforce", "predictor"))
def test_a_sampler_given_to_a_second_in_memory_study_proposes_as_a_fresh_one(name: str) -> None:
    """Every in-memory storage's first study has id 0 (and trial ids 0, 1, ...): caches keyed by
    the study id alone gave a second study the first one's trials (the predictor modelled them,
    every strategy avoided their candidates, REINFORCE kept their policy), and its proposals
    differed from a fresh sampler's from the first trial on. These strategies propose from the
    seed, the trial number and the study's own trials: reused, they propose what a fresh one
    does."""
    def second_study(sampler: optuna.samplers.BaseSampler) -> list[dict[str, Any]]:
        study = optuna.create_study(direction="maximize", sampler=sampler)
        for _ in range(12):
            trial = study.ask()
            FLAT.suggest(trial)
            study.tell(trial, -abs(trial.params["k"] - 6) - trial.params["lr"])
        return [t.params for t in study.trials]

    reused = build_sampler(name, SMALL[name], 0, FLAT, ["maximize"])
    first = optuna.create_study(direction="maximize", sampler=reused)
    _run(first, FLAT, 12)
    assert second_study(reused) == second_study(
        build_sampler(name, SMALL[name], 0, FLAT, ["maximize"]))


@pytest.mark.unit
def test_nsga2_children_on_a_variable_depth_genome_are_made_not_redrawn() -> None:
    """On the mnist1d-topology stack family, NSGA-II's own child covers only the parameters
    every trial has; the deeper layers used to be drawn at random (63 % of a child's genome
    decisions). Now the whole child comes from its parents' crossover and mutation."""
    family = spaces.make_family(
        "stack", min_conv_layers=0, max_conv_layers=3, min_dense_layers=1, max_dense_layers=2,
        channels=[16, 32, 64], kernels=[3, 5, 7], widths=[64, 128, 256])
    space = spaces.Space({"genome": family, "lr": spaces.Float(low=1e-4, high=1e-2, log=True)})
    sampler = build_sampler("nsga2", {"population": 8}, 0, space, ["maximize", "minimize"])
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    for _ in range(48):
        trial = study.ask()
        genome = space.suggest(trial)["genome"]
        size = sum(len(str(v)) for v in trial.params.values())
        study.tell(trial, [_score(trial.params) % 13, size + len(repr(genome)) % 7])
    made, random = sampler.decisions["child"], sampler.decisions["random"]  # type: ignore[attr-defined]
    assert made > 100, sampler.decisions  # 40 children of several genome decisions each
    assert random <= 0.05 * (made + random), sampler.decisions


@pytest.mark.unit
@pytest.mark.parametrize("score", ["small-first", "erratic"])
def test_tpe_never_reproposes_a_network_on_a_variable_depth_genome(score: str) -> None:
    """On the mnist1d-topology stack family, TPE's grouped mode samples each layer's parameters
    as a separate group: the per-candidate filter alone saw a whole network in 233 of 10,000 EI
    candidates. Now every relative proposal is checked as a whole network, and a repeat moves to
    an unseen neighbour: plain TPE repeats networks here, ours none."""
    family = spaces.make_family(
        "stack", min_conv_layers=0, max_conv_layers=3, min_dense_layers=1, max_dense_layers=2,
        channels=[16, 32, 64], kernels=[3, 5, 7], widths=[64, 128, 256])
    space = spaces.Space({"genome": family})

    def repeats(sampler: optuna.samplers.BaseSampler) -> int:
        study = optuna.create_study(direction="maximize", sampler=sampler)
        keys = []
        for _ in range(60):
            trial = study.ask()
            genome = space.suggest(trial)["genome"]
            keys.append(candidate_key(space, trial.params))
            # small-first: TPE's model concentrates where few networks exist; erratic: no
            # structure, so its model is sure of single networks it has seen.
            size = len(genome.layers) + sum(layer.width for layer in genome.layers) / 256
            study.tell(trial, -size if score == "small-first" else len(str(genome)) % 11)
        return sum(1 for i, key in enumerate(keys) if key in keys[:i])

    plain = repeats(optuna.samplers.TPESampler(
        seed=0, n_startup_trials=10, multivariate=True, group=True, constant_liar=True))
    ours = build_sampler("tpe", {"startup_trials": 10}, 0, space, ["maximize"])
    assert plain >= 10, "plain TPE repeated little: the test proves nothing"
    assert repeats(ours) == 0
    # Every relative proposal (50 after the startup trials) held a whole network's parameters.
    assert ours.proposals["keyed"] == 50 and ours.proposals["unkeyed"] == 0, ours.proposals  # type: ignore[attr-defined]
    if score == "small-first":
        # TPE's own next-best EI candidate, not a mutation, replaced each repeat: the groups
        # sampled first complete each later group's candidates (20 moves without that).
        assert ours.proposals["moved"] == 0, ours.proposals  # type: ignore[attr-defined]
