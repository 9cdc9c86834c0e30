"""Study files: defaults, inference, and errors that name the field."""

from __future__ import annotations

import json

import pytest

from search import StudyError, parse_study


def test_defaults_and_inferred_directions() -> None:
    sf = parse_study({"name": "x", "metric": ["val_accuracy", "n_params"], "pruner": "none"})
    assert sf.directions == ["maximize", "minimize"]
    assert sf.strategy.name == "tpe" and sf.training.ranks == 2
    assert sf.launcher.command == "mpiexec -n {ranks}"


def test_algorithm_and_ranks_are_searchable() -> None:
    sf = parse_study({"name": "x", "space": {
        "algorithm": {"type": "categorical", "choices": ["sync", "asgd", "localsgd"]},
        "ranks": {"type": "int", "low": 1, "high": 3},
        "send_every": {"type": "int", "low": 1, "high": 8},
    }})
    assert sf.max_ranks == 3
    assert sf.training.with_params({"algorithm": "asgd", "send_every": 4}).send_every == 4


@pytest.mark.parametrize(
    ("table", "pruner_class"),
    [
        ({"name": "none"}, "NopPruner"),
        ({"name": "median", "warmup_epochs": 3}, "MedianPruner"),
        ({"name": "percentile", "percentile": 40.0}, "PercentilePruner"),
        ({"name": "asha", "min_epochs": 2, "reduction_factor": 2}, "SuccessiveHalvingPruner"),
        ({"name": "hyperband"}, "HyperbandPruner"),
        ({"name": "threshold", "lower": 0.2}, "ThresholdPruner"),
        ({"name": "patient", "wrapped": "median", "patience": 2, "warmup_epochs": 4},
         "PatientPruner"),
        ({"name": "top-half", "startup_trials": 3}, "MedianPruner"),
    ],
)
def test_every_pruner_builds_from_its_table_and_survives_json(table: dict, pruner_class: str) -> None:
    from search._registry import pruner_spec
    from training.contract import build_pruner

    sf = parse_study({"name": "x", "pruner": table, "training": {"epochs": 9}})
    spec = pruner_spec(sf.pruner.name, sf.pruner.spec_options(sf.training.epochs))
    pruner = build_pruner(json.loads(json.dumps(spec.to_json())))  # what rank 0 receives
    assert type(pruner).__name__ == pruner_class
    if pruner_class == "HyperbandPruner":
        assert spec.kwargs["max_resource"] == 9  # defaults to the training epochs
    if table["name"] == "top-half":  # judged after epoch 1 only
        assert pruner._n_warmup_steps == 1 and pruner._interval_steps == 10**9
    if pruner_class == "PatientPruner":
        assert type(pruner._wrapped_pruner).__name__ == "MedianPruner"
        assert pruner._wrapped_pruner._n_warmup_steps == 4


@pytest.mark.parametrize(
    ("table", "where", "message"),
    [
        ({"name": "median", "percentile": 30.0}, "pruner.percentile", "not an option of the 'median' pruner"),
        ({"name": "asha", "patience": 3}, "pruner.patience", "not an option of the 'asha' pruner"),
        ({"name": "threshold"}, "pruner", "needs lower and/or upper"),
        ({"name": "patient", "wrapped": "patient"}, "pruner.wrapped", "cannot wrap another"),
        ({"name": "patient", "wrapped": "median", "reduction_factor": 2}, "pruner.reduction_factor", "not an option"),
        ({"name": "asha", "reduction_factor": 1}, "pruner.reduction_factor", "greater than or equal to 2"),
    ],
)
def test_pruner_options_belong_to_their_pruner(table: dict, where: str, message: str) -> None:
    with pytest.raises(StudyError) as info:
        parse_study({"name": "x", "pruner": table})
    assert info.value.where == where, info.value
    assert message in info.value.message


def test_genome_table_becomes_the_genome_dimension() -> None:
    sf = parse_study({"name": "x", "space": {
        "lr": {"type": "float", "low": 0.01, "high": 0.1},
        "genome": {"family": "cell", "nodes": 4},
    }})
    space = sf.search_space
    assert list(space) == ["lr", "genome"]
    assert "space_genome" not in sf.model_dump()


