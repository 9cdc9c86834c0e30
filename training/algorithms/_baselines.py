"""Baselines for honest comparison with ASGD: SimuParallelSGD, local SGD, map-reduce BATCH."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from mpi4py import MPI

from training.algorithms._base import Algorithm, average_parameters, set_flat_parameters


class SimuParallelSGD(Algorithm):
    """Zinkevich et al. 2010: every rank runs SGD on its own data; one average at the end."""


    def finish(self) -> None:
        set_flat_parameters(self.model, average_parameters(self.model, self.comm))

    def counters(self) -> dict[str, int]:
        return {"averages": 1}


class LocalSGD(Algorithm):
    """Local SGD: independent steps, parameters averaged every ``local_steps`` steps."""


    def __init__(
        self, model: torch.nn.Module, comm: MPI.Comm, *, local_steps: int = 8, **_: object
    ) -> None:
        super().__init__(model, comm)
        self.period = local_steps
        self.steps = 0
        self.averages = 0

    def sync_period(self) -> int | None:
        return self.period

    def after_step(self) -> None:
        self.steps += 1
        if self.steps % self.period == 0:
            set_flat_parameters(self.model, average_parameters(self.model, self.comm))
            self.averages += 1

    def finish(self) -> None:
        set_flat_parameters(self.model, average_parameters(self.model, self.comm))

    def counters(self) -> dict[str, int]:
        return {"averages": self.averages + 1}

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "averages": self.averages}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps, self.averages = int(state["steps"]), int(state["averages"])


class BatchGD(Algorithm):
    """Full-batch gradient descent in map-reduce form: every rank sums the gradient over its
    part of the whole training set (map), one allreduce (reduce), one step per epoch."""


    def __init__(self, model: torch.nn.Module, comm: MPI.Comm, **_: object) -> None:
        super().__init__(model, comm)
        self._accumulating = False
        self.steps = 0

    def sync_period(self) -> int | None:
        return 1  # train_kmeans: every step is a whole pass (the trainer: once an epoch)

    def loss_divisor(self, *, local_batch: int, global_batch: int, epoch_size: int) -> int:
        return epoch_size  # summed over the epoch and the ranks = mean over the training set

    def zero_grad(self) -> None:
        if not self._accumulating:  # gradients add up over the whole epoch
            super().zero_grad()
            self._accumulating = True

    def before_step(self, last_in_epoch: bool) -> bool:
        if not last_in_epoch:
            return False
        params = [p for p in self.model.parameters() if p.requires_grad]
        flat = np.concatenate(
            [
                (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).cpu().numpy()
                for p in params
            ]
        ).astype(np.float32)
        if self.comm.size > 1:
            self.comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)  # waits for all ranks
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = torch.from_numpy(flat[offset : offset + n].copy()).view_as(p).to(p.device)
            offset += n
        self._accumulating = False
        self.steps += 1
        return True

    def counters(self) -> dict[str, int]:
        return {"steps": self.steps}

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = int(state["steps"])
