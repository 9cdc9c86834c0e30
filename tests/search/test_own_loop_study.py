"""`objective = "mpi:package.module:train"`: the study file's checks, and the shipped example
study run as written (a user's own loop through the real driver, Dask and mpiexec)."""

from __future__ import annotations

import shutil
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.cli_helpers import run_cli, run_search
from training.contract import open_storage

ROOT = Path(__file__).resolve().parents[2]
STUDY = (ROOT / "studies" / "own-loop.toml").read_text()


def _copy(tmp_path: Path, study: str) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / "s.toml").write_text(study)
    (tmp_path / "mine.py").write_text("def two(session, other):\n    pass\n")


@pytest.mark.parametrize(("objective", "error"), [
    ("mpi:nope.mod:train", "objective: cannot import 'nope.mod': No module named 'nope'"),
    ("mpi:examples.own_loop.train:nothere",
     "objective: module 'examples.own_loop.train' has no function 'nothere'"),
    ("mpi:mine:two", "objective: mine:two must take one argument, the session: "
     "def two(session)"),
    ("mpi:examples own loop", "objective: 'mpi:examples own loop' is not "
     "'mpi:package.module:function'"),
])
def test_a_bad_own_loop_is_one_line_naming_objective(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, objective: str, error: str
) -> None:
    _copy(tmp_path, STUDY.replace('"mpi:examples.own_loop.train:train"', f'"{objective}"'))
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("validate", "s.toml")
    assert code == 2, out + err
    assert err.strip().startswith(f"error: s.toml: {error}")
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "detol.journal").exists()  # nothing half-written


def test_checkpoints_every_is_refused_for_an_own_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _copy(tmp_path, STUDY + "\n[checkpoints]\nevery = 2\n")
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("validate", "s.toml")
    assert code == 2
    assert "checkpoints.every: an own loop saves when train() calls session.save_checkpoint" in err


@pytest.mark.mpi
@pytest.mark.slow  # ~25 s on a quiet machine, 83 s at load 10 (two warm 2-rank trials)
def test_the_example_study_runs_to_complete_trials_with_values(tmp_path: Path) -> None:
    study = (STUDY.replace("trials = 6", "trials = 2").replace("epochs = 5", "epochs = 2"))
    _copy(tmp_path, study)
    code, out, err = run_search("run", "s.toml", "--no-progress", cwd=tmp_path, timeout=240)
    assert code == 0, out + err
    loaded = optuna.load_study(study_name="own-loop",
                               storage=open_storage(str(tmp_path / "detol.journal")))
    complete = [t for t in loaded.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 2, [(t.state, t.user_attrs.get("exit_reason")) for t in loaded.trials]
    for t in complete:
        assert 0.3 < t.value <= 1.0  # digits after 2 epochs: well above chance (0.1)
        assert t.user_attrs["ranks"] == 2
        assert set(t.intermediate_values) == {1, 2}
        assert set(t.params) == {"lr", "hidden"}
