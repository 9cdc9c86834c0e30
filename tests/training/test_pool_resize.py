"""In-place resize on a warm pool (issue 31, training.jobs._regroup): one pool of 2 real MPI ranks
serves a trial's 1-rank segment and its 2-rank continuation on sub-communicators of the same
processes; the paused state travels in the pool's memory, not through the checkpoint file, and
the result is the run through the file and the fixed-width run."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch

from training.contract import open_storage
from training.launch import run_trial
from training.launch._warm_pool import shutdown_pools

pytestmark = pytest.mark.mpi

TAG = f"detol-pool-resize-{uuid.uuid4().hex[:8]}"
CONFIG = {"dataset": "digits", "epochs": 2, "hidden": 32, "seed": 3, "lr": 0.05,
          "momentum": 0.9, "batch_size": 60, "algorithm": "sync", "dropout": 0.0}
# Pauses every lineage at epoch 1: alone at its rung, it is not in the top half.
PAUSE_AT_1 = {"factory": "search.pruners._promotion:PromotingHalving",
              "kwargs": {"min_resource": 1, "reduction_factor": 2, "max_resource": 2}}


@pytest.fixture(scope="module", autouse=True)
def _pools_closed() -> Any:
    yield
    shutdown_pools()


def _trial(tmp: Path, ranks: int, *, warm: bool = True, resume: str | None = None,
           pause: bool = False, name: str) -> dict[str, Any]:
    storage = str(tmp / "s.journal")
    study = optuna.create_study(study_name="r", storage=open_storage(storage),
                                direction="maximize", load_if_exists=True)
    trial = study.ask()
    spec = {"config": {**CONFIG, "ranks": ranks}, "warm": warm, "pool_ranks": 2,
            "env": {"DETOL_POOL_TAG": TAG}, "timeout_s": 300, "ask_time": time.time(),
            "study_name": "r", "storage_url": storage, "trial_id": trial._trial_id,
            "pruner": PAUSE_AT_1 if pause else None, "resume_from": resume,
            "checkpoints": {"store": str(tmp / "artifacts"), "every": 0, "keep": 2},
            "weights_path": str(tmp / f"{name}.pt")}
    result = run_trial(spec)
    assert result["state"] in ("complete", "paused"), result.get("exit_reason")
    return result


def _weights(tmp: Path, name: str) -> torch.Tensor:
    state = torch.load(tmp / f"{name}.pt", weights_only=True)
    return torch.cat([v.reshape(-1) for v in state.values()])


def test_a_pool_resizes_a_trial_in_place_from_its_memory(tmp_path: Path) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    fixed = _trial(tmp_path, 2, name="fixed")  # 2 ranks, both epochs: the yardstick
    narrow = _trial(tmp_path, 1, pause=True, name="narrow")  # 1 of the pool's 2 ranks
    assert narrow["state"] == "paused" and narrow["ranks"] == 1
    checkpoint = narrow["checkpoint"]["id"]
    wide = _trial(tmp_path, 2, resume=checkpoint, name="wide")  # the same pool, 2 ranks
    assert wide["state"] == "complete" and wide["ranks"] == 2 and wide["start_epoch"] == 2
    # One job served all three widths: no launch, and the state came from its memory.
    assert fixed["pool"]["pid"] == narrow["pool"]["pid"] == wide["pool"]["pid"]
    assert not narrow["pool"]["fresh"] and not wide["pool"]["fresh"]
    assert wide["restored_from"] == "memory"
    # The same continuation as a cold job reads the file: the same weights.
    cold = _trial(tmp_path, 2, warm=False, resume=checkpoint, name="cold")
    assert cold["restored_from"] == "store"
    assert torch.equal(_weights(tmp_path, "wide"), _weights(tmp_path, "cold"))
    # Sync with the global batch fixed: 1 -> 2 ranks is the fixed 2-rank run, up to the order
    # of a float sum.
    assert (_weights(tmp_path, "wide") - _weights(tmp_path, "fixed")).abs().max() <= 1e-5
