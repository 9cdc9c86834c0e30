"""The plug-in path on real ranks (tests/mpi_jobs/_plugin_job.py, 2 ranks): same weights as the
built-in path, every training row read once per epoch, a user model resumed from a checkpoint."""

from __future__ import annotations

from typing import Any

import pytest

from tests.mpi_helpers import run_mpi_job

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return run_mpi_job("_plugin_job.py", tmp_path_factory.mktemp("plugins") / "out.json")


def test_plugin_and_builtin_paths_train_the_same_weights(job: Any) -> None:
    same = job["same"]
    assert same["lazy"] and same["builtin_in_memory"]  # two different data paths
    assert same["max_weight_difference"] <= 1e-5
    assert same["plugin"]["val_loss"] == pytest.approx(same["builtin"]["val_loss"], rel=1e-5)
    assert same["plugin"]["val_accuracy"] == pytest.approx(same["builtin"]["val_accuracy"])
    assert 0.5 < same["plugin"]["val_top2"] <= 1.0  # the metrics plug-in's, reduced over ranks
    assert same["plugin"]["val_top2"] >= same["plugin"]["val_accuracy"]


@pytest.mark.parametrize("algorithm", ["sync", "asgd"])
def test_every_training_row_is_read_once_per_epoch_across_ranks(job: Any, algorithm: str) -> None:
    n = job[algorithm]["n"]
    for ranks in job[algorithm]["per_epoch"]:
        counts = [len(rows) for rows in ranks]
        assert all(len(set(rows)) == len(rows) for rows in ranks)  # no row twice on a rank
        assert not set(ranks[0]) & set(ranks[1])  # no row on both ranks
        assert sum(counts) == n and set(ranks[0]) | set(ranks[1]) == set(range(n))
        if algorithm == "sync":  # slices of every global batch: an even share
            assert abs(counts[0] - counts[1]) <= 50
        else:  # claimed: whole local batches of 25 rows (1150 = 46 of them), any split
            assert all(c % 25 == 0 for c in counts)


def test_a_user_model_resumes_from_its_checkpoint_to_the_same_result(job: Any) -> None:
    r = job["resume"]
    assert r["hidden"] == 24  # the free parameter scale = 3 reached the user's build()
    assert r["start_epoch"] == 3 and r["epochs_run"] == 2
    assert r["resumed"] == pytest.approx(r["full"], abs=1e-9)
    assert r["max_weight_difference"] <= 1e-6
