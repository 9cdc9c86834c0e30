"""MPI program for tests: the plug-in path on real ranks.

1. The same MLP through the plug-in path (user model, user TorchDatasets read sample by sample,
   user loss) and through the built-in path (in-memory digits): same weights after 2 epochs.
2. Every training row read exactly once per epoch across ranks, for sync (slices of global
   batches) and asgd (claimed batches).
3. A user model resumes from its checkpoint to the same result.

Usage: mpiexec -n 2 python tests/mpi_jobs/_plugin_job.py OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from _checkpoint_job import checkpointer
from mpi4py import MPI
from optuna.artifacts import FileSystemArtifactStore

from training._config import TrainConfig
from training.algorithms._base import flat_parameters
from training.jobs._trainer import Trainer

BASE = {"dataset": "digits", "epochs": 2, "hidden": 32, "layers": 2, "lr": 0.05, "seed": 3}
PLUGINS = {"model": "_user_plugins:build", "dataset": "_user_plugins:digits",
           "loss": "_user_plugins:mean_loss", "metrics": "_user_plugins:top2"}


def same_weights(comm: MPI.Comm) -> dict:
    size = comm.size
    builtin = Trainer(TrainConfig(**BASE, ranks=size), comm)
    b = builtin.train()
    plugin = Trainer(TrainConfig(**{**BASE, **PLUGINS}, ranks=size), comm)
    p = plugin.train()
    diff = float(np.max(np.abs(flat_parameters(builtin.model) - flat_parameters(plugin.model))))
    return {"max_weight_difference": diff, "builtin": b.values, "plugin": p.values,
            "lazy": not plugin.data.in_memory, "builtin_in_memory": builtin.data.in_memory}


def reads(comm: MPI.Comm, algorithm: str) -> dict:
    config = TrainConfig(**{**BASE, **PLUGINS}, ranks=comm.size, algorithm=algorithm,
                         batch_size=50)  # 1437 rows: a short last batch
    trainer = Trainer(config, comm)
    per_epoch = []
    for epoch in (1, 2):
        trainer.data.train.read.clear()
        trainer._run_epoch(epoch)
        mine = list(trainer.data.train.read)
        per_epoch.append(comm.gather(mine, root=0))
    trainer.algorithm.finish()
    if trainer.claims is not None:
        trainer.claims.close()
    return {"n": len(trainer.data.train), "per_epoch": per_epoch}


def resume(comm: MPI.Comm, out: Path) -> dict:
    directory = out.parent / "artifacts"
    directory.mkdir(exist_ok=True)
    store = FileSystemArtifactStore(str(directory))
    config = TrainConfig(**{**BASE, "epochs": 4, "model": "_user_plugins:build_scaled",
                            "dataset": "_user_plugins:digits", "params": {"scale": 3}},
                         ranks=comm.size)
    straight = Trainer(config, comm, checkpointer=checkpointer(comm, store, every=2))
    full = straight.train()
    (epoch2,) = comm.bcast(straight.checkpointer.written if comm.rank == 0 else None, root=0)
    again = Trainer(config, comm, checkpointer=checkpointer(comm, store, every=0),
                    resume_from=epoch2)
    res = again.train()
    diff = float(np.max(np.abs(flat_parameters(straight.model) - flat_parameters(again.model))))
    return {"start_epoch": res.start_epoch, "epochs_run": res.epochs_run,
            "full": [h["val_loss"] for h in full.history],
            "resumed": [h["val_loss"] for h in res.history],
            "max_weight_difference": diff, "hidden": straight.model[1].out_features}


def main(out: str) -> None:
    comm = MPI.COMM_WORLD
    result = {"same": same_weights(comm), "sync": reads(comm, "sync"),
              "asgd": reads(comm, "asgd"), "resume": resume(comm, Path(out))}
    if comm.rank == 0:
        Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
