"""Registry of the distributed algorithms, by the name a study file uses."""

from __future__ import annotations

import torch
from mpi4py import MPI

from training._algorithm import Algorithm
from training._asgd import ASGD
from training._baselines import BatchGD, LocalSGD, SimuParallelSGD
from training._sync import SyncSGD

ALGORITHMS: dict[str, type[Algorithm]] = {
    cls.name: cls for cls in (SyncSGD, ASGD, SimuParallelSGD, LocalSGD, BatchGD)
}


def make_algorithm(
    name: str, model: torch.nn.Module, comm: MPI.Comm, **options: object
) -> Algorithm:
    try:
        cls = ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r} (known: {sorted(ALGORITHMS)})") from None
    return cls(model, comm, **options)
