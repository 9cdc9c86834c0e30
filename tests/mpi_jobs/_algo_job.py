"""MPI program for tests: every algorithm on the digits MLP and on K-means, one launch.

Usage: mpiexec -n 2 python tests/mpi_jobs/_algo_job.py OUT.json
"""

from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI

from training._config import ALGORITHMS, TrainConfig
from training._kmeans import kmeans_data, kmeans_loss, train_kmeans
from training._trainer import Trainer


def main(out: str) -> None:
    comm = MPI.COMM_WORLD
    result: dict[str, dict] = {"mlp": {}, "kmeans": {}}
    for algorithm in ALGORITHMS:
        lr = 2.0 if algorithm == "batch" else 0.05
        config = TrainConfig(dataset="digits", epochs=3 if algorithm != "batch" else 6,
                             ranks=comm.size, hidden=32, lr=lr, algorithm=algorithm,
                             local_steps=4, momentum=0.0 if algorithm == "batch" else 0.9)
        trainer = Trainer(config, comm)
        with trainer.algorithm.consensus():
            _, before = trainer.evaluate(trainer.data.x_val, trainer.data.y_val)
        r = trainer.train()
        flat = np.concatenate([p.detach().reshape(-1).numpy() for p in trainer.model.parameters()])
        spread = comm.allreduce(float(np.abs(flat - comm.bcast(flat, root=0)).max()), op=MPI.MAX)
        result["mlp"][algorithm] = {"before": before, "after": r.values["val_loss"],
                                    "accuracy": r.values["val_accuracy"], "counters": r.counters,
                                    "spread_after_finish": spread}
    x, init = kmeans_data(20000, k=10, seed=0)
    for algorithm in ALGORITHMS:
        run = train_kmeans(comm, algorithm, x, init, lr=0.1 * (10 if algorithm == "batch" else 1),
                           batch_size=128, seconds=1.5, checkpoint_every=0.5, local_steps=4)
        cents = comm.gather(run.centroids[-1], root=0)
        if comm.rank == 0:
            result["kmeans"][algorithm] = {"before": kmeans_loss(x, init),
                                           "after": kmeans_loss(x, np.mean(cents, axis=0)),
                                           "counters": run.counters, "steps": run.steps}
    if comm.rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
