"""Structured pruning during training: units chosen by an agreed importance and physically removed.

A *group* is one layer's output units (the neurons of a ``Linear``, the channels of a convolution)
with what depends on them: the batch norm after it (its scale, shift and running statistics are
sliced too) and the next layer, whose matching inputs are removed (a ``Linear`` after a
``Flatten`` loses the ``H*W`` columns of each removed channel). The classifier's outputs are never
pruned. Models: a plain ``nn.Sequential`` of linear, convolution, batch-norm, activation, pooling,
dropout and flatten layers, or a module whose ``body`` is one (the built-in MLP and the ``stack``
genome family). A model of another shape (cell and macro genomes: residual sums couple channels)
is refused with one line.

Removal replaces each affected parameter by a new, smaller one and moves its optimizer state
(SGD's momentum, Adam's ``exp_avg`` and ``exp_avg_sq``) with it, sliced at the same indices:
nothing is reset. What holds the old parameter layout (sync's gradient buckets, ASGD's flat
buffer and window) is rebuilt by training.pruning._rebuild.step_at.

Agreement: every rank computes its importances, the vectors are gathered to every rank
(``allgather``, waits for all ranks) and averaged in rank order, so every rank holds the same
bits and keeps the same units, also under asgd, localsgd and simuparallel, whose ranks hold
different weights. Pruning happens at the start of an epoch, a point every algorithm reaches
together (the epoch ends with a collective).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:  # a type only: the settings are validated in training.pruning._config
    from training.pruning._config import PruneConfig


_PRODUCERS = (nn.Linear, nn.Conv1d, nn.Conv2d)
_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d)
_PASSIVE = (
    nn.ReLU, nn.Tanh, nn.GELU, nn.SiLU, nn.Dropout, nn.Identity, nn.Flatten,
    nn.MaxPool1d, nn.MaxPool2d, nn.AvgPool1d, nn.AvgPool2d,
    nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d,
)


class PruneError(ValueError):
    """A model or configuration that cannot be pruned; the message names ``training.prune``."""


@dataclass
class Group:
    """One producer's output units and what depends on them."""

    producer: nn.Module
    norms: list[nn.Module]
    consumer: nn.Module

    @property
    def width(self) -> int:
        return int(self.producer.weight.shape[0])

    @property
    def kind(self) -> str:
        return "neurons" if isinstance(self.producer, nn.Linear) else "channels"


def _sequence(model: nn.Module) -> nn.Sequential:
    seq = model if isinstance(model, nn.Sequential) else getattr(model, "body", None)
    if not isinstance(seq, nn.Sequential):
        raise PruneError(
            f"training.prune: cannot prune a {type(model).__name__}: pruning supports sequential "
            "models (the built-in MLP and the stack genome family)"
        )
    for m in seq.children():
        if not isinstance(m, _PRODUCERS + _NORMS + _PASSIVE):
            raise PruneError(
                f"training.prune: cannot prune a model with a {type(m).__name__} layer: pruning "
                "supports sequential models (the built-in MLP and the stack genome family)"
            )
        if isinstance(m, nn.Conv1d | nn.Conv2d) and m.groups != 1:
            raise PruneError("training.prune: grouped convolutions are not supported")
    return seq


def groups(model: nn.Module, units: str = "all") -> list[Group]:
    """The prunable groups of ``model`` in forward order (``units``: all, neurons, channels)."""
    found: list[Group] = []
    current: Group | None = None
    for m in _sequence(model).children():
        if isinstance(m, _PRODUCERS):
            if current is not None:
                current.consumer = m
                found.append(current)
            current = Group(producer=m, norms=[], consumer=m)
        elif isinstance(m, _NORMS) and current is not None:
            current.norms.append(m)
    return [g for g in found if units in ("all", g.kind)]


def widths(model: nn.Module) -> list[int]:
    """Every group's width (all units), the shape a checkpoint records."""
    return [g.width for g in groups(model)]


def output_layer(group: Group) -> nn.Module:
    """The last affine layer of a unit's output: its batch norm if it has one, else itself."""
    return group.norms[0] if group.norms and group.norms[0].weight is not None else group.producer


@torch.no_grad()
def taylor_batch(group: Group) -> torch.Tensor:
    """Per unit, this batch's first-order Taylor importance ``|sum of y * dL/dy|`` over the
    batch and positions, ``y`` the unit's output (after its batch norm, if any; a ReLU after it
    leaves the sum as it is): from the gradients of the layer making ``y``, since
    ``sum(y * dL/dy) = sum(w * dL/dw) + b * dL/db`` for an affine map. Before a batch norm the
    sum is 0 (the norm undoes any scaling of its input), so the norm's output is measured."""
    layer = output_layer(group)
    total = torch.zeros(group.width, dtype=torch.float64, device=layer.weight.device)
    for p in (layer.weight, getattr(layer, "bias", None)):
        if p is not None and p.grad is not None:
            total += (p.detach() * p.grad).reshape(group.width, -1).sum(1).double()
    return total.abs()  # on the model's device: no copy to the host at every step