@pytest.mark.parametrize(
    ("genome", "where", "message"),
    [
        ({"nodes": 4}, "space.genome.family", "required"),
        ({"family": "transformer"}, "space.genome.family", "unknown genome family 'transformer'"),
        ({"family": "cell", "ops": ["none", "conv9x9"]}, "space.genome.ops", "unknown op"),
        ({"family": "macro", "max_nodes": 40}, "space.genome.max_nodes", "out of range"),
        ({"family": "cell", "ops": ["none"]}, "space.genome.ops", "no usable op"),
        ({"family": "stack", "depth": 3}, "space.genome.depth", "unknown key for a stack family"),
    ],
)
def test_bad_genome_tables_name_the_key(genome: dict, where: str, message: str) -> None:
    with pytest.raises(StudyError) as info:
        parse_study({"name": "x", "space": {"genome": genome}})
    assert info.value.where == where, info.value
    assert message in info.value.message
    assert "\n" not in str(info.value)


def test_space_overrides_training_per_trial_and_max_ranks_covers_the_space() -> None:
    sf = parse_study({
        "name": "x",
        "training": {"ranks": 1},
        "space": {"ranks": {"type": "categorical", "choices": [1, 4]},
                  "lr": {"type": "float", "low": 0.01, "high": 0.1}},
    })
    assert sf.max_ranks == 4
    cfg = sf.training.with_params({"ranks": 4, "lr": 0.02})
    assert cfg.ranks == 4 and cfg.lr == 0.02 and sf.training.ranks == 1


@pytest.mark.parametrize(
    ("data", "where", "message"),
    [
        ({"name": "x", "strategy": "evo"}, "strategy.name", "unknown strategy 'evo' (known: ['evolution', 'gp', 'nsga2', 'random', 'reinforce', 'tpe'])"),
        ({"name": "x", "pruner": {"name": "asa"}}, "pruner.name", "unknown pruner 'asa'"),
        ({"name": "x", "budget": {"trials": 3, "retries": 2}}, "budget.retries", "unknown key"),
        ({"name": "x", "direction": ["maximize", "minimize"]}, "direction", "2 direction(s) for 1 metric(s)"),
        ({"name": "x", "direction": "up"}, "direction", "expected 'minimize' or 'maximize'"),
        ({"name": "x", "metric": ["val_accuracy", "n_params"]}, "pruner", "cannot prune multi-objective"),
        ({"name": "bad name"}, "name", "is not a study name"),
        ({"name": "x", "space": {"lr": {"low": 1, "high": 2}}}, "space.lr", "needs a type"),
        ({"name": "x", "space": {"lr": {"type": "floaty", "low": 1, "high": 2}}}, "space.lr", "unknown type 'floaty'"),
        ({"name": "x", "space": {"hidden": {"type": "float", "low": 1, "high": 2}}}, "space.hidden", "use type = \"int\""),
        ({"name": "x", "space": {"dropout": {"type": "float", "low": 0, "high": 1}}}, "space.dropout", "value 1.0 is invalid for dropout"),
        ({"name": "x", "space": {"ranks": {"type": "int", "low": 0, "high": 2}}}, "space.ranks", "value 0 is invalid"),
        ({"name": "x", "launcher": {"command": "mpiexec -n 4"}}, "launcher.command", "{ranks}"),
        ({"name": "x", "space": {"algorithm": {"type": "categorical", "choices": ["sync", "hogwild"]}}},
         "space.algorithm", "value 'hogwild' is invalid for algorithm"),
    ],
)
def test_errors_name_the_field(data: dict, where: str, message: str) -> None:
    with pytest.raises(StudyError) as info:
        parse_study(data)
    assert info.value.where == where
    assert message in info.value.message
    assert "\n" not in str(info.value)


def test_top_half_judges_only_the_first_epoch() -> None:
    import optuna

    from search._registry import pruner_spec

    sf = parse_study({"name": "x", "pruner": {"name": "top-half", "startup_trials": 2}})
    study = optuna.create_study(direction="maximize",
                                pruner=pruner_spec("top-half", sf.pruner.spec_options(5)).build())
    for value in (0.8, 0.9):  # two finished trials: median at epoch 1 is 0.85
        t = study.ask()
        t.report(value, 1)
        study.tell(t, value)
    weak = study.ask()
    weak.report(0.5, 1)
    assert weak.should_prune()
    late = study.ask()
    late.report(0.95, 1)
    assert not late.should_prune()
    late.report(0.1, 2)  # collapses later: the rule no longer looks
    assert not late.should_prune()
