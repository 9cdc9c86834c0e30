"""MPI program for tests: pruning during training on real ranks.

- sync and asgd trainers (stack genome, digits) prune at the start of epochs 2 and 3 (l1, and
  asgd with taylor too: its ranks sum different gradients); every rank's kept unit indices,
  widths and curve are gathered;
- ``agreed`` is given a different importance vector on each rank;
- a pruned sync run (taylor: its sums of epoch 2 decide the step of epoch 3) with a checkpoint
  after epoch 2 is resumed by a fresh trainer (as a new job
  would) and must end with the same weights as the run that never stopped.

Usage: mpiexec -n 2 python tests/mpi_jobs/_prune_job.py OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from _checkpoint_job import checkpointer  # this folder is on sys.path (the script's own)
from mpi4py import MPI
from optuna.artifacts import FileSystemArtifactStore

from training._config import TrainConfig
from training.algorithms._base import flat_parameters
from training.jobs._trainer import Trainer
from training.pruning._units import agreed

STACK = {"family": "stack", "layers": [
    {"kind": "conv", "width": 16, "activation": "relu", "dropout": 0.0, "kernel": 3, "pool": True},
    {"kind": "conv", "width": 16, "activation": "relu", "dropout": 0.0, "kernel": 3, "pool": True},
    {"kind": "dense", "width": 32, "activation": "relu", "dropout": 0.0},
]}
PRUNE = {"target": 0.5, "start_epoch": 2, "end_epoch": 3, "steps": 2, "sparsity": 1e-4}


def config(algorithm: str, ranks: int, criterion: str = "l1") -> TrainConfig:
    return TrainConfig(dataset="digits", epochs=4, ranks=ranks, genome=STACK, lr=0.05,
                       batch_size=32, algorithm=algorithm, send_every=2,
                       prune={**PRUNE, "criterion": criterion})


def main(out: str) -> None:
    comm = MPI.COMM_WORLD
    result: dict[str, object] = {}
    for case in ("sync", "asgd", "asgd-taylor"):
        algorithm, _, criterion = case.partition("-")
        trainer = Trainer(config(algorithm, comm.size, criterion or "l1"), comm)
        run = trainer.train()
        result[case] = {
            "kept": comm.allgather(trainer.pruning.kept),  # type: ignore[union-attr]
            "widths": comm.allgather(trainer.pruning.widths()),  # type: ignore[union-attr]
            "n_params": [r["n_params"] for r in run.history],
            "flops": [r["flops"] for r in run.history],
            "accuracy": run.values["val_accuracy"],
            "pruned": run.pruned_units,
            "state": run.state,
        }

    # Different importances on each rank: every rank must hold the same, rank-ordered mean.
    local = [torch.tensor([1.0, 0.0, 3.0 * comm.rank]), torch.tensor([0.1 * (comm.rank + 1)])]
    result["agreed"] = comm.allgather([a.tolist() for a in agreed(local, comm)])

    # A pruned run resumed from its checkpoint after epoch 2 (between the two pruning steps).
    directory = Path(out).parent / "artifacts"
    directory.mkdir(exist_ok=True)
    store = FileSystemArtifactStore(str(directory))
    straight = Trainer(config("sync", comm.size, "taylor"), comm,
                       checkpointer=checkpointer(comm, store, every=2))
    full = straight.train()
    (epoch2,) = comm.bcast(straight.checkpointer.written if comm.rank == 0 else None, root=0)
    again = Trainer(config("sync", comm.size, "taylor"), comm,
                    checkpointer=checkpointer(comm, store, every=0), resume_from=epoch2)
    second = again.train()
    diff = float(np.abs(flat_parameters(straight.model) - flat_parameters(again.model)).max())
    result["resume"] = {
        "widths": [straight.pruning.widths(), again.pruning.widths()],  # type: ignore[union-attr]
        "start_epoch": second.start_epoch,
        "full": [r["val_accuracy"] for r in full.history],
        "resumed": [r["val_accuracy"] for r in second.history],
        "max_weight_difference": comm.allreduce(diff, op=MPI.MAX),
    }
    if comm.rank == 0:
        Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
