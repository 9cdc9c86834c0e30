"""A study on a real PostgreSQL server: driver and every trial's rank 0 share it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.cli_helpers import search_command
from training.launch import open_storage

pytestmark = pytest.mark.mpi


def test_study_on_postgresql(postgres_url: str, write_study: Callable[..., Path]) -> None:
    study_file = write_study(
        top='pruner = "none"\nstrategy = "random"',
        training={"epochs": "2", "ranks": "1", "hidden": "16"},
        tail="[budget]\ntrials = 2\nconcurrency = 2",
    )
    done = subprocess.run([*search_command(), "run", str(study_file), "--storage", postgres_url,
                           "--no-progress"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    password = postgres_url.split(":")[2].split("@")[0]
    assert password not in done.stdout + done.stderr  # the URL is shown redacted
    study = optuna.load_study(study_name="t", storage=open_storage(postgres_url))
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    for t in trials:
        assert sorted(t.intermediate_values) == [1, 2]  # reported by rank 0 into PostgreSQL
        assert password not in str(t.user_attrs)


def test_wrong_password_is_a_clear_error_without_the_password(postgres_url: str) -> None:
    bad = postgres_url.replace("pg-secret-123", "wrong-pass-456")
    with pytest.raises(ValueError) as info:
        open_storage(bad)
    message = str(info.value)
    assert "cannot connect to" in message and "password authentication failed" in message
    assert "wrong-pass-456" not in message
