"""Pruning across ranks: rank 0 asks, every rank stops in the same epoch, nothing hangs."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.cli_helpers import search_command
from training.contract import open_storage

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("algorithm", ["sync", "asgd"])
def test_two_rank_trial_pruned_at_epoch_k_stops_there_on_every_rank(
    tmp_path: Path, write_study: Callable[..., Path], algorithm: str
) -> None:
    k = 3
    tag = f"detol-prune-{uuid.uuid4().hex}"
    # The threshold pruner first looks at epoch k and the bar is out of reach: pruned at k.
    study_file = write_study(
        top=f'[pruner]\nname = "threshold"\nlower = 1.5\nwarmup_epochs = {k}',
        training={"epochs": "8", "ranks": "2", "hidden": "16", "algorithm": f'"{algorithm}"'},
        tail=f'[budget]\ntrials = 1\n[launcher]\nenv = {{ DETOL_TEST_TAG = "{tag}" }}',
    )
    journal = str(tmp_path / "j.journal")
    done = subprocess.run([*search_command(), "run", str(study_file), "--storage", journal, "--no-progress"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    (trial,) = optuna.load_study(study_name="t", storage=open_storage(journal)).trials
    assert trial.state is TrialState.PRUNED
    assert sorted(trial.intermediate_values) == list(range(1, k + 1))
    assert trial.user_attrs["epochs_run"] == k
    assert trial.user_attrs["exit_reason"] == f"pruned after epoch {k}"
    assert [row["epoch"] for row in trial.user_attrs["history"]] == list(range(1, k + 1))
    assert trial.user_attrs["rank_seconds"] == pytest.approx(2 * trial.user_attrs["wall_time_s"])
    leftovers = [p for p in Path("/proc").glob("[0-9]*/environ") if _has(p, tag)]
    assert leftovers == []  # every rank exited


def test_a_trial_the_pruner_stops_after_its_last_epoch_completes(
    tmp_path: Path, write_study: Callable[..., Path]
) -> None:
    # The threshold pruner first looks at the last epoch, with a bar out of reach: every epoch
    # was trained already, so the trial keeps its value instead of being thrown away as pruned.
    study_file = write_study(
        top='[pruner]\nname = "threshold"\nlower = 1.5\nwarmup_epochs = 3',
        training={"epochs": "3", "ranks": "2", "hidden": "16"},
        tail="[budget]\ntrials = 1",
    )
    journal = str(tmp_path / "j.journal")
    done = subprocess.run([*search_command(), "run", str(study_file), "--storage", journal,
                           "--no-progress"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    (trial,) = optuna.load_study(study_name="t", storage=open_storage(journal)).trials
    assert trial.state is TrialState.COMPLETE and trial.value is not None
    assert sorted(trial.intermediate_values) == [1, 2, 3]
    assert trial.user_attrs["epochs_run"] == 3


def _has(environ: Path, tag: str) -> bool:
    try:
        return tag.encode() in environ.read_bytes()
    except OSError:
        return False