def importance(group: Group, criterion: str) -> torch.Tensor:
    """Per unit, float64 on the CPU: l1 = L1 norm of its incoming weights; bn_l1 = |scale| of
    the batch norm after it (taylor is accumulated by :class:`UnitPruning`)."""
    if criterion == "bn_l1":
        if not group.norms or group.norms[0].weight is None:
            raise PruneError(
                "training.prune.criterion: 'bn_l1' needs a batch norm with a scale after every "
                f"pruned layer; this {type(group.producer).__name__} has none (use 'l1')"
            )
        return group.norms[0].weight.detach().abs().double().cpu()
    w = group.producer.weight.detach()
    return w.abs().reshape(w.shape[0], -1).sum(1).double().cpu()


def agreed(local: list[torch.Tensor], comm: Any) -> list[np.ndarray]:
    """The mean over ranks of every group's importances, the same bits on every rank: gathered
    to all (waits for all ranks), added in rank order."""
    flat = np.concatenate([t.numpy() for t in local]) if local else np.zeros(0)
    every = comm.allgather(flat) if comm.size > 1 else [flat]  # waits for all ranks
    mean = np.sum(np.stack(every), axis=0) / len(every)
    out, offset = [], 0
    for t in local:
        out.append(mean[offset : offset + len(t)])
        offset += len(t)
    return out


def fan_in(layer: nn.Module) -> int:
    """Inputs of each output unit of a linear or convolution layer (in features x kernel)."""
    return int(layer.weight[0].numel())


def keep_count(width: int, original: int, fraction: float) -> int:
    """Units a group keeps when ``fraction`` of its ``original`` units are to be gone (>= 1)."""
    return max(1, min(width, round(original * (1.0 - fraction))))


def choose(scores: np.ndarray, keep: int) -> torch.Tensor:
    """Indices of the ``keep`` most important units, in their original order (ties: lower
    index first)."""
    order = np.argsort(-scores, kind="stable")[:keep]
    return torch.from_numpy(np.sort(order)).long()


def _replace(module: nn.Module, name: str, dim: int, idx: torch.Tensor | None,
             optimizer: torch.optim.Optimizer | None) -> None:
    """``module.name`` <- a new parameter holding its slices ``idx`` along ``dim`` (None: a
    copy of all of it); the optimizer's state for it sliced the same way and moved to it."""
    old = getattr(module, name, None)
    if old is None:
        return

    def take(t: torch.Tensor) -> torch.Tensor:
        return t.clone() if idx is None else t.index_select(dim, idx.to(t.device)).clone()

    new = nn.Parameter(take(old.detach()), requires_grad=old.requires_grad)
    setattr(module, name, new)
    if optimizer is None:
        return
    for g in optimizer.param_groups:
        g["params"] = [new if q is old else q for q in g["params"]]
    state = optimizer.state.pop(old, None)
    if state is not None:
        optimizer.state[new] = {
            k: (take(v) if torch.is_tensor(v) and v.shape == old.shape else v)
            for k, v in state.items()
        }


@torch.no_grad()
def remove_units(group: Group, keep: torch.Tensor,
                 optimizer: torch.optim.Optimizer | None = None) -> None:
    """Physically remove every unit of ``group`` not in ``keep`` (sorted indices)."""
    producer, consumer = group.producer, group.consumer
    width = group.width
    _replace(producer, "weight", 0, keep, optimizer)
    _replace(producer, "bias", 0, keep, optimizer)
    if isinstance(producer, nn.Linear):
        producer.out_features = len(keep)
    else:
        producer.out_channels = len(keep)
    for norm in group.norms:
        _replace(norm, "weight", 0, keep, optimizer)
        _replace(norm, "bias", 0, keep, optimizer)
        for buf in ("running_mean", "running_var"):
            if getattr(norm, buf, None) is not None:
                setattr(norm, buf, getattr(norm, buf)[keep.to(getattr(norm, buf).device)].clone())
        norm.num_features = len(keep)
    if isinstance(consumer, nn.Linear):
        spread = consumer.in_features // width  # a Flatten after channels: H*W columns each
        if spread * width != consumer.in_features:
            raise PruneError(f"training.prune: a Linear of {consumer.in_features} inputs after "
                             f"{width} units: cannot tell which inputs belong to which unit")
        cols = (keep[:, None] * spread + torch.arange(spread)[None, :]).reshape(-1)
        _replace(consumer, "weight", 1, cols, optimizer)
        consumer.in_features = len(cols)
    else:
        _replace(consumer, "weight", 1, keep, optimizer)
        consumer.in_channels = len(keep)


