"""Study files: defaults, inference, and errors that name the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from search import StudyError, load_study_file, parse_study
from search.studyfile._study_file import StudyFile

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def test_defaults_and_inferred_directions() -> None:
    sf = parse_study({"name": "x", "metric": ["val_accuracy", "n_params"], "pruner": "none"})
    assert sf.directions == ["maximize", "minimize"]
    assert sf.strategy.name == "auto" and sf.training.ranks == 2
    assert sf.launcher.command == "mpiexec -n {ranks}"


def test_algorithm_and_ranks_are_searchable() -> None:
    sf = parse_study({"name": "x", "space": {
        "algorithm": {"type": "categorical", "choices": ["sync", "asgd", "localsgd"],
                      "when": {"ranks": [2, 3]}},
        "ranks": {"type": "int", "low": 1, "high": 3},
        "send_every": {"type": "int", "low": 1, "high": 8, "when": {"algorithm": "asgd"}},
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
        ({"name": "top-half", "startup_trials": 3}, "TopHalfPruner"),
        ({"name": "dominated", "fraction": 0.3, "warmup_epochs": 2}, "DominatedPruner"),
    ],
)
def test_every_pruner_builds_from_its_table_and_survives_json(table: dict, pruner_class: str) -> None:
    from search.strategies._registry import pruner_spec
    from training.contract import build_pruner

    sf = parse_study({"name": "x", "pruner": table, "training": {"epochs": 9}})
    spec = pruner_spec(sf.pruner.name, sf.pruner.spec_options(sf.training.epochs))
    pruner = build_pruner(json.loads(json.dumps(spec.to_json())))  # what rank 0 receives
    assert type(pruner).__name__ == pruner_class
    if pruner_class == "HyperbandPruner":
        assert spec.kwargs["max_resource"] == 9  # defaults to the training epochs
    if table["name"] == "top-half":
        assert pruner.startup_trials == 3
    if pruner_class == "DominatedPruner":
        assert (pruner.fraction, pruner.n_startup_trials, pruner.n_warmup_steps) == (0.3, 5, 2)
    if pruner_class == "PatientPruner":
        assert type(pruner._wrapped_pruner).__name__ == "MedianPruner"
        assert pruner._wrapped_pruner._n_warmup_steps == 4


@pytest.mark.parametrize(
    ("pruner", "epochs", "first_rung", "rungs"),
    [
        # asha's default: the third rung (x r^2) is the full training
        ({"name": "asha", "promote": True}, 20, 3, [3, 9]),
        ({"name": "asha"}, 27, 3, [3, 9]),
        ({"name": "asha", "reduction_factor": 2}, 10, 3, [3, 6]),
        ({"name": "asha"}, 9, 1, [1, 3]),
        ({"name": "patient", "wrapped": "asha"}, 20, 3, [3, 9]),
        ({"name": "asha", "promote": True, "min_epochs": 1}, 20, 1, [1, 3, 9]),  # as asked
        ({"name": "hyperband", "promote": True}, 20, 1, None),  # hyperband's smallest: 1
    ],
)
def test_the_first_rung_defaults_to_a_ninth_of_the_training(
        pruner: dict, epochs: int, first_rung: int, rungs: list[int] | None) -> None:
    from search.driver._run import _header
    from search.strategies._registry import pruner_spec

    sf = parse_study({"name": "x", "pruner": pruner, "training": {"epochs": epochs},
                      "checkpoints": {"every": 0}})
    options = sf.pruner.spec_options(epochs)  # what the driver and every trial's rank 0 build
    assert options["min_epochs"] == first_rung
    if pruner["name"] != "patient":  # (patient wraps Optuna's pruner, built from the same)
        assert pruner_spec(sf.pruner.name, options).kwargs["min_resource"] == first_rung
    if rungs is not None and pruner["name"] == "asha":  # what `search run` says first
        plan = type("Plan", (), {"sf": sf, "target": 10, "finished": 0, "url": "x.db",
                                 "concurrency": 1})()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("search.driver._run._strategy", lambda plan: "auto")
            assert f"rungs at epochs {', '.join(map(str, rungs))}" in _header(plan)
    if rungs is not None:
        from search.pruners._promotion import PromotingHalving

        halving = PromotingHalving(min_resource=first_rung,
                                   reduction_factor=sf.pruner.reduction_factor)
        assert halving.rung_epochs(0, epochs) == rungs


@pytest.mark.parametrize(
    ("table", "where", "message"),
    [
        ({"name": "median", "percentile": 30.0}, "pruner.percentile", "not an option of the 'median' pruner"),
        ({"name": "asha", "patience": 3}, "pruner.patience", "not an option of the 'asha' pruner"),
        ({"name": "threshold"}, "pruner", "needs lower and/or upper"),
        ({"name": "patient", "wrapped": "patient"}, "pruner.wrapped", "cannot wrap another"),
        ({"name": "patient", "wrapped": "median", "reduction_factor": 2}, "pruner.reduction_factor", "not an option"),
        ({"name": "asha", "reduction_factor": 1}, "pruner.reduction_factor", "greater than or equal to 2"),
        ({"name": "dominated", "percentile": 30.0}, "pruner.percentile", "not an option of the 'dominated' pruner (its options: fraction, startup_trials, warmup_epochs)"),
        ({"name": "dominated", "fraction": 0}, "pruner.fraction", "greater than 0"),
        ({"name": "dominated", "fraction": 1.5}, "pruner.fraction", "less than or equal to 1"),
        ({"name": "median", "fraction": 0.5}, "pruner.fraction", "not an option of the 'median' pruner"),
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
        ({"name": "x", "strategy": "evo"}, "strategy.name", "unknown strategy 'evo' (known: auto, evolution, gp, nsga2, predictor, random, reinforce, tpe)"),
        ({"name": "x", "pruner": {"name": "asa"}}, "pruner.name", "unknown pruner 'asa'"),
        ({"name": "x", "budget": {"trials": 3, "retries": 2}}, "budget.retries", "unknown key"),
        ({"name": "x", "direction": ["maximize", "minimize"]}, "direction", "2 direction(s) for 1 metric(s)"),
        ({"name": "x", "direction": "up"}, "direction", "expected 'minimize' or 'maximize'"),
        ({"name": "x", "metric": ["val_accuracy", "n_params"], "pruner": "asha"}, "pruner", "the 'asha' pruner cannot prune multi-objective"),
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


@pytest.mark.parametrize("pruner", ["dominated", "none"])
def test_multi_objective_studies_take_the_dominated_pruner_or_none(pruner: str) -> None:
    sf = parse_study({"name": "x", "metric": ["val_accuracy", "n_params"], "pruner": pruner})
    assert sf.pruner.name == pruner and sf.directions == ["maximize", "minimize"]
    assert parse_study({"name": "x", "pruner": pruner}).pruner.name == pruner  # one objective too


def test_top_half_judges_only_the_first_epoch() -> None:
    import optuna

    from search.strategies._registry import pruner_spec

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


def test_top_half_takes_the_median_of_every_trial_not_only_the_survivors() -> None:
    # Egele et al.'s rule: the median of all epoch-1 values. Optuna's MedianPruner would take
    # the complete trials' only (0.8, 0.9: median 0.85) and stop 0.5; here the pruned trials'
    # 0.1, 0.2, 0.3 count too: median 0.4, and 0.5 goes on.
    import optuna
    from optuna.trial import TrialState

    from search.strategies._registry import pruner_spec

    sf = parse_study({"name": "x", "pruner": {"name": "top-half", "startup_trials": 2}})
    study = optuna.create_study(direction="maximize",
                                pruner=pruner_spec("top-half", sf.pruner.spec_options(5)).build())
    for value, state in ((0.8, TrialState.COMPLETE), (0.9, TrialState.COMPLETE),
                         (0.1, TrialState.PRUNED), (0.2, TrialState.PRUNED),
                         (0.3, TrialState.PRUNED)):
        t = study.ask()
        t.report(value, 1)
        study.tell(t, value if state == TrialState.COMPLETE else None, state=state)
    middle = study.ask()
    middle.report(0.5, 1)
    assert not middle.should_prune()
    low = study.ask()
    low.report(0.25, 1)  # median of 0.8, 0.9, 0.1, 0.2, 0.3, 0.5 (running) and 0.25: 0.3
    assert low.should_prune()


def test_every_mistake_is_reported_at_once_in_plain_words() -> None:
    with pytest.raises(StudyError) as info:
        parse_study({
            "name": "x", "metric": "accuracy", "strategy": "evo", "budget": {"trails": 3},
            "pruner": {"name": "median", "patience": 2, "percentile": 30.0},
            "training": {"activation": "relux", "epocs": 3},
            "space": {"lr": {"type": "float", "low": 1.0, "high": 0.1},
                      "momentum": {"type": "floaty"}},
        })
    got = [(e.where, e.message) for e in info.value.errors]
    assert got == [
        ("metric", "unknown metric 'accuracy' (known: val_accuracy, val_loss, val_mae, "
                   "train_loss, n_params, flops, train_time_s, or val_<name> of a metrics "
                   "plug-in)"),
        ("budget.trails", "unknown key"),
        ("strategy.name", "unknown strategy 'evo' (known: auto, evolution, gp, nsga2, predictor, "
                          "random, reinforce, tpe)"),
        ("pruner.patience", "not an option of the 'median' pruner (its options: startup_trials, "
                            "warmup_epochs)"),
        ("pruner.percentile", "not an option of the 'median' pruner (its options: "
                              "startup_trials, warmup_epochs)"),
        ("training.activation", "'relux' is not one of: relu, tanh, gelu, silu"),
        ("training.epocs", "unknown key"),
        ("space.lr", "low (1.0) must be <= high (0.1)"),
        ("space.momentum", "unknown type 'floaty' (known: categorical, float, int)"),
    ]
    # The first mistake is where/message; str() is one line per mistake, in the CLI's shape.
    assert (info.value.where, info.value.message) == got[0]
    lines = str(info.value).splitlines()
    assert lines[0] == f"{got[0][0]}: {got[0][1]}"
    assert lines[1:] == [f"error: {w}: {m}" for w, m in got[1:]]


def test_space_checks_run_against_what_is_right_in_a_broken_training_table() -> None:
    with pytest.raises(StudyError) as info:
        parse_study({"name": "x", "training": {"activation": "relux", "ranks": 1}, "space": {
            "algorithm": {"type": "categorical", "choices": ["sync", "asgd"]},
        }})
    assert [e.where for e in info.value.errors] == ["training.activation", "space.algorithm"]
    assert "'asgd' with ranks = 1 (training.ranks)" in info.value.errors[1].message
    # A check that reads a wrong key waits for it: no guess from the default algorithm.
    with pytest.raises(StudyError) as info:
        parse_study({"name": "x", "training": {"algorithm": "ASGD"}, "space": {
            "send_every": {"type": "int", "low": 1, "high": 8},
        }})
    assert [e.where for e in info.value.errors] == ["training.algorithm"]


def test_space_checks_that_do_not_need_a_broken_table_still_run() -> None:
    with pytest.raises(StudyError) as info:
        parse_study({"name": "x", "training": {"activation": "relux"}, "space": {
            "seed": {"type": "int", "low": 1, "high": 3},
            "hidden": {"type": "int", "low": 8, "high": 64, "when": {"layers": 2}},
        }})
    assert [e.where for e in info.value.errors] == [
        "training.activation", "space.seed", "space.hidden.when"
    ]
    assert "(known: lr, batch_size," in info.value.errors[1].message


def test_load_study_file_puts_the_file_name_before_every_mistake(tmp_path) -> None:
    from search.studyfile._study_file import load_study_file

    path = tmp_path / "two.toml"
    path.write_text('name = "t"\n[training]\nactivation = "relux"\n[budget]\ntrails = 3\n')
    with pytest.raises(StudyError) as info:
        load_study_file(path)
    assert [e.where for e in info.value.errors] == [f"{path}: budget.trails",
                                                   f"{path}: training.activation"]


@pytest.mark.parametrize(
    "path", sorted((Path(__file__).parents[2] / "studies").glob("*.toml")), ids=lambda p: p.stem
)
def test_every_shipped_study_file_is_valid(path: Path) -> None:
    sf = load_study_file(path)
    assert sf.name == path.stem


def test_several_metrics_default_to_the_dominated_pruner() -> None:
    sf = StudyFile.model_validate({"name": "x", "metric": ["val_accuracy", "n_params"]})
    assert sf.pruner.name == "dominated"
    one = StudyFile.model_validate({"name": "x"})
    assert one.pruner.name == "median"
