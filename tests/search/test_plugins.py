"""Plug-ins in the study file: free parameter names, plug-in metrics, and the up-front check that
imports, builds and runs each plug-in once in a fresh Python (one line naming the key)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from search._errors import StudyError
from search.studyfile._study_file import parse_study
from tests.cli_helpers import run_search
from training.contract import PluginError, TrainConfig, check_plugins, open_storage

JOBS = Path(__file__).resolve().parents[1] / "mpi_jobs"  # _user_plugins.py lives there
R = "_research_plugins"  # tests/mpi_jobs/_research_plugins.py: research code's shapes
ENV = {"PYTHONPATH": str(JOBS)}


def _study(training: dict, space: dict | None = None, **top: object) -> dict:
    return {"name": "p", **top, "training": {"dataset": "digits", **training},
            "space": space or {}}


@pytest.mark.unit
def test_free_space_names_go_to_a_model_plugin_and_are_refused_without_one() -> None:
    width = {"type": "int", "low": 8, "high": 32}
    sf = parse_study(_study({"model": "_user_plugins:build"}, {"width": width}))
    config = sf.training.with_params({"width": 16, "lr": 0.1})
    assert config.params == {"width": 16} and config.lr == 0.1
    assert config.plugin_params()["width"] == 16 and config.plugin_params()["hidden"] == 128
    with pytest.raises(StudyError, match="space.width: not a searchable training parameter"):
        parse_study(_study({}, {"width": width}))
    with pytest.raises(StudyError, match="space.epochs: not a searchable"):  # ours stay ours
        parse_study(_study({"model": "_user_plugins:build"}, {"epochs": width}))


@pytest.mark.unit
def test_plugin_metrics_and_regression_metrics_are_checked_in_the_study_file() -> None:
    sf = parse_study(_study({"task": "regression"}))
    assert sf.objectives == ["val_loss"] and sf.directions == ["minimize"]
    assert parse_study(_study({"task": "regression"}, metric="val_mae")).directions == [
        "minimize"]
    with pytest.raises(StudyError, match="reports no val_accuracy"):
        parse_study(_study({"task": "regression"}, metric="val_accuracy"))
    with pytest.raises(StudyError, match="val_top2.* needs a \\[training\\] metrics plug-in"):
        parse_study(_study({}, metric="val_top2"))
    with pytest.raises(StudyError, match="direction: required for metric 'val_top2'"):
        parse_study(_study({"metrics": "_user_plugins:top2"}, metric="val_top2"))
    with pytest.raises(StudyError, match="training.model: .*'package.module:function'"):
        parse_study(_study({"model": "build"}))


def _check(env: dict[str, str] | None = None, **training: object) -> str:
    config = TrainConfig(**{"dataset": "digits", **training}).model_dump()  # type: ignore[arg-type]
    try:
        names = check_plugins(config, {**ENV, **(env or {})}, objectives=["val_loss"])
    except PluginError as exc:
        return str(exc)
    return "ok: " + ", ".join(names)


GOOD = {"model": "_user_plugins:build", "dataset": "_user_plugins:digits",
        "loss": "_user_plugins:mean_loss", "metrics": "_user_plugins:top2"}
BAD = [
    ({"model": "_no_such_pkg.model:build"},
     "training.model: cannot import '_no_such_pkg.model': ModuleNotFoundError: No module named "
     "'_no_such_pkg'"),
    ({"model": "_user_plugins:returns_dict"},
     "training.model: returns_dict() returned dict, expected torch.nn.Module"),
    ({"model": "_user_plugins:wrong_width"},
     "training.model: the forward pass on 2 training samples of shape (1, 8, 8) failed: "
     "RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x64 and 10x10)"),
    ({"model": "training.models:build"},
     "training.model: module 'training.models' is in a package named 'training', the name of "
     "one of detol's own packages (search, training, spaces): rename your package"),
    ({"loss": "_user_plugins:not_a_loss"},
     "training.loss: not_a_loss() returned int, expected a function (output, target) -> loss"),
    ({"dataset": "_user_plugins:no_such_function"},
     "training.dataset: module '_user_plugins' has no function 'no_such_function'"),
    ({"dataset": f"{R}:dict_digits_target_y"},
     "training.target: the samples are dicts with keys ['pixels', 'y'] and none of ['labels', "
     "'label']: set [training] target = KEY"),
    ({"dataset": f"{R}:dict_digits", "target": "label"},
     "training.target: the samples are dicts with keys ['labels', 'pixels'], none is 'label'"),
    ({"model": f"{R}:no_logits_model"},
     "training.model: the model's output is a dict with keys ['scores'] and no 'logits' for "
     "the prediction"),
    ({"model": f"{R}:tuple_model", "loss": "model"},
     'training.loss: "model" (the model computes its own loss) needs dict samples, whose '
     "target key the model is given; the samples are (inputs, target) pairs"),
    ({"model": f"{R}:keywords_no_loss_model", "dataset": f"{R}:dict_digits", "loss": "model"},
     "training.loss: \"model\": the model's output has no loss (a Hugging Face model computes "
     "one when it is given the labels: are they in the samples under [training] target?)"),
    ({"model": "_user_plugins:build", "optimizer": f"{R}:half_of_them"},
     "training.optimizer: half_of_them() optimizes 1 tensors, the model has 6 parameters: give "
     "it all of model_parameters (each once)"),
    ({"model": f"{R}:elementwise_model", "objectives": ["val_accuracy", "flops"]},
     "metric: 'flops' cannot be counted for this model (torch's FlopCounterMode saw no matrix "
     "product or convolution in its forward pass on a training sample): trials would not report "
     "it"),
    ({"model": "_user_plugins:build", "prune": {"keep": ["encoder"]}},
     "training.prune.keep: no module named 'encoder' in this Sequential (names as "
     "model.named_modules() gives them)"),
    ({"model": "_user_plugins:build", "prune": {"keep": ["1", "3"]}},  # both hidden layers
     "training.prune: cannot prune this Sequential: no linear or convolution layer whose outputs "
     "may be removed (the classifier's and the kept layers' are never)"),
    ({"model": "_user_plugins:build", "prune": {"criterion": "bn_l1"}},
     "training.prune.criterion: 'bn_l1' needs a batch norm with a scale in every pruned group; "
     "1's has none (use 'l1', or keep that layer with prune.keep)"),
]
# Research code's shapes that the check passes (the metrics its trials report).
SHAPES = [
    ({"model": "_user_plugins:build", "dataset": f"{R}:dict_digits"}, "val_loss, val_accuracy"),
    ({"model": f"{R}:tuple_model", "metrics": "_user_plugins:top2"},
     "val_loss, val_accuracy, val_top2"),
    ({"model": f"{R}:mapping_model", "objectives": ["val_accuracy", "flops"]},
     "val_loss, val_accuracy"),
    ({"model": f"{R}:tiny_bert", "dataset": f"{R}:token_digits", "loss": "model",
      "optimizer": "adamw", "lr_schedule": "cosine", "warmup_epochs": 0.5,
      "precision": "bf16", "objectives": ["val_accuracy", "flops"]}, "val_loss, val_accuracy"),
    ({"model": "_user_plugins:build", "optimizer": f"{R}:nesterov",
      "lr_schedule": f"{R}:halve_late"}, "val_loss, val_accuracy"),
    ({"model": f"{R}:tiny_vit", "dataset": f"{R}:pixel_digits", "loss": "model",
      "prune": {"target": 0.5}}, "val_loss, val_accuracy"),
]
# The checks of GOOD and of each BAD study in ONE fresh Python with ENV (torch imported once,
# not once per case): the check's own code (training.plugins.check._run) on each request.
# check_plugins' process around it (environment, answer, errors) is what _check and
# test_search_validate_prints_the_line_and_writes_nothing run.
_MANY = """
import json, sys
from training.plugins.check import _run
from training.plugins._plugins import PluginError
lines = []
for request in json.loads(sys.stdin.read()):
    try:
        lines.append("ok: " + ", ".join(_run(request, {})[0]))
    except PluginError as exc:
        lines.append(str(exc))
