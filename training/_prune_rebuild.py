"""After a prune (or a restore of pruned widths): rebuild what holds the old parameter layout.

Sync's gradient buckets (with their persistent allreduce requests) and ASGD's flat parameter
buffer and RMA window are sized for the parameters they were built on. The old algorithm is
released without its end-of-training work (no averaging: asgd ranks keep their own weights), a
new one is made on the new parameters and takes over the old one's state (steps, counters, random
state), as a checkpoint restore would. Collective: every rank calls it at the same point.
"""

from __future__ import annotations

from typing import Any

import torch

from training._asgd import ASGD
from training._sync import SyncSGD


def release(algorithm: Any) -> None:
    """Free what ``algorithm`` holds for the old layout, without finishing it."""
    if isinstance(algorithm, SyncSGD):
        algorithm.allreduce.close()
    elif isinstance(algorithm, ASGD):
        algorithm.win.Unlock_all()  # completes our last message
        algorithm.comm.Barrier()  # waits for all ranks: nobody writes into a freed window
        algorithm.win.Free()


def renew_parameters(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Every parameter that pruning left in place becomes a new tensor too (the same values,
    its optimizer state moved): the old algorithm's gradient hooks go with the old tensors."""
    from training._pruning import _replace

    for module in model.modules():
        for name, _ in list(module.named_parameters(recurse=False)):
            _replace(module, name, 0, None, optimizer)


def rebuild_algorithm(trainer: Any) -> None:
    """``trainer.algorithm`` made again on the model's current parameters, state carried."""
    old = trainer.algorithm
    release(old)
    renew_parameters(trainer.model, trainer.optimizer)
    new = trainer.make_algorithm()  # asgd: a new window (waits for all ranks)
    new.load_state_dict(old.state_dict())
    if isinstance(old, SyncSGD) and isinstance(new, SyncSGD):
        new.allreduce.overlapped = old.allreduce.overlapped
    trainer.algorithm = new


def prune_step(trainer: Any, epoch: int) -> None:
    """The trainer's pruning at the start of ``epoch`` (collective)."""
    from training._trainer import _flops  # the trainer imports this module

    if trainer.pruning.prune(trainer.model, trainer.optimizer, epoch):  # waits for all ranks
        rebuild_algorithm(trainer)
        trainer.flops = _flops(trainer.model, trainer.data.info.input_shape)


def restore_widths(trainer: Any, sizes: list[int] | None) -> None:
    """Before a checkpoint's state is loaded: shrink the dense model to its widths."""
    from training._pruning import resize, widths
    from training._trainer import _flops

    if sizes is None or widths(trainer.model) == list(sizes):
        return
    resize(trainer.model, list(sizes), trainer.optimizer)
    rebuild_algorithm(trainer)
    trainer.flops = _flops(trainer.model, trainer.data.info.input_shape)
