"""K-means by SGD, the first experiment of the ASGD paper, trained by the same algorithms.

Loss: mean squared distance of each point to its nearest centroid. All ranks start from the
same centroids (rank 0's, broadcast). ``train_kmeans`` runs one algorithm for a fixed number of
steps per rank (tests: the same work under any load) or for a wall-clock budget (benchmarks),
and records every rank's centroids at fixed times without communicating, so the consensus loss
over time can be computed afterwards without disturbing asynchronous runs. ``lloyd`` is the
outside reference: Lloyd's algorithm from the same start, run to convergence.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from mpi4py import MPI
from torch import nn

from training.algorithms import Pace, flat_parameters, make_algorithm


class KMeans(nn.Module):
    def __init__(self, centroids: np.ndarray) -> None:
        super().__init__()
        self.centroids = nn.Parameter(torch.from_numpy(np.asarray(centroids, np.float32)).clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Per-point squared distance to the nearest centroid."""
        return torch.cdist(x, self.centroids).pow(2).min(dim=1).values


def kmeans_data(n: int, *, k: int, dim: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points from ``k`` Gaussian clusters (unit variance, centres uniform in
    [-10, 10]^dim) and k initial centroids chosen by k-means++ seeding on a sample of the data
    (Arthur & Vassilvitskii 2007), the same for every caller with the same seed. k-means++
    keeps every method out of the poor local minima that a uniform pick of data points leads
    all of them into, so a run measures speed, not luck."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-10, 10, size=(k, dim))
    labels = rng.integers(0, k, size=n)
    x = (centers[labels] + rng.normal(size=(n, dim))).astype(np.float32)
    sample = x[rng.choice(n, size=min(n, 20 * k), replace=False)].astype(np.float64)
    init = [sample[rng.integers(len(sample))]]
    nearest = np.sum((sample - init[0]) ** 2, axis=1)
    for _ in range(1, k):
        pick = rng.choice(len(sample), p=nearest / nearest.sum())
        init.append(sample[pick])
        nearest = np.minimum(nearest, np.sum((sample - sample[pick]) ** 2, axis=1))
    return x, np.asarray(init, np.float32)


def kmeans_loss(x: np.ndarray, centroids: np.ndarray) -> float:
    with torch.no_grad():
        d = torch.cdist(torch.from_numpy(x), torch.from_numpy(centroids.astype(np.float32)))
        return float(d.pow(2).min(dim=1).values.mean())


def lloyd(x: np.ndarray, init: np.ndarray, *, max_iter: int = 300) -> tuple[np.ndarray, float]:
    """Lloyd's algorithm from ``init`` until no point changes cluster: (centroids, loss)."""
    xt = torch.from_numpy(x)
    c = torch.from_numpy(init.astype(np.float32)).clone()
    assign = None
    with torch.no_grad():
        for _ in range(max_iter):
            new = torch.cdist(xt, c).argmin(dim=1)
            if assign is not None and torch.equal(new, assign):
                break
            assign = new
            sums = torch.zeros_like(c).index_add_(0, assign, xt)
            counts = torch.bincount(assign, minlength=len(c)).unsqueeze(1).to(c.dtype)
            c = torch.where(counts > 0, sums / counts.clamp(min=1), c)  # empty: stays put
    centroids = c.numpy()
    return centroids, kmeans_loss(x, centroids)


@dataclass
class KMeansRun:
    checkpoints: list[float]  # seconds since the common start
    samples: list[int]  # samples this rank had processed at each checkpoint
    centroids: list[np.ndarray]  # this rank's centroids at each checkpoint
    counters: dict[str, int]
    comm_seconds: float
    steps: int
    wall_s: float  # this rank's time from the common start to its last step
    cpu_s: float  # this rank's CPU time over the same span (process_time)
    last: np.ndarray  # this rank's centroids after its last step (before any final average)
    samples_total: int


def train_kmeans(
    comm: MPI.Comm,
    algorithm: str,
    x: np.ndarray,
    init: np.ndarray,
    *,
    lr: float,
    batch_size: int,
    seconds: float | None = None,
    steps: int | None = None,
    checkpoint_every: float = 0.05,
    slowdown: Sequence[float] = (),
    seed: int = 0,
    **options: object,
) -> KMeansRun:
    """Train for ``steps`` steps on every rank, or for ``seconds`` of wall time (give one).

    Each rank draws mini-batches of ``batch_size / ranks`` from its own shard
    ``x[rank::size]``. ``batch`` (map-reduce full-batch GD) takes one step per pass over the
    shards. ``slowdown``: rank i computes ``slowdown[i]`` times slower (see
    :mod:`training.algorithms._pace`). Ranks agree on stopping only where the algorithm synchronises
    anyway (:meth:`Algorithm.sync_period`), so asynchronous ones never wait for each other.
    """
    if (seconds is None) == (steps is None):
        raise ValueError("train_kmeans: give exactly one of seconds and steps")
    torch.set_num_threads(1)
    model = KMeans(init)
    algo = make_algorithm(algorithm, model, comm, lr=lr, seed=seed, **options)
    algo.broadcast_parameters(0)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    shard = torch.from_numpy(x[comm.rank :: comm.size])
    rng = np.random.default_rng([seed, comm.rank])
    full_batch = algorithm == "batch"
    local_batch = len(shard) if full_batch else max(1, batch_size // comm.size)
    period = algo.sync_period()
    pace = Pace(slowdown, comm.rank)
    run = KMeansRun([], [], [], {}, 0.0, 0, 0.0, 0.0, init, 0)
    samples = 0
    budget = float("inf") if seconds is None else seconds
    comm.Barrier()  # waits for all ranks: one common start
    start, cpu_start = MPI.Wtime(), time.process_time()
    next_checkpoint = 0.0
    steps_done = 0
    while True:
        now = MPI.Wtime() - start
        while now >= next_checkpoint and next_checkpoint <= budget:
            run.checkpoints.append(next_checkpoint)
            run.samples.append(samples)
            run.centroids.append(flat_parameters(model).reshape(init.shape).copy())
            next_checkpoint += checkpoint_every
        if steps is not None:
            if steps_done >= steps:
                break
        else:
            over = now >= budget
            if period is not None and steps_done % period == 0:
                over = comm.allreduce(over, op=MPI.LOR)  # waits for all ranks
            elif period is not None:
                over = False  # between two collectives every rank goes on
            if over:
                break
        idx = rng.integers(0, len(shard), size=local_batch) if not full_batch else slice(None)
        xb = shard[idx]
        algo.zero_grad()
        divisor = algo.loss_divisor(
            local_batch=len(xb), global_batch=len(xb) * comm.size, epoch_size=len(x)
        )
        pace.start()
        (model(xb).sum() / divisor).backward()
        pace.stop()
        if algo.before_step(last_in_epoch=True):
            opt.step()
            algo.after_step()
        samples += len(xb)
        steps_done += 1
    run.wall_s = MPI.Wtime() - start
    run.cpu_s = time.process_time() - cpu_start
    run.last = flat_parameters(model).reshape(init.shape).copy()
    run.samples_total = samples
    algo.finish()
    run.counters = algo.counters()
    run.comm_seconds = float(getattr(algo, "comm_seconds", 0.0))
    run.steps = steps_done
    return run