def resize(model: nn.Module, sizes: list[int],
           optimizer: torch.optim.Optimizer | None = None) -> None:
    """Shrink ``model`` to the widths of a checkpoint (the first units; a load follows)."""
    gs = groups(model)
    if len(gs) != len(sizes) or any(n > g.width for g, n in zip(gs, sizes, strict=False)):
        raise PruneError(f"training.prune: the checkpoint's widths {sizes} do not fit this model "
                         f"(widths {[g.width for g in gs]})")
    for g, n in zip(gs, sizes, strict=True):
        if n < g.width:
            remove_units(g, torch.arange(n), optimizer)


class UnitPruning:
    """A trial's pruning: the schedule, the sparsity penalty and each step's removal."""

    def __init__(self, config: PruneConfig, model: nn.Module, comm: Any) -> None:
        self.config = config
        self.comm = comm
        # The dense fan-in of every layer (rescale) and the layer reading the input (input_layer).
        self.fan_in = {id(m): fan_in(m) for m in _sequence(model).children()
                       if isinstance(m, _PRODUCERS)}  # refuses a model it cannot prune
        self.first = next((m for m in _sequence(model).children()
                           if isinstance(m, _PRODUCERS)), None)
        found = self.groups(model)
        if config.criterion == "bn_l1":
            for g in found:
                importance(g, "bn_l1")  # refuses a layer without a batch norm, up front
        self.original = {id(g.producer): g.width for g in found}
        self.events = config.events()
        self.active = False  # the sparsity penalty applies (epochs up to end_epoch)
        self.collecting = False  # taylor's sums grow (epochs before the last step)
        self.kept: list[list[list[int]]] = []  # per step: each group's kept unit indices
        # taylor: per group, the importance summed over the batches since the last step
        self.taylor = [torch.zeros(g.width, dtype=torch.float64) for g in found]

    def groups(self, model: nn.Module) -> list[Group]:
        """The groups this configuration prunes (``units``; the input layer's unless
        ``input_layer`` is false)."""
        found = groups(model, self.config.units)
        return found if self.config.input_layer else [g for g in found
                                                      if g.producer is not self.first]

    def start_epoch(self, epoch: int) -> None:
        self.active = self.config.sparsity > 0 and epoch <= self.config.end_epoch
        self.collecting = self.config.criterion == "taylor" and epoch < max(self.events)

    def due(self, epoch: int) -> bool:
        return self.events.get(epoch, 0.0) > 0.0

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps beyond the widths: taylor's sums so far (a resumed run
        prunes by the batches it did not run again)."""
        return {"taylor": [t.cpu().clone() for t in self.taylor]}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state is not None:
            self.taylor = [t.clone().double() for t in state["taylor"]]

    @torch.no_grad()
    def after_backward(self, model: nn.Module) -> None:
        """Once per step, after the gradients are summed over ranks (sync ranks stay equal):
        taylor's importances accumulate, then the L1 subgradient ``sparsity * sign(x)`` is
        added to the gradients of what the criterion measures."""
        criterion = self.config.criterion
        found = self.groups(model)
        if self.collecting:
            for k, g in enumerate(found):
                batch = taylor_batch(g)
                self.taylor[k] = self.taylor[k].to(batch.device) + batch
        if self.config.rescale:  # each layer learns at its dense pace (lr x fan-in per step)
            for m in _sequence(model).children():
                if isinstance(m, _PRODUCERS) and m.weight.grad is not None:
                    ratio = self.fan_in.get(id(m), fan_in(m)) / fan_in(m)
                    if ratio != 1.0:
                        m.weight.grad.mul_(ratio)
        if not self.active:
            return
        for g in found:
            target = {"l1": g.producer, "bn_l1": g.norms[0] if g.norms else g.producer,
                      "taylor": output_layer(g)}[criterion]
            w = target.weight
            if w is not None and w.grad is not None:
                w.grad.add_(torch.sign(w), alpha=self.config.sparsity)

    def prune(self, model: nn.Module, optimizer: torch.optim.Optimizer | None,
              epoch: int) -> bool:
        """Collective (waits for all ranks): remove this epoch's share of units. Returns
        whether the parameter layout changed."""
        fraction = self.events.get(epoch, 0.0)
        found = self.groups(model)
        if self.config.criterion == "taylor":
            local = [t.cpu() for t in self.taylor]
        else:
            local = [importance(g, self.config.criterion) for g in found]
        scores = agreed(local, self.comm)  # waits for all ranks
        changed, kept = False, []
        for g, s in zip(found, scores, strict=True):
            n = keep_count(g.width, self.original.get(id(g.producer), g.width), fraction)
            keep = choose(s, n)
            kept.append(keep.tolist())
            if n < g.width:
                remove_units(g, keep, optimizer)
                changed = True
        self.kept.append(kept)
        self.taylor = [torch.zeros(g.width, dtype=torch.float64) for g in found]
        return changed
