"""MPI program for tests: a lazily read dataset plug-in through loader worker processes.

Usage: mpiexec -n 2 python tests/mpi_jobs/_loader_workers_job.py OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mpi4py import MPI

from training._config import TrainConfig
from training.jobs._trainer import Trainer


def main(out: str) -> None:
    comm = MPI.COMM_WORLD
    config = TrainConfig(dataset="_user_plugins:digits", model="_user_plugins:build", epochs=1,
                         hidden=32, lr=0.05, seed=3, ranks=comm.size, loader_workers=1)
    trainer = Trainer(config, comm)
    result = trainer.train()
    rows = comm.gather(trainer.rows_read, root=0)
    workers = list(getattr(trainer.loader, "_iterator", None)._workers or [])  # type: ignore[union-attr]
    shards = _shards(comm, out)
    if comm.rank == 0:
        Path(out).write_text(json.dumps({
            "state": result.state, "val_accuracy": result.values["val_accuracy"],
            "rows_read": rows, "n_train": trainer.n_train, "workers": len(workers),
            "shards": shards,
        }))


def _shards(comm: MPI.Comm, out: str) -> dict[str, object]:
    """Record shards read by one loader worker per rank and in the rank: the same batches."""
    from training.data._pack import pack

    root = str(Path(out).parent / "shards")
    if comm.rank == 0:
        pack("digits", root, shard_mb=0.05)
    comm.Barrier()  # waits for all ranks: the pack is there
    got: dict[str, object] = {}
    for workers in (1, 0):
        config = TrainConfig(dataset=f"shards:{root}", epochs=2, hidden=32, lr=0.05, seed=3,
                             ranks=comm.size, loader_workers=workers)
        trainer = Trainer(config, comm)
        result = trainer.train()
        got[f"loss_{workers}"] = result.values["train_loss"]
        got[f"type_{workers}"] = type(trainer.loader).__name__
    return got


if __name__ == "__main__":
    main(sys.argv[1])
