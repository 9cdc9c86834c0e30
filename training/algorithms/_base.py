"""The one small interface every distributed algorithm implements, and its registry.

The trainer's loop is the same for all of them::

    algo.zero_grad(); loss.backward()
    if algo.before_step(last_in_epoch): optimizer.step(); algo.after_step()

and it evaluates inside ``with algo.consensus():`` (the weights every rank agrees on).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from mpi4py import MPI


def flat_parameters(model: torch.nn.Module, dtype: Any = np.float64) -> np.ndarray:
    """All parameters as one host vector (a copy)."""
    parts = [p.detach().reshape(-1).cpu().numpy() for p in model.parameters()]
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


@torch.no_grad()
def set_flat_parameters(model: torch.nn.Module, flat: np.ndarray) -> None:
    offset = 0
    for p in model.parameters():
        n = p.numel()
        chunk = torch.from_numpy(np.ascontiguousarray(flat[offset : offset + n]))
        p.copy_(chunk.view_as(p).to(p.device, p.dtype))
        offset += n


@torch.no_grad()
def broadcast_parameters(params: list[torch.nn.Parameter], comm: MPI.Comm, root: int = 0) -> None:
    """Every rank takes ``root``'s values of ``params``."""
    for p in params:
        buf = p.detach().cpu().contiguous()
        comm.Bcast(buf.numpy(), root=root)  # waits for root
        p.copy_(buf)


def average_parameters(model: torch.nn.Module, comm: MPI.Comm) -> np.ndarray:
    """The mean of every rank's parameters (a collective: waits for all ranks)."""
    flat = flat_parameters(model)
    if comm.size > 1:
        comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)  # waits for all ranks
        flat /= comm.size
    return flat


class Algorithm:
    """Base: independent local SGD steps on each rank, nothing exchanged (override the hooks)."""


    def __init__(self, model: torch.nn.Module, comm: MPI.Comm, **_: object) -> None:
        self.model = model
        self.comm = comm

    def sync_period(self) -> int | None:
        """Every how many steps every rank takes part in a collective (1: every step), or
        None when ranks never wait for each other during training. A loop that stops on a
        clock must let ranks agree on stopping only at such steps, or one rank would wait
        for ever in a collective another rank never enters."""
        return None

    def broadcast_parameters(self, root: int = 0) -> None:
        """Every rank starts from ``root``'s weights."""
        broadcast_parameters(list(self.model.parameters()), self.comm, root)

    def loss_divisor(self, *, local_batch: int, global_batch: int, epoch_size: int) -> int:
        """What this rank's summed loss is divided by: its own batch by default (every rank
        steps on its own mean loss); algorithms that sum gradients over ranks use more."""
        return max(1, local_batch)

    def zero_grad(self) -> None:
        for p in self.model.parameters():
            p.grad = None

    def before_step(self, last_in_epoch: bool) -> bool:
        """Called after backward; return False to skip this optimizer step."""
        return True

    def after_step(self) -> None:
        """Called after each optimizer step."""

    def finish(self) -> None:
        """Called once after the last epoch (before the final evaluation)."""

    def release(self) -> None:
        """Free what is sized for the current parameters, without finishing (no averaging):
        pruning replaces the parameters and makes the algorithm again (training.pruning)."""

    def continue_from(self, old: Algorithm) -> None:
        """Carry ``old``'s counters into this algorithm, made again after a prune."""

    @contextlib.contextmanager
    def consensus(self) -> Iterator[None]:
        """Evaluate the mean of all ranks' weights, then go back to this rank's own."""
        own = flat_parameters(self.model)
        set_flat_parameters(self.model, average_parameters(self.model, self.comm))
        try:
            yield
        finally:
            set_flat_parameters(self.model, own)

    def counters(self) -> dict[str, int]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        """This rank's own state beyond the model and optimizer (for checkpoints)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (on the same rank of a job of the same size)."""
