"""Which settings of a checkpoint matter for restoring it (issue 28, item 1): a checkpoint
restores across a changed bucket size, thread count or progress thread, never across a shape."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from mpi4py import MPI

from training.contract import FREE_ON_RESTORE, TrainConfig
from training.state._checkpoint import (
    Checkpointer,
    CheckpointError,
    CheckpointMismatch,
    check_compatible,
)
from training.storage._artifacts import CheckpointPlan

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def _checkpointer(tmp_path: Path) -> Checkpointer:
    store = tmp_path / "store"
    store.mkdir()

    def upload(path: str, epoch: int) -> str:
        name = f"a{epoch}"
        shutil.copy(path, store / name)
        return name

    def download(artifact_id: str, path: str) -> None:
        shutil.copy(store / artifact_id, path)

    return Checkpointer(CheckpointPlan(store=str(store)), MPI.COMM_SELF, upload=upload,
                        download=download)


@pytest.mark.parametrize("change", [{"bucket_kb": 128}, {"threads_per_rank": 2},
                                    {"mpi_async_progress": True}, {"epochs": 9}])
def test_a_checkpoint_restores_across_settings_that_hold_no_state(
    tmp_path: Path, change: dict
) -> None:
    written = TrainConfig(dataset="digits", epochs=4, ranks=1).model_dump()
    ck = _checkpointer(tmp_path)
    weights = torch.arange(6.0)
    artifact = ck.save({"epoch": 2, "ranks": 1, "config": written}, {"w": weights})
    assert artifact is not None
    header, mine = ck.load(artifact, {**written, **change})
    assert header["epoch"] == 2 and torch.equal(mine["w"], weights)
    assert set(header["free_on_restore"]) == set(FREE_ON_RESTORE)


def test_a_setting_that_shapes_the_state_is_still_refused(tmp_path: Path) -> None:
    written = TrainConfig(dataset="digits", epochs=4, ranks=1).model_dump()
    ck = _checkpointer(tmp_path)
    artifact = ck.save({"epoch": 2, "ranks": 1, "config": written}, {"w": torch.zeros(3)})
    assert artifact is not None
    with pytest.raises(CheckpointError, match=r"hidden: 128 != 64"):
        ck.load(artifact, {**written, "hidden": 64})


def test_free_only_where_writer_and_reader_agree() -> None:
    config = TrainConfig(dataset="digits", ranks=1).model_dump()
    saved = {"format": 1, "ranks": 1, "config": config, "free_on_restore": ["epochs"]}
    check_compatible(saved, {**config, "epochs": 3}, 1)
    with pytest.raises(CheckpointMismatch, match="bucket_kb: 256 != 128"):
        check_compatible(saved, {**config, "bucket_kb": 128}, 1)
