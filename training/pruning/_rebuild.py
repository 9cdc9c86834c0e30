"""After a prune (or a restore of pruned widths): rebuild what holds the old parameter layout.

Sync's gradient buckets (with their persistent allreduce requests) and ASGD's flat parameter
buffer and RMA window are sized for the parameters they were built on. The old algorithm is
released without its end-of-training work (no averaging: asgd ranks keep their own weights), a
new one is made on the new parameters and takes over the old one's state (steps, counters, random
state), as a checkpoint restore would. Collective: every rank calls it at the same point.
:func:`step_at` is the one path of a pruning step for the built-in trainer and an own loop's
``Session.prune_units``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from training.algorithms import ASGD, SyncSGD


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
    from training.pruning._units import _replace

    for module in model.modules():
        for name, _ in list(module.named_parameters(recurse=False)):
            _replace(module, name, 0, None, optimizer)


def rebuild(old: Any, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
            make: Callable[[], Any]) -> Any:
    """``make()``'s algorithm on the model's current parameters, ``old``'s state carried
    (collective: every rank calls it at the same point)."""
    release(old)
    renew_parameters(model, optimizer)
    new = make()  # asgd: a new window (waits for all ranks)
    new.load_state_dict(old.state_dict())
    if isinstance(old, SyncSGD) and isinstance(new, SyncSGD):
        new.allreduce.overlapped = old.allreduce.overlapped
    return new


def step_at(pruning: Any, epoch: int, model: torch.nn.Module,
            optimizer: torch.optim.Optimizer, algorithm: Any,
            make: Callable[[], Any]) -> Any | None:
    """The schedule of ``pruning`` (a :class:`training.pruning._units.UnitPruning`) at the start of
    ``epoch``: when a step is due, this epoch's units removed (collective: waits for all ranks)
    and the algorithm rebuilt on the new parameters, returned; else None. The one path of both
    doors: the built-in trainer (:func:`prune_step`) and an own loop
    (``training.Session.prune_units``)."""
    pruning.start_epoch(epoch)
    if pruning.due(epoch) and pruning.prune(model, optimizer, epoch):  # waits for all ranks
        return rebuild(algorithm, model, optimizer, make)
    return None


def rebuild_algorithm(trainer: Any) -> None:
    """``trainer.algorithm`` made again on the model's current parameters, state carried."""
    trainer.algorithm = rebuild(trainer.algorithm, trainer.model, trainer.optimizer,
                                trainer.make_algorithm)


def prune_step(trainer: Any, epoch: int) -> None:
    """The trainer's pruning at the start of ``epoch`` (collective when a step is due)."""
    from training.models import flops

    new = step_at(trainer.pruning, epoch, trainer.model, trainer.optimizer, trainer.algorithm,
                  trainer.make_algorithm)
    if new is not None:
        trainer.algorithm = new
        trainer.flops = flops(trainer.model, trainer.data.info.input_shape)


def restore_widths(trainer: Any, sizes: list[int] | None) -> None:
    """Before a checkpoint's state is loaded: shrink the dense model to its widths."""
    from training.models import flops
    from training.pruning._units import resize, widths

    if sizes is None or widths(trainer.model) == list(sizes):
        return
    resize(trainer.model, list(sizes), trainer.optimizer)
    rebuild_algorithm(trainer)
    trainer.flops = flops(trainer.model, trainer.data.info.input_shape)
