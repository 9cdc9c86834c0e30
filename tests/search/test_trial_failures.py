"""What a user sees when trials cannot run: a dataset that cannot load is found before the first
trial; a failing MPI trial's line gives the real error, from the rank that had it, and its log."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.cli_helpers import search_command
from tests.conftest import TESTS_DIR
from training.contract import open_storage

JOBS = TESTS_DIR / "mpi_jobs"


def _search(study: Path, storage: str, cwd: Path) -> tuple[int, str, str]:
    proc = subprocess.run([*search_command(), "run", str(study), "--storage", storage,
                           "--no-progress"], cwd=cwd, capture_output=True, text=True,
                          timeout=240)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize(("dataset", "why"), [
    ("nosuchmodule:load", "ModuleNotFoundError: No module named 'nosuchmodule'"),
    ("_trial_helpers:no_such_loader", "module '_trial_helpers' has no function 'no_such_loader'"),
])
def test_a_dataset_that_cannot_load_is_refused_before_the_first_trial(
        tmp_path: Path, write_study, dataset: str, why: str) -> None:
    study = write_study(training={"dataset": f'"{dataset}"'},
                        tail=f'[launcher]\nenv = {{ PYTHONPATH = "{JOBS}" }}')
    started = time.monotonic()
    code, out, err = _search(study, str(tmp_path / "s.journal"), tmp_path)
    assert code == 2, out + err
    assert err.strip() == (f"error: training.dataset: cannot load {dataset!r}: {why} (a trial "
                           "imports it with [launcher] env; put its directory on PYTHONPATH there)")
    assert time.monotonic() - started < 30  # not five failed trials later
    assert not (tmp_path / "s.journal").exists()


def _failing_study(write_study, *, warm: bool) -> Path:
    """One trial on 2 ranks whose dataset raises on rank 1."""
    return write_study(training={"dataset": '"_trial_helpers:digits_failing_on_two_ranks"',
                                 "ranks": "2"},
                       top='pruner = "none"\n[budget]\ntrials = 1\nmax_failures = 1',
                       tail=f'[launcher]\nwarm = {str(warm).lower()}\n'
                            f'env = {{ PYTHONPATH = "{JOBS}" }}\n'
                            '[space]\nlr = { type = "float", low = 0.01, high = 0.1 }')


@pytest.mark.mpi
def test_a_failed_trial_line_names_the_rank_its_error_and_the_full_log(
        tmp_path: Path, write_study) -> None:
    # Rank 1 of 2 raises; rank 0 is aborted and writes no result: the job's output must tell.
    storage = tmp_path / "s.journal"
    code, out, err = _search(_failing_study(write_study, warm=False), str(storage), tmp_path)
    assert code == 1, out + err
    log = tmp_path / "detol-logs" / "t" / "trial-0.log"  # beside the storage file
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("trial   0 failed"))
    assert re.search(r"\blr=0\.\d+", lines[at])  # its parameters (0.01 to 0.1, unseeded)
    assert lines[at + 1].strip() == (
        "MPI job exited with code 1: [rank 1] RuntimeError: user dataset exploded on rank 1")
    assert lines[at + 2].strip() == f"full log: {log}"
    assert "user dataset exploded on rank 1" in log.read_text()
    [trial] = optuna.load_study(study_name="t", storage=open_storage(str(storage))).trials
    assert trial.state is TrialState.FAIL and trial.user_attrs["log_path"] == str(log)
    assert os.path.getsize(log) > len(trial.user_attrs["exit_reason"]) // 2


@pytest.mark.mpi
def test_a_failed_warm_trial_keeps_its_log_file_too(tmp_path: Path, write_study) -> None:
    storage = tmp_path / "s.journal"
    code, out, err = _search(_failing_study(write_study, warm=True), str(storage), tmp_path)
    assert code == 1, out + err
    log = tmp_path / "detol-logs" / "t" / "trial-0.log"
    assert f"full log: {log}" in out
    assert "user dataset exploded on rank 1" in log.read_text()
    [trial] = optuna.load_study(study_name="t", storage=open_storage(str(storage))).trials
    assert trial.user_attrs["log_path"] == str(log)
