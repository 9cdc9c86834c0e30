"""MPI program for tests: every algorithm on the digits MLP and on K-means, one launch.

Usage: mpiexec -n 2 python tests/mpi_jobs/_algo_job.py OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

from training._config import TrainConfig
from training.algorithms._base import flat_parameters
from training.algorithms._registry import ALGORITHMS, make_algorithm
from training.jobs._trainer import Trainer

# K-means (the ASGD paper's first experiment) lives with the benchmark that runs it.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from _common.kmeans import KMeans, kmeans_data, kmeans_loss, lloyd, train_kmeans  # noqa: E402


def lockstep_spread(comm: MPI.Comm, algorithm: str, x: np.ndarray, init: np.ndarray) -> dict:
    """K-means SGD with the ranks kept in step by a barrier every 5 steps (this test's loop,
    not the algorithm's), so that how much ASGD exchanges does not depend on how the OS
    schedules the ranks: (RMS distance of the ranks' centroids to their mean, counters)."""
    torch.manual_seed(0)
    model = KMeans(init)
    algo = make_algorithm(algorithm, model, comm, lr=0.1, send_every=1, seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    shard = torch.from_numpy(x[comm.rank :: comm.size])
    rng = np.random.default_rng([0, comm.rank])
    for step in range(300):
        if step % 5 == 0:
            comm.Barrier()  # waits for all ranks
        algo.zero_grad()
        model(shard[rng.integers(0, len(shard), 64)]).mean().backward()
        if algo.before_step(True):
            opt.step()
            algo.after_step()
    comm.Barrier()
    lasts = comm.allgather(flat_parameters(model))
    counters = algo.counters()
    algo.finish()
    mean = np.mean(lasts, axis=0)
    return {"spread": float(np.sqrt(np.mean([(c - mean) ** 2 for c in lasts]))),
            "counters": counters}


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
            before = trainer.evaluate(trainer.data.val)["loss"]
        r = trainer.train()
        flat = np.concatenate([p.detach().reshape(-1).cpu().numpy() for p in trainer.model.parameters()])
        spread = comm.allreduce(float(np.abs(flat - comm.bcast(flat, root=0)).max()), op=MPI.MAX)
        result["mlp"][algorithm] = {"before": before, "after": r.values["val_loss"],
                                    "accuracy": r.values["val_accuracy"], "counters": r.counters,
                                    "spread_after_finish": spread}
    x, init = kmeans_data(20000, k=10, seed=0)
    result["lloyd"] = lloyd(x, init)[1]  # the outside reference: Lloyd's from the same start
    for algorithm in ALGORITHMS:
        # A step count, not a clock: the same work under any load (batch: whole passes).
        run = train_kmeans(comm, algorithm, x, init, lr=0.1 * (10 if algorithm == "batch" else 1),
                           batch_size=128, steps=30 if algorithm == "batch" else 300,
                           checkpoint_every=1e9, local_steps=4)
        lasts = comm.gather(run.last, root=0)  # each rank's centroids before the final average
        if comm.rank == 0:
            result["kmeans"][algorithm] = {
                "before": kmeans_loss(x, init), "after": kmeans_loss(x, np.mean(lasts, axis=0)),
                "counters": run.counters, "steps": run.steps,
            }
    result["lockstep"] = {a: lockstep_spread(comm, a, x, init) for a in ("asgd", "simuparallel")}
    if comm.rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
