"""`objective = "mpi:package.module:train"`: the study file's checks, and the shipped example
study run as written (a user's own loop through the real driver, Dask and mpiexec)."""

from __future__ import annotations

import shutil
import sys
import textwrap
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


# A name that does not parse is the study file's error; one that does not import (checked in a
# fresh Python with [launcher] env, as the plug-ins are) is the plug-in check's, like theirs.
@pytest.mark.parametrize(("objective", "error"), [
    ("mpi:nope.mod:train", "objective: cannot import 'nope.mod': ModuleNotFoundError: No module named 'nope'"),
    ("mpi:examples.own_loop.train:nothere",
     "objective: module 'examples.own_loop.train' has no function 'nothere'"),
    ("mpi:mine:two", "objective: mine:two must take one argument, the session: "
     "def two(session)"),
    ("mpi:examples own loop", "s.toml: objective: 'mpi:examples own loop' is not "
     "'mpi:package.module:function'"),
])
def test_a_bad_own_loop_is_one_line_naming_objective(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, objective: str, error: str
) -> None:
    _copy(tmp_path, STUDY.replace('"mpi:examples.own_loop.train:train"', f'"{objective}"'))
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("validate", "s.toml")
    assert code == 2, out + err
    assert err.strip().startswith(f"error: {error}")
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "detol.journal").exists()  # nothing half-written


def test_the_own_loop_is_imported_with_the_launchers_env_not_in_the_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The loop's module is only on [launcher] env's PYTHONPATH, as the ranks see it, and it
    # refuses to be imported where that variable is not set (the driver's own process).
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "myloop.py").write_text(
        "import os\nassert os.environ.get('MY_FLAG') == '1', 'imported outside the job env'\n"
        "def train(session):\n    pass\n")
    _copy(tmp_path, STUDY.replace('"mpi:examples.own_loop.train:train"', '"mpi:myloop:train"')
          .replace("[launcher]\n", '[launcher]\nenv = { PYTHONPATH = "lib", MY_FLAG = "1" }\n'))
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("validate", "s.toml")
    assert code == 0, out + err
    assert "myloop" not in sys.modules


@pytest.mark.unit
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


KILLER = """\
import os, signal
from pathlib import Path

ONCE = Path({once!r})  # the first trial's rank 1 is killed; the trials after it train


def train(session):
    if session.rank == 1 and not ONCE.exists():
        ONCE.write_text("killed")
        os.kill(os.getpid(), signal.SIGKILL)
    session.report(1, {{"val_accuracy": 0.5 + session.params["x"]}})
"""


@pytest.mark.mpi
@pytest.mark.timeout(900)  # a real 3-trial study; minutes on a busy machine
def test_a_rank_killed_inside_an_own_loop_fails_its_trial_and_the_study_goes_on(
    tmp_path: Path,
) -> None:
    # SIGKILL of one rank inside train(session), in the warm pool of the example study: that
    # trial fails with a reason, the next one runs on. (How long the failure takes is measured
    # by benchmarks/own_loop_faults.py: rank1_dies.)
    (tmp_path / "killer.py").write_text(KILLER.format(once=str(tmp_path / "killed-once")))
    (tmp_path / "s.toml").write_text(textwrap.dedent("""\
        name = "killed"
        objective = "mpi:killer:train"
        metric = "val_accuracy"
        [budget]
        trials = 2
        [strategy]
        name = "random"
        seed = 0
        [training]
        epochs = 1
        ranks = 2
        [space]
        x = { type = "float", low = 0.0, high = 0.4 }
        [launcher]
        warm = true
        """))
    code, out, err = run_search("run", "s.toml", "--no-progress", cwd=tmp_path, timeout=800)
    assert code == 0, out + err
    trials = optuna.load_study(study_name="killed",
                               storage=open_storage(str(tmp_path / "detol.journal"))).trials
    states = [(t.state, t.user_attrs.get("exit_reason")) for t in trials]
    # budget.trials counts finished trials that did not fail: two complete ones follow
    assert [t.state for t in trials] == [TrialState.FAIL] + [TrialState.COMPLETE] * 2, states
    reason = trials[0].user_attrs["exit_reason"]
    # the warm pool's reason is rank 0's, interrupted by the launcher once rank 1 died
    assert reason and not reason.startswith("trial timeout"), reason
    for t in trials[1:]:
        assert t.value == pytest.approx(0.5 + t.params["x"])
