"""Conditional dimensions through every strategy and through the study file: each sampler runs
on a space where some dimensions apply only to some trials, and every trial holds exactly the
dimensions whose condition held; the study file's ``when`` builds such a space and rejects
mistakes and impossible combinations before anything runs."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

import spaces
from search import StudyError, parse_study
from search.strategies import EvolutionSampler, candidate_key
from search.strategies._registry import STRATEGIES, build_sampler
from training.contract import TrainConfig

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

SPACE = spaces.Space(
    {
        "genome": spaces.CellFamily(),
        "ranks": spaces.Categorical((1, 2, 4)),
        "algorithm": spaces.Categorical(("sync", "asgd", "localsgd")),
        "send_every": spaces.Int(low=1, high=8),
        "local_steps": spaces.Int(low=2, high=16, step=2),
        "lr": spaces.Float(low=1e-3, high=1e-1, log=True),
    },
    when={
        "algorithm": {"ranks": [2, 4]},
        "send_every": {"algorithm": "asgd"},
        "local_steps": {"algorithm": "localsgd"},
    },
)
OPTIONS: dict[str, dict[str, Any]] = {
    "evolution": {"population": 4, "tournament": 2, "crossover_prob": 0.5},
    "reinforce": {"learning_rate": 0.5},
    "tpe": {"startup_trials": 5},
    "gp": {"startup_trials": 4},
    "nsga2": {"population": 4},
}


def objective(params: dict[str, Any]) -> float:
    """Best: 4-rank ASGD sending every 3 steps, cells of 3x3 convolutions."""
    score = params["genome"].edges.count("nor_conv_3x3") + params["ranks"] / 4
    if params.get("algorithm") == "asgd":
        score += 2 - abs(params["send_every"] - 3) / 4
    if params.get("algorithm") == "localsgd":
        score += 1 - params["local_steps"] / 32
    return score


@pytest.fixture(autouse=True)
def _quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_respects_conditions(name: str) -> None:
    sampler = build_sampler(name, OPTIONS.get(name, {}), 0, SPACE, ["maximize"])
    study = optuna.create_study(sampler=sampler, direction="maximize")
    trials = 10 if name == "gp" else 30  # GP: ~0.3 s per ask on 2 cores
    for _ in range(trials):
        trial = study.ask()
        params = SPACE.suggest(trial)
        scalars = {k: v for k, v in trial.params.items() if not k.startswith("genome.")}
        assert list(scalars) == SPACE.active(trial.params)[1:]  # genome first, then the rest
        study.tell(trial, objective(params))
    algorithms = {t.params.get("algorithm") for t in study.trials}
    assert {"asgd", "sync"} <= algorithms or name == "gp"  # both branches taken
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)


def test_evolution_mutates_conditional_dimensions_and_the_branches_they_open() -> None:
    # Parents: four 4-rank ASGD trials sending every 3 steps. Children (asked from that one
    # population) mutate algorithm and send_every too; a branch a mutation opens is drawn
    # afresh (local_steps for localsgd), one it closes is dropped (send_every for sync).
    sampler = EvolutionSampler(space=SPACE, population=4, tournament=2, seed=1)
    study = optuna.create_study(sampler=sampler, direction="maximize")
    for _ in range(4):
        study.enqueue_trial({"ranks": 4, "algorithm": "asgd", "send_every": 3, "lr": 0.01})
        trial = study.ask()
        study.tell(trial, objective(SPACE.suggest(trial)))
    children = []
    for _ in range(40):  # never told: every child comes from the same four parents
        trial = study.ask()
        SPACE.suggest(trial)
        children.append(trial.params)
    assert all(("algorithm" in p) == (p["ranks"] > 1) for p in children)
    assert all(("send_every" in p) == (p.get("algorithm") == "asgd") for p in children)
    assert all(("local_steps" in p) == (p.get("algorithm") == "localsgd") for p in children)
    assert {p.get("algorithm") for p in children} >= {"asgd", "sync", "localsgd"}
    assert {p["send_every"] for p in children if "send_every" in p} - {3}


def test_a_dimension_that_does_not_apply_is_not_part_of_the_candidate() -> None:
    genome = SPACE["genome"].to_params(spaces.CellGenome(nodes=4, edges=("skip_connect",) * 6))
    base = {**genome, "ranks": 2, "algorithm": "sync", "lr": 0.01}
    assert candidate_key(SPACE, base) == candidate_key(SPACE, {**base, "send_every": 3})
    assert candidate_key(SPACE, {**base, "algorithm": "asgd"}) is None  # send_every missing
    assert candidate_key(SPACE, {**base, "algorithm": "asgd", "send_every": 3}) is not None


# --- the study file ---------------------------------------------------------------------------


def _cat(*choices: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "categorical", "choices": list(choices), **extra}


def _int(low: int, high: int, **extra: Any) -> dict[str, Any]:
    return {"type": "int", "low": low, "high": high, **extra}


def _errors(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(StudyError) as info:
        parse_study({"name": "x", **data})
    return [(e.where, e.message) for e in info.value.errors]


def test_when_in_the_study_file_builds_a_conditional_space() -> None:
    sf = parse_study(
        {
            "name": "x",
            "training": {"algorithm": "sync"},
            "space": {
                "send_every": _int(1, 8, when={"algorithm": "asgd"}),
                "algorithm": _cat("sync", "asgd", "localsgd", when={"ranks": [2, 3]}),
                "ranks": _int(1, 3),
            },
        }
    )
    space = sf.search_space
    assert list(space) == ["ranks", "algorithm", "send_every"]
    assert space.condition("algorithm") == {"ranks": (2, 3)}
    assert min(sf.rank_choices) == 1 and sf.max_ranks == 3
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(40):
        params = space.suggest(study.ask())
        config = sf.training.with_params(params)  # every sampled combination is valid
        assert ("send_every" in params) == (config.algorithm == "asgd")
        assert config.ranks >= 2 or config.algorithm == "sync"


def test_conditional_ranks_keep_the_training_rank_count_among_the_choices() -> None:
    sf = parse_study(
        {
            "name": "x",
            "training": {"ranks": 1},
            "space": {
                "optimizer": _cat("sgd", "adam"),
                "ranks": _cat(2, 4, when={"optimizer": "sgd"}),
            },
        }
    )
    assert sf.rank_choices == [1, 2, 4]


@pytest.mark.parametrize(
    ("space", "where", "fragment"),
    [
        (
            {"lr": {"type": "float", "low": 0.01, "high": 0.1, "when": {"algo": "asgd"}}},
            "space.lr.when",
            "'algo' is not a dimension of the space (dimensions: lr)",
        ),
        (
            {
                "algorithm": _cat("sync", "asgd"),
                "send_every": _int(1, 4, when={"algorithm": "asdg"}),
            },
            "space.send_every.when",
            "'asdg' is not a choice of algorithm (one of: sync, asgd)",
        ),
        (
            {"hidden": _int(8, 64, when={"layers": 2}), "layers": _int(1, 3, when={"hidden": 8})},
            "space.hidden.when",
            "conditions form a cycle: hidden -> layers -> hidden",
        ),
        (
            {
                "lr": {"type": "float", "low": 0.01, "high": 0.1},
                "momentum": {"type": "float", "low": 0.1, "high": 0.9, "when": {"lr": 0.05}},
            },
            "space.momentum.when",
            "lr cannot be a condition",
        ),
        (
            {"layers": _int(1, 3), "hidden": _int(8, 64, when={"layers": 5})},
            "space.hidden.when",
            "5 is not a value of layers (an int from 1 to 3)",
        ),
    ],
    ids=["unknown", "not-a-choice", "cycle", "float", "out-of-range"],
)
def test_mistakes_in_when_name_the_dimension(space: dict, where: str, fragment: str) -> None:
    assert _errors({"space": space}) == [(where, _message(space, where, fragment))]


def _message(space: dict, where: str, fragment: str) -> str:
    """The one message expected; checks the fragment is in it (pytest shows both on failure)."""
    (got,) = [m for w, m in _errors({"space": space}) if w == where]
    assert fragment in got, got
    return got


def test_an_algorithm_that_needs_more_ranks_than_every_trial_has_is_refused() -> None:
    (error,) = _errors({"training": {"ranks": 1}, "space": {"algorithm": _cat("asgd", "localsgd")}})
    assert error[0] == "space.algorithm"
    assert error[1].startswith(
        "every trial would run algorithm 'asgd' or 'localsgd' with ranks = 1"
    )
    assert "need ranks >= 2" in error[1] and "plain SGD" in error[1]
    assert "set training.ranks to 2 or more" in error[1]


def test_a_combination_that_some_trials_would_sample_is_refused_with_the_when_that_avoids_it() -> (
    None
):
    space = {"algorithm": _cat("sync", "asgd", "simuparallel"), "ranks": _int(1, 3)}
    (error,) = _errors({"space": space})
    assert error[0] == "space.algorithm"
    assert error[1].startswith(
        "trials can sample algorithm 'asgd' or 'simuparallel' with ranks = 1"
    )
    assert error[1].endswith("when = { ranks = [2, 3] }")
    space["algorithm"]["when"] = {"ranks": [2, 3]}  # the suggested fix is accepted
    assert parse_study({"name": "x", "space": space}).search_space.condition("algorithm")


def test_one_rank_searched_with_a_fixed_multi_rank_algorithm_is_refused() -> None:
    (error,) = _errors({"training": {"algorithm": "asgd"}, "space": {"ranks": _cat(1, 2, 4)}})
    assert error[0] == "space.ranks"
    assert "algorithm 'asgd' (training.algorithm) with ranks = 1" in error[1]
    assert "start space.ranks at 2" in error[1]


def test_training_alone_cannot_run_a_multi_rank_algorithm_on_one_rank() -> None:
    ((where, message),) = _errors({"training": {"algorithm": "localsgd", "ranks": 1}})
    assert where == "training"
    assert message.startswith("algorithm 'localsgd' needs ranks >= 2, got 1")
    with pytest.raises(ValueError, match="'simuparallel' needs ranks >= 2"):
        TrainConfig(algorithm="simuparallel", ranks=1)
    assert TrainConfig(algorithm="sync", ranks=1).ranks == 1
    assert TrainConfig(algorithm="batch", ranks=1).ranks == 1


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (
            {"space": {"algorithm": _cat("sync", "asgd"), "send_every": _int(1, 8)}},
            "only 'asgd' uses send_every, but it would be sampled for algorithm 'sync' too; "
            'make it apply only then: when = { algorithm = "asgd" }',
        ),
        (
            {"training": {"algorithm": "sync"}, "space": {"send_every": _int(1, 8)}},
            "only 'asgd' uses send_every, but every trial runs algorithm 'sync' (training.algorithm)",
        ),
    ],
    ids=["searched-algorithm", "fixed-algorithm"],
)
def test_a_parameter_searched_for_an_algorithm_that_ignores_it_is_refused(
    data: dict, fragment: str
) -> None:
    ((where, message),) = _errors(data)
    assert where == "space.send_every"
    assert fragment in message


def test_a_parameter_of_the_algorithm_every_trial_runs_needs_no_when() -> None:
    sf = parse_study(
        {"name": "x", "training": {"algorithm": "localsgd"}, "space": {"local_steps": _int(2, 16)}}
    )
    assert sf.search_space.condition("local_steps") == {}


def test_the_shipped_algorithms_study_searches_each_parameter_only_where_it_applies() -> None:
    from pathlib import Path

    from search.studyfile._study_file import load_study_file

    sf = load_study_file(Path(__file__).parents[2] / "studies" / "digits-algorithms.toml")
    space = sf.search_space
    assert space.condition("algorithm") == {"ranks": (2, 3)}
    assert space.condition("send_every") == {"algorithm": ("asgd",)}
    assert space.condition("local_steps") == {"algorithm": ("localsgd",)}
