"""MPI program for tests: checkpoints written by P ranks and restored on P ranks.

For each algorithm: one trainer runs 4 epochs straight, writing a checkpoint after epoch 2 into
a real Optuna file-system artifact store; fresh trainers (new model, optimizer, algorithm, as
in a new job) then resume from it. Also: the same checkpoint restored by a one-rank job.

Usage: mpiexec -n 2 python tests/mpi_jobs/_checkpoint_job.py OUT.json
"""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI
from optuna.artifacts import FileSystemArtifactStore

from training._config import TrainConfig
from training.algorithms._base import flat_parameters
from training.jobs._trainer import Trainer
from training.state._checkpoint import Checkpointer, CheckpointError
from training.storage._artifacts import CheckpointPlan


def checkpointer(comm: MPI.Comm, store: FileSystemArtifactStore, every: int) -> Checkpointer:
    def upload(path: str, epoch: int) -> str:
        artifact_id = f"{uuid.uuid4()}"
        with open(path, "rb") as f:
            store.write(artifact_id, f)
        return artifact_id

    def download(artifact_id: str, path: str) -> None:
        with store.open_reader(artifact_id) as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)

    plan = CheckpointPlan(store="unused", every=every, keep=5)
    if comm.rank != 0:
        return Checkpointer(plan, comm)
    return Checkpointer(plan, comm, upload=upload, download=download, remove=store.remove)


def main(out: str) -> None:
    comm = MPI.COMM_WORLD
    directory = Path(out).parent / "artifacts"
    directory.mkdir(exist_ok=True)
    store = FileSystemArtifactStore(str(directory))
    result: dict[str, dict] = {}
    for algorithm in ("sync", "asgd", "localsgd"):
        config = TrainConfig(dataset="digits", epochs=4, ranks=comm.size, hidden=32, lr=0.05,
                             algorithm=algorithm, local_steps=5, dropout=0.1)
        straight = Trainer(config, comm, checkpointer=checkpointer(comm, store, every=2))
        full = straight.train()
        ids = comm.bcast(straight.checkpointer.written if comm.rank == 0 else None, root=0)
        (epoch2,) = ids  # epoch 2 only: nothing is saved after the last epoch
        final_straight = flat_parameters(straight.model)

        # A fresh trainer restores: compare every rank's weights with what the file holds.
        resumed = Trainer(config, comm, checkpointer=checkpointer(comm, store, every=0),
                          resume_from=epoch2)
        first, history, _ = resumed._resume()
        saved = None
        if comm.rank == 0:
            with store.open_reader(epoch2) as f:
                saved = torch.load(f, weights_only=True)["rank_states"]
        saved = comm.bcast(saved, root=0)
        mine = np.concatenate([v.reshape(-1).cpu().numpy() for k, v in saved[comm.rank]["model"].items()])
        restored = flat_parameters(resumed.model)
        other = np.concatenate([v.reshape(-1).cpu().numpy() for v in saved[1 - comm.rank]["model"].values()])
        resumed.algorithm.finish()  # this one never trains: free its windows
        if resumed.claims is not None:
            resumed.claims.close()

        # The whole resumed run: a third trainer, as a job would run it.
        again = Trainer(config, comm, checkpointer=checkpointer(comm, store, every=0),
                        resume_from=epoch2)
        second = again.train()
        final_resumed = flat_parameters(again.model)
        worst = comm.allreduce(float(np.abs(final_straight - final_resumed).max()), op=MPI.MAX)
        result[algorithm] = {
            "first": first,
            "history_epochs": [int(r["epoch"]) for r in history],
            "restored_equals_own_saved": bool(np.array_equal(restored, mine.astype(restored.dtype))),
            "ranks_differ_at_checkpoint": bool(np.abs(mine - other).max() > 0),
            "full_history": [r["val_accuracy"] for r in full.history],
            "resumed_history": [r["val_accuracy"] for r in second.history],
            "resumed_start_epoch": second.start_epoch,
            "resumed_epochs_run": second.epochs_run,
            "max_weight_difference": worst,
            "accuracy": second.values["val_accuracy"],
        }

    # The epoch-2 checkpoint of the last algorithm, offered to a one-rank job: the trainer's
    # checkpoints reshard (training.state._reshard), so it restores the mean of the two ranks.
    single = comm.Split(color=comm.rank, key=0)
    one_rank: dict = {}
    if comm.rank == 0:
        config = TrainConfig(dataset="digits", epochs=4, ranks=comm.size, hidden=32, lr=0.05,
                             algorithm="localsgd", local_steps=5, dropout=0.1)
        try:
            done = Trainer(config, single, checkpointer=checkpointer(single, store, every=0),
                           resume_from=epoch2).train()
            one_rank = {"start_epoch": done.start_epoch, "accuracy": done.values["val_accuracy"]}
        except CheckpointError as exc:
            one_rank = {"refused": str(exc)}
    single.Free()
    if comm.rank == 0:
        result["one_rank"] = one_rank
        Path(out).write_text(json.dumps(result))

if __name__ == "__main__":
    main(sys.argv[1])
