"""Synchronous data parallelism: gradients summed across ranks in one flat buffer."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from mpi4py import MPI


class GradientAllreduce:
    """Sums every parameter's gradient over ``comm`` with one ``Allreduce`` per step.

    The loss on each rank is its local sum divided by the *global* batch size, so the summed
    gradient equals the gradient of the mean loss over the global batch: training on P ranks
    follows the same trajectory as one rank on the whole batch.
    """

    def __init__(self, params: Sequence[torch.nn.Parameter], comm: MPI.Comm) -> None:
        self._params = [p for p in params if p.requires_grad]
        self._comm = comm
        total = sum(p.numel() for p in self._params)
        # On CUDA the buffer stays on the host: MPI here is not assumed to be CUDA-aware.
        self._flat = torch.zeros(total, dtype=torch.float32)

    def broadcast_parameters(self, root: int = 0) -> None:
        """Make every rank start from ``root``'s weights."""
        with torch.no_grad():
            for p in self._params:
                buf = p.detach().cpu().contiguous()
                self._comm.Bcast(buf.numpy(), root=root)  # waits for root
                p.copy_(buf)

    def __call__(self) -> None:
        offset = 0
        flat = self._flat
        for p in self._params:
            n = p.numel()
            if p.grad is None:
                flat[offset : offset + n].zero_()
            else:
                flat[offset : offset + n].copy_(p.grad.detach().reshape(-1))
            offset += n
        if self._comm.size > 1:
            self._comm.Allreduce(MPI.IN_PLACE, flat.numpy(), op=MPI.SUM)  # waits for all ranks
        offset = 0
        for p in self._params:
            n = p.numel()
            chunk = flat[offset : offset + n].view_as(p)
            if p.grad is None:
                p.grad = chunk.to(p.device, copy=True)
            else:
                p.grad.copy_(chunk)
            offset += n
