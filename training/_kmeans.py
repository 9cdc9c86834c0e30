"""K-means by SGD, the first experiment of the ASGD paper, trained by the same algorithms.

Loss: mean squared distance of each point to its nearest centroid. All ranks start from the
same centroids (rank 0's, broadcast). ``train_kmeans`` runs one algorithm for a wall-clock
budget and records every rank's centroids at fixed times without communicating, so the
consensus loss over time can be computed afterwards without disturbing asynchronous runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from mpi4py import MPI
from torch import nn

from training._algorithm import flat_parameters
from training._algorithms import make_algorithm


class KMeans(nn.Module):
    def __init__(self, centroids: np.ndarray) -> None:
        super().__init__()
        self.centroids = nn.Parameter(torch.from_numpy(np.asarray(centroids, np.float32)).clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Per-point squared distance to the nearest centroid."""
        return torch.cdist(x, self.centroids).pow(2).min(dim=1).values


def kmeans_data(n: int, *, k: int, dim: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points from ``k`` Gaussian clusters in ``dim`` dimensions, and k initial centroids
    drawn from the data (the same for every caller with the same seed)."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-10, 10, size=(k, dim))
    labels = rng.integers(0, k, size=n)
    x = (centers[labels] + rng.normal(size=(n, dim))).astype(np.float32)
    init = x[rng.choice(n, size=k, replace=False)].copy()
    return x, init


def kmeans_loss(x: np.ndarray, centroids: np.ndarray) -> float:
    with torch.no_grad():
        d = torch.cdist(torch.from_numpy(x), torch.from_numpy(centroids.astype(np.float32)))
        return float(d.pow(2).min(dim=1).values.mean())


@dataclass
class KMeansRun:
    checkpoints: list[float]  # seconds since the common start
    samples: list[int]  # samples processed by all ranks up to each checkpoint (this rank's count)
    centroids: list[np.ndarray]  # this rank's centroids at each checkpoint
    counters: dict[str, int]
    comm_seconds: float
    steps: int


def train_kmeans(
    comm: MPI.Comm,
    algorithm: str,
    x: np.ndarray,
    init: np.ndarray,
    *,
    lr: float,
    batch_size: int,
    seconds: float,
    checkpoint_every: float,
    seed: int = 0,
    **options: object,
) -> KMeansRun:
    """Train for ``seconds`` of wall time (the same budget on every rank).

    Each rank draws mini-batches from its own shard ``x[rank::size]``. ``batch`` (map-reduce
    full-batch GD) takes one step per pass over the shards.
    """
    torch.set_num_threads(1)
    model = KMeans(init)
    algo = make_algorithm(algorithm, model, comm, lr=lr, seed=seed, **options)
    algo.broadcast_parameters(0)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    shard = torch.from_numpy(x[comm.rank :: comm.size])
    rng = np.random.default_rng([seed, comm.rank])
    full_batch = algorithm == "batch"
    local_batch = len(shard) if full_batch else max(1, batch_size // comm.size)
    run = KMeansRun([], [], [], {}, 0.0, 0)
    samples = 0
    comm.Barrier()  # waits for all ranks: one common start
    start = MPI.Wtime()
    next_checkpoint = 0.0
    steps_done = 0
    while True:
        now = MPI.Wtime() - start
        while now >= next_checkpoint and next_checkpoint <= seconds:
            run.checkpoints.append(next_checkpoint)
            run.samples.append(samples)
            run.centroids.append(flat_parameters(model).reshape(init.shape).copy())
            next_checkpoint += checkpoint_every
        # Stop decision must agree across ranks for algorithms with collectives.
        over = now >= seconds
        if algorithm in ("sync", "batch"):  # these synchronise every step anyway
            over = comm.allreduce(over, op=MPI.LOR)  # waits for all ranks
        elif algorithm == "localsgd":  # agree only where it averages, so steps stay aligned
            period = int(options.get("local_steps", 8))  # type: ignore[call-overload]
            over = steps_done % period == 0 and comm.allreduce(over, op=MPI.LOR)
        if over:
            break
        idx = rng.integers(0, len(shard), size=local_batch) if not full_batch else slice(None)
        xb = shard[idx]
        algo.zero_grad()
        divisor = algo.loss_divisor(
            local_batch=len(xb), global_batch=len(xb) * comm.size, epoch_size=len(x)
        )
        (model(xb).sum() / divisor).backward()
        if algo.before_step(last_in_epoch=True):
            opt.step()
            algo.after_step()
        samples += len(xb)
        steps_done += 1
    algo.finish()
    run.counters = algo.counters()
    run.comm_seconds = float(getattr(algo, "comm_seconds", 0.0))
    run.steps = steps_done
    return run