print(json.dumps(lines))
"""


@pytest.fixture(scope="module")
def checked() -> list[str]:
    """The one line of each of GOOD, *BAD, as the up-front check gives it."""
    def request(t: dict) -> dict:
        objectives = t.get("objectives", ["val_loss"])
        t = {k: v for k, v in t.items() if k != "objectives"}
        return {"config": TrainConfig(**{"dataset": "digits", **t}).model_dump(),
                "objectives": objectives}

    requests = [request(t) for t in [GOOD, *(t for t, _ in BAD), *(t for t, _ in SHAPES)]]
    proc = subprocess.run([sys.executable, "-c", _MANY], input=json.dumps(requests),
                          env={**os.environ, **ENV}, capture_output=True, text=True,
                          timeout=300, check=True)
    return json.loads(proc.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def test_good_plugins_pass_the_check_and_name_their_metrics(checked: list[str]) -> None:
    assert checked[0] == "ok: val_loss, val_accuracy, val_top2"


@pytest.mark.parametrize(("case", "line"), [(i + 1, line) for i, (_, line) in enumerate(BAD)],
                         ids=[next(iter(t.values())) for t, _ in BAD])
def test_each_bad_plugin_gives_its_one_line(checked: list[str], case: int, line: str) -> None:
    assert checked[case] == line


@pytest.mark.parametrize(("case", "names"),
                         [(1 + len(BAD) + i, names) for i, (_, names) in enumerate(SHAPES)],
                         ids=["dict-samples", "tuple-output", "mapping-output", "hf-own-loss",
                              "optimizer-and-schedule-plugins", "hf-vit-pruned"])
def test_research_code_shapes_pass_the_check(checked: list[str], case: int, names: str) -> None:
    assert checked[case] == f"ok: {names}"


def test_a_summed_loss_passes_with_a_one_line_warning() -> None:
    config = TrainConfig(dataset="digits", model="_user_plugins:build",
                         loss=f"{R}:summed_loss").model_dump()
    warnings: list[str] = []
    assert check_plugins(config, ENV, objectives=["val_loss"], warnings=warnings)
    (line,) = warnings
    assert line.startswith("training.loss: the loss of 2 samples is the sum of their losses (")
    assert line.endswith("not their mean: a trial divides each batch's loss by its samples "
                         "itself, so use reduction='mean'")
    warnings.clear()  # the mean: no warning
    check_plugins({**config, "loss": "_user_plugins:mean_loss"}, ENV, objectives=["val_loss"],
                  warnings=warnings)
    assert warnings == []


def test_a_pruned_model_s_groups_are_named_in_a_note() -> None:
    config = TrainConfig(dataset="digits", model="_user_plugins:build", epochs=3,
                         prune={"target": 0.5}).model_dump()
    warnings: list[str] = []
    assert check_plugins(config, ENV, objectives=["val_loss"], warnings=warnings)
    assert warnings == ["training.prune: cuts 2 group(s) of this model, by the layer each is "
                        "rooted at (units): 1 (128), 3 (128)"]  # the classifier (5) is not one


def test_a_package_of_the_users_named_like_ours_is_found_shadowing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the ranks start here: this directory comes first on their path
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "__init__.py").write_text("")
    line = _check({"PYTHONPATH": str(JOBS)}, model="_user_plugins:build")
    assert line.startswith(f"training.model: a package named 'training' at {tmp_path}/training "
                           "shadows detol's own 'training'")


def test_search_validate_prints_the_line_and_writes_nothing(tmp_path: Path) -> None:
    study = tmp_path / "s.toml"
    study.write_text(textwrap.dedent(f"""\
        name = "bad-plugin"
        [training]
        dataset = "digits"
        model = "_user_plugins:returns_dict"
        [launcher]
        env = {{ PYTHONPATH = {json.dumps(str(JOBS))} }}
        """))
    code, out, err = run_search("validate", str(study), cwd=tmp_path)
    assert code == 2, out + err
    assert (out + err).strip() == ("error: training.model: returns_dict() returned dict, "
                                   "expected torch.nn.Module")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


def test_a_model_pruning_cannot_cut_is_refused_by_search_run_before_any_trial(
        tmp_path: Path) -> None:
    study = tmp_path / "s.toml"
    study.write_text(textwrap.dedent(f"""\
        name = "unprunable"
        storage = "sqlite:///{tmp_path}/s.db"
        [budget]
        trials = 2
        [training]
        dataset = "digits"
        epochs = 3
        prune = {{ target = 0.5, keep = ["encoder"] }}
        """))
    code, out, err = run_search("run", str(study), cwd=tmp_path)
    assert code == 2, out + err
    assert (out + err).strip() == (  # the built-in model: checked because it prunes
        "error: training.prune.keep: no module named 'encoder' in this Sequential (names as "
        "model.named_modules() gives them)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]  # no study, no trial


@pytest.mark.mpi
def test_a_multi_objective_pruned_study_of_a_user_model_runs(tmp_path: Path) -> None:
    # A plug-in model, dataset, loss and metric through the driver, a warm pool, checkpoints,
    # the dominated pruner and two objectives (one of them the plug-in's metric).
    study = tmp_path / "s.toml"
    study.write_text(textwrap.dedent(f"""\
        name = "user-model"
        metric = ["val_top2", "n_params"]
        direction = ["maximize", "minimize"]
        pruner = "dominated"
        [budget]
        trials = 3
        [strategy]
        name = "random"
        seed = 1
        [checkpoints]
        every = 1
        [training]
        dataset = "_user_plugins:digits"
        model = "_user_plugins:build_scaled"
        loss = "_user_plugins:mean_loss"
        metrics = "_user_plugins:top2"
        epochs = 2
        ranks = 2
        [space]
        scale = {{ type = "int", low = 1, high = 4 }}
        algorithm = {{ type = "categorical", choices = ["sync", "asgd"] }}
        [launcher]
        warm = true
        env = {{ PYTHONPATH = {json.dumps(str(JOBS))} }}
        """))
    code, out, err = run_search("run", str(study), "--storage", f"{tmp_path}/j.journal",
                                cwd=tmp_path, timeout=400)
    assert code == 0, out + err
    trials = optuna.load_study(study_name="user-model",
                               storage=open_storage(f"{tmp_path}/j.journal")).trials
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == 3, [t.user_attrs.get("exit_reason") for t in trials]
    for t in done:
        assert 0.3 < t.values[0] <= 1.0  # val_top2 of a digits MLP after 2 epochs
        assert t.values[1] == 64 * 8 * t.params["scale"] + 8 * t.params["scale"] * 11 + 10


def _draws_study(tmp_path: Path, heads: list[int]) -> Path:
    study = tmp_path / "d.toml"
    study.write_text(textwrap.dedent(f"""\
        name = "d"
        [training]
        dataset = "digits"
        model = "{R}:heads_model"
        validate_draws = 8
        [space]
        d_model = {{ type = "categorical", choices = [32, 48] }}
        heads = {{ type = "categorical", choices = {heads} }}
        [launcher]
        env = {{ PYTHONPATH = "{JOBS}" }}
        """))
    return study


def test_validate_draws_names_the_parameter_values_that_fail(tmp_path: Path) -> None:
    code, out, err = run_search("validate", str(_draws_study(tmp_path, [2, 3])),
                                "--storage", str(tmp_path / "s.journal"), cwd=tmp_path)
    assert code == 0, out + err
    (note,) = [line for line in out.splitlines() if "draws of the space failed" in line]
    # 8 draws of 4 combinations: each checked once; the one that cannot be built is named.
    assert note.startswith("note: 1 of 4 distinct draws of the space failed the plug-in check")
    assert "d_model=32, heads=3 -> training.model: heads_model() failed: ValueError: d_model 32 " \
           "is not divisible by heads 3" in note
    assert "heads=2 ->" not in note and "d_model=48, heads=3 ->" not in note
    assert not (tmp_path / "s.journal").exists()


def test_validate_draws_refuse_a_space_where_every_draw_fails(tmp_path: Path) -> None:
    study = _draws_study(tmp_path, [3]).read_text().replace("[32, 48]", "[32]")
    (tmp_path / "d.toml").write_text(study)
    code, out, err = run_search("validate", str(tmp_path / "d.toml"),
                                "--storage", str(tmp_path / "s.journal"), cwd=tmp_path)
    assert code == 2
    assert err.strip() == ("error: training.model: heads_model() failed: ValueError: d_model 32 "
                           "is not divisible by heads 3 (all 1 distinct draws of 8 failed; the "
                           "first: d_model=32, heads=3)")


@pytest.mark.unit
def test_repeats_are_refused_where_a_trial_would_pause_or_checkpoint() -> None:
    with pytest.raises(StudyError, match=r"training.repeats: repeats = 3 trains several seeds in "
                       r"one trial, which cannot pause or checkpoint yet \(pruner.promote\)"):
        parse_study({**_study({"repeats": 3}), "pruner": {"name": "asha", "promote": True}})
    with pytest.raises(StudyError, match=r"\(checkpoints.every\)"):
        parse_study({**_study({"repeats": 3}), "checkpoints": {"every": 1}})
    assert parse_study(_study({"repeats": 3})).training.repeats == 3
