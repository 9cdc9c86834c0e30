"""Checkpoints written by P ranks restore on P ranks (and on one: tests/training/test_resize.py
for the rule), for every algorithm that keeps state."""

from __future__ import annotations

from typing import Any

import pytest

from tests.mpi_helpers import run_mpi_job

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return run_mpi_job("_checkpoint_job.py", tmp_path_factory.mktemp("ckpt") / "out.json")


@pytest.mark.parametrize("algorithm", ["sync", "localsgd"])
def test_resuming_gives_the_same_result_as_never_stopping(job: Any, algorithm: str) -> None:
    # Sync SGD and local SGD are deterministic given the seed: a run stopped after epoch 2 and
    # resumed from its checkpoint by fresh trainers ends with the very same weights and curve.
    r = job[algorithm]
    assert r["first"] == 3 and r["history_epochs"] == [1, 2]
    assert r["resumed_start_epoch"] == 3 and r["resumed_epochs_run"] == 2
    assert r["resumed_history"] == pytest.approx(r["full_history"], abs=1e-9)
    assert r["max_weight_difference"] <= 1e-6
    assert r["full_history"][-1] > 0.8  # it trained


@pytest.mark.parametrize("algorithm", ["sync", "asgd", "localsgd"])
def test_every_rank_gets_back_its_own_state(job: Any, algorithm: str) -> None:
    r = job[algorithm]
    assert r["restored_equals_own_saved"]
    if algorithm != "sync":  # between averages the ranks hold different weights: each its own
        assert r["ranks_differ_at_checkpoint"]
    assert r["accuracy"] > 0.8  # ASGD is not deterministic; it still trains on from epoch 2


def test_a_checkpoint_of_two_ranks_restores_on_one(job: Any) -> None:
    # Resharding (training.state._reshard): localsgd's two states are merged into one, which trains on.
    r = job["one_rank"]
    assert "refused" not in r, r.get("refused")
    assert r["start_epoch"] == 3 and r["accuracy"] > 0.8
