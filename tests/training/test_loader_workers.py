"""Loader worker processes under MPI: a lazily read dataset plug-in trains on 2 real ranks with
one DataLoader worker each (forkserver workers used to die in MPI_Init: PMI_Init returned -1)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.mpi_helpers import run_mpi_job

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def got(tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("workers") / "out.json"
    return run_mpi_job("_loader_workers_job.py", out, ranks=2, timeout=400)


def test_a_file_dataset_trains_through_loader_workers_on_two_ranks(got: Any) -> None:
    assert got["state"] == "complete" and got["workers"] == 1
    assert sum(got["rows_read"]) == got["n_train"]  # every row once, through the workers
    assert min(got["rows_read"]) > 0
    assert got["val_accuracy"] > 0.5  # digits, one epoch: it learned from what the workers read


def test_record_shards_read_in_loader_workers_give_the_batches_read_in_the_rank(
        got: Any) -> None:
    shards = got["shards"]
    assert shards["type_1"] == "DataLoader" and shards["type_0"] == "InMemoryLoader"
    assert shards["loss_1"] == shards["loss_0"]  # sync, 2 epochs: the very same batches
