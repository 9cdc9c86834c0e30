"""`objective = "module:function"`: a plain Python function searched through the real driver,
Dask LocalCluster and journal storage, with pruning through its report callback."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.cli_helpers import search_command
from training.contract import open_storage

MODULE = """
def objective(params, report):
    x = params["x"]
    for step in range(4):
        report(step, (x - 0.3) ** 2 + 1.0 / (step + 1))
    if params["kind"] == "broken":
        raise RuntimeError("the broken kind")
    return {"loss": (x - 0.3) ** 2, "other": 1.0}


def wrong_keys(params):
    return {"not_the_metric": 1.0}
"""


def _study(tmp_path: Path, body: str) -> Path:
    (tmp_path / "mine.py").write_text(textwrap.dedent(MODULE))
    path = tmp_path / "study.toml"
    path.write_text(textwrap.dedent(body))
    return path


def _run(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*search_command(), "run", "study.toml", "--storage", "s.journal",
                           "--no-progress"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=180)


def test_function_objective_is_searched_pruned_and_its_errors_recorded(tmp_path: Path) -> None:
    _study(tmp_path, """\
        name = "fn"
        objective = "mine:objective"
        metric = "loss"
        direction = "minimize"
        [budget]
        trials = 16
        concurrency = 2
        max_failures = 16
        [strategy]
        name = "random"
        seed = 5
        [pruner]
        name = "median"
        startup_trials = 3
        warmup_epochs = 1
        [space]
        x = { type = "float", low = 0, high = 1 }
        kind = { type = "categorical", choices = ["fine", "broken"] }
        """)
    done = _run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    study = optuna.load_study(study_name="fn", storage=open_storage(str(tmp_path / "s.journal")))
    trials = study.get_trials()
    by_state = {s: [t for t in trials if t.state is s] for s in TrialState}
    assert len(by_state[TrialState.COMPLETE]) + len(by_state[TrialState.PRUNED]) == 16
    assert by_state[TrialState.PRUNED], "the median pruner never stopped a trial"
    for t in by_state[TrialState.COMPLETE]:
        assert t.params["kind"] == "fine"
        assert t.value == pytest.approx((t.params["x"] - 0.3) ** 2)
        assert sorted(t.intermediate_values) == [0, 1, 2, 3]
    for t in by_state[TrialState.PRUNED]:
        # stopped after a report past the warm-up step; the last report may be the last step
        # (which trials finish first, and so the median, depends on the 2 running at once)
        assert sorted(t.intermediate_values) == list(range(len(t.intermediate_values)))
        assert 2 <= len(t.intermediate_values) <= 4
    for t in by_state[TrialState.FAIL]:
        assert t.params["kind"] == "broken"
        assert t.user_attrs["exit_reason"].startswith("RuntimeError: the broken kind (")
        assert "mine.py" in t.user_attrs["exit_reason"]
    assert study.metric_names == ["loss"]


def test_missing_metric_in_the_answer_fails_the_trial(tmp_path: Path) -> None:
    _study(tmp_path, """\
        name = "fn"
        objective = "mine:wrong_keys"
        metric = "loss"
        direction = "minimize"
        [budget]
        trials = 1
        max_failures = 1
        [space]
        x = { type = "float", low = 0, high = 1 }
        """)
    done = _run(tmp_path)
    assert done.returncode == 1
    (trial,) = optuna.load_study(study_name="fn", storage=open_storage(
        str(tmp_path / "s.journal"))).get_trials()
    assert trial.state is TrialState.FAIL
    assert "returned ['not_the_metric'] but not ['loss']" in trial.user_attrs["exit_reason"]


@pytest.mark.parametrize(("top", "message"), [
    ('objective = "nowhere_module:f"\nmetric = "loss"\ndirection = "minimize"',
     "objective: cannot import 'nowhere_module'"),
    ('objective = "mine:absent"\nmetric = "loss"\ndirection = "minimize"',
     "objective: module 'mine' has no function 'absent'"),
    ('objective = "mine"', "objective: 'mine' is neither 'package.module:function' nor a benchmark"),
    ('objective = "nb201:cifar11"', "objective: unknown nb201 dataset 'cifar11'"),
    ('objective = "mine:objective"\nmetric = "loss"',
     "direction: required for metric 'loss' of objective 'mine:objective'"),
    ('metric = "loss"', "metric: unknown metric 'loss'"),
])
def test_bad_objective_is_a_one_line_error(tmp_path: Path, top: str, message: str) -> None:
    _study(tmp_path, f'name = "fn"\n{top}\n')
    done = _run(tmp_path)
    assert done.returncode == 2
    assert message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s.journal").exists()


@pytest.mark.parametrize(("space", "message"), [
    ("", 'space.genome: the NAS-Bench-201 objective needs [space.genome] with family = "cell"'),
    ('[space.genome]\nfamily = "cell"\nnodes = 5', "space.genome.nodes: NAS-Bench-201 cells have 4 nodes, got 5"),
    ('[space.genome]\nfamily = "stack"', "space.genome.family: the NAS-Bench-201 objective needs 'cell'"),
])
def test_nb201_space_is_checked_before_any_trial(tmp_path: Path, space: str, message: str) -> None:
    _study(tmp_path, f'name = "fn"\nobjective = "nb201:cifar10"\n{space}\n')
    done = _run(tmp_path)
    assert done.returncode == 2
    assert message in done.stderr, done.stderr
    assert not (tmp_path / "s.journal").exists()
