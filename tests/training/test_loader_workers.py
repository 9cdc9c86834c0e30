"""Loader worker processes under MPI: a lazily read dataset plug-in trains on 2 real ranks with
one DataLoader worker each (forkserver workers used to die in MPI_Init: PMI_Init returned -1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mpi_helpers import run_mpi_job

pytestmark = pytest.mark.mpi


def test_a_file_dataset_trains_through_loader_workers_on_two_ranks(tmp_path: Path) -> None:
    got = run_mpi_job("_loader_workers_job.py", tmp_path / "out.json", ranks=2, timeout=280)
    assert got["state"] == "complete" and got["workers"] == 1
    assert sum(got["rows_read"]) == got["n_train"]  # every row once, through the workers
    assert min(got["rows_read"]) > 0
    assert got["val_accuracy"] > 0.5  # digits, one epoch: it learned from what the workers read
