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

from training.algorithms._base import average_parameters, set_flat_parameters


def renew_parameters(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Every parameter that pruning left in place becomes a new tensor too (the same values,
    its optimizer state moved): the old algorithm's gradient hooks go with the old tensors."""
    for module in model.modules():
        for name, old in list(module.named_parameters(recurse=False)):
            new = torch.nn.Parameter(old.detach().clone(), requires_grad=old.requires_grad)
            setattr(module, name, new)
            for g in optimizer.param_groups:
                g["params"] = [new if q is old else q for q in g["params"]]
            if old in optimizer.state:
                optimizer.state[new] = optimizer.state.pop(old)


def rebuild(old: Any, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
            make: Callable[[], Any]) -> Any:
    """``make()``'s algorithm on the model's current parameters, ``old``'s state carried
    (collective: every rank calls it at the same point)."""
    old.release()  # sync: its buckets' requests; asgd: its window (waits for all ranks)
    renew_parameters(model, optimizer)
    new = make()  # asgd: a new window (waits for all ranks)
    new.load_state_dict(old.state_dict())
    new.continue_from(old)
    return new


def step_at(pruning: Any, epoch: int, model: torch.nn.Module,
            optimizer: torch.optim.Optimizer, algorithm: Any,
            make: Callable[[], Any]) -> Any | None:
    """The schedule of ``pruning`` (a :class:`training.pruning._units.UnitPruning`) at the start of
    ``epoch``: when a step is due, this epoch's units removed (collective: waits for all ranks)
    and the algorithm rebuilt on the new parameters, returned; else None. The one path of both
    doors: the built-in trainer (``Trainer._prune_step``) and an own loop
    (``training.Session.prune_units``)."""
    pruning.start_epoch(epoch)
    if not pruning.due(epoch):
        return None
    if pruning.config.average and algorithm.sync_period() != 1 and pruning.comm.size > 1:
        # asgd, localsgd, simuparallel: one model to cut and go on from (waits for all ranks)
        set_flat_parameters(model, average_parameters(model, pruning.comm))
    if pruning.prune(model, optimizer, epoch):  # waits for all ranks
        return rebuild(algorithm, model, optimizer, make)
    return None
