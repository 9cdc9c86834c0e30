"""``strategy = "auto"``: what it picks for each kind of study, that a study records the pick, and
that a study resumed under ``auto`` keeps the strategy it was made with."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

import spaces
from search import open_study, parse_study
from search._errors import StudyError
from search.driver._study import STRATEGY_ATTR, STUDY_ATTR, recorded_strategy
from search.strategies._auto import AUTO_CHOICES, choose, space_kind
from search.strategies._registry import build_sampler

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

FLAT = spaces.Space({"lr": spaces.Float(low=1e-4, high=1e-1, log=True),
                     "units": spaces.Int(low=0, high=5)})
GENOME = spaces.Space({"genome": spaces.CellFamily(), "lr": spaces.Float(low=1e-4, high=0.1)})
CONDITIONAL = spaces.Space(
    {"algorithm": spaces.Categorical(("sync", "asgd")), "send_every": spaces.Int(low=1, high=8)},
    when={"send_every": {"algorithm": ["asgd"]}},
)


@pytest.mark.parametrize(("space", "directions", "kind"), [
    (FLAT, ["minimize"], "flat"),
    (GENOME, ["maximize"], "genome"),
    (CONDITIONAL, ["maximize"], "conditional"),
    (GENOME, ["maximize", "minimize"], "multi-objective"),
    (FLAT, ["maximize", "minimize"], "multi-objective"),
])
def test_auto_builds_the_strategy_chosen_for_the_kind_of_space(
        space: spaces.Space, directions: list[str], kind: str) -> None:
    assert space_kind(space, directions) == kind
    chosen = choose(space, directions)
    assert chosen == AUTO_CHOICES[kind]
    auto = build_sampler("auto", {}, 0, space, directions)
    assert type(auto) is type(build_sampler(chosen, {}, 0, space, directions))


def _study_file(strategy: dict[str, Any]) -> Any:
    return parse_study({"name": "auto", "objective": "flat:kc1", "metric": "val_acc",
                        "direction": "maximize", "strategy": strategy, "pruner": "none",
                        "space": {"alpha": {"type": "int", "low": 0, "high": 9}}})


def test_a_study_records_what_auto_chose_and_a_resume_keeps_the_strategy_it_ran() -> None:
    storage = optuna.storages.InMemoryStorage()
    made = open_study(_study_file({"name": "tpe", "seed": 0}), storage)  # an explicit strategy
    assert made.user_attrs[STRATEGY_ATTR] == "tpe"
    resumed = open_study(_study_file({"name": "auto", "seed": 0}), storage)
    assert resumed.user_attrs[STRATEGY_ATTR] == "tpe"  # not what auto would choose today
    assert type(resumed.sampler) is type(made.sampler)

    fresh = open_study(_study_file({"name": "auto", "seed": 0}),
                       optuna.storages.InMemoryStorage())
    chosen = choose(_study_file({"name": "auto"}).search_space, ["maximize"])
    assert chosen != "tpe"  # else the resume above would prove nothing
    assert fresh.user_attrs[STRATEGY_ATTR] == chosen


def test_a_study_made_before_strategies_were_recorded_resumes_with_its_stored_file_s() -> None:
    study = optuna.create_study()
    assert recorded_strategy(study) is None  # made by plain Optuna: auto chooses
    study.set_user_attr(STUDY_ATTR, {"strategy": {"name": "evolution"}})
    assert recorded_strategy(study) == "evolution"
    study.set_user_attr(STRATEGY_ATTR, "gp")
    assert recorded_strategy(study) == "gp"


def test_auto_takes_no_options_of_its_own() -> None:
    with pytest.raises(StudyError, match=r"^strategy\.startup_trials: not an option of the "
                       r"'auto' strategy"):
        _study_file({"name": "auto", "startup_trials": 5})


def test_search_run_s_header_says_what_auto_runs() -> None:
    from search.driver._run import Plan, _header

    sf = _study_file({"name": "auto"})
    chosen = choose(sf.search_space, ["maximize"])
    assert f"; auto ({chosen}), " in _header(Plan(sf, "s.journal", 10, 1, None, None, None))
    old = optuna.create_study()
    old.set_user_attr(STRATEGY_ATTR, "tpe")
    assert "; auto (tpe), " in _header(Plan(sf, "s.journal", 10, 1, None, None, old))


def _no_strategy_file() -> Any:
    return parse_study({"name": "auto", "objective": "flat:kc1", "metric": "val_acc",
                        "direction": "maximize", "pruner": "none",
                        "space": {"alpha": {"type": "int", "low": 0, "high": 9}}})


def test_a_study_file_that_names_no_strategy_runs_auto() -> None:
    sf = _no_strategy_file()
    assert sf.strategy.name == "auto"
    study = open_study(sf, optuna.storages.InMemoryStorage())
    assert study.user_attrs[STRATEGY_ATTR] == choose(sf.search_space, ["maximize"]) == "predictor"
    assert type(study.sampler).__name__ == "PredictorSampler"


def test_a_study_made_under_the_old_default_resumes_with_tpe_and_says_the_file_changed() -> None:
    from search.driver._study import CHANGES_ATTR, _stored_form

    # what a detol of the tpe default stored for a file that named no strategy
    old = optuna.create_study(direction="maximize")
    old.set_user_attr(STUDY_ATTR, _stored_form(_study_file({"name": "tpe"})))
    old.set_metric_names(["val_acc"])
    storage = old._storage  # noqa: SLF001
    old_name = old.study_name
    sf = _no_strategy_file().model_copy(update={"name": old_name})
    resumed = open_study(sf, storage)
    assert resumed.user_attrs[STRATEGY_ATTR] == "tpe"
    assert isinstance(resumed.sampler, optuna.samplers.TPESampler)
    [change] = resumed.user_attrs[CHANGES_ATTR]
    assert change["changes"] == ['strategy.name changed from "tpe" to "auto"']


def test_an_option_without_a_strategy_name_says_which_strategies_read_it() -> None:
    with pytest.raises(StudyError, match=r"^strategy\.population: not an option of the 'auto' "
                       r"strategy \(the default: it picks the strategy by the space and takes no "
                       r"options\); name the strategy to set it, e\.g\. name = \"evolution\" "
                       r"\(read by evolution, nsga2\)$"):
        parse_study({"name": "x", "metric": "val_accuracy", "pruner": "none",
                     "strategy": {"population": 8}})
    with pytest.raises(StudyError, match=r"^strategy\.startup_trials: .* \(read by tpe, gp, "
                       r"predictor\)$"):
        parse_study({"name": "x", "metric": "val_accuracy", "pruner": "none",
                     "strategy": {"startup_trials": 8}})
