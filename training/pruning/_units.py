"""Structured pruning during training: units chosen by an agreed importance and physically removed.

The model's prunable groups come from Torch-Pruning's dependency graph
(training.pruning._graph): a group is one linear or convolution layer's output units with
everything coupled to them (batch and layer norms, the layers reading them, the other branches
of a residual sum, attention's projections), removed together. Importances are Torch-Pruning's
own, summed over the group's members: ``l1`` its group L1 magnitude (every coupled weight of a
unit), ``bn_l1`` its batch norms' |scale| (Network Slimming), ``taylor`` its first-order Taylor
score ``|w * dL/dw|`` (Molchanov et al. 2019) summed over the batches since the last step.

Removal replaces each affected parameter by a new, smaller one and moves its optimizer state
(SGD's momentum, Adam's ``exp_avg`` and ``exp_avg_sq``) with it, sliced at the same positions:
nothing is reset. What holds the old parameter layout (sync's gradient buckets, ASGD's flat
buffer and window) is rebuilt by training.pruning._rebuild.step_at.

Agreement: every rank computes its importances, the vectors are gathered to every rank
(``allgather``, waits for all ranks) and averaged in rank order, so every rank holds the same
bits and removes the same units, also under asgd, localsgd and simuparallel, whose ranks hold
different weights. Pruning happens at the start of an epoch, a point every algorithm reaches
together (the epoch ends with a collective).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from training.pruning._graph import _NORMS, _PRODUCERS, Graph, PruneError, _tp, cut_count, remove

if TYPE_CHECKING:  # a type only: the settings are validated in training.pruning._config
    from training.pruning._config import PruneConfig

__all__ = ["PruneError", "UnitPruning", "agreed", "choose", "fan_in"]


def _scorer(criterion: str) -> Any:
    imp = _tp().importance
    if criterion == "bn_l1":
        return imp.BNScaleImportance(normalizer=None)
    if criterion == "taylor":
        return imp.GroupTaylorImportance(normalizer=None)
    return imp.GroupMagnitudeImportance(p=1, normalizer=None)


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


def choose(scores: np.ndarray, keep: int) -> torch.Tensor:
    """Indices of the ``keep`` most important units, in their original order (ties: lower
    index first)."""
    order = np.argsort(-scores, kind="stable")[:keep]
    return torch.from_numpy(np.sort(order)).long()


class UnitPruning:
    """A trial's pruning: the schedule, the sparsity penalty and each step's removal.

    ``example`` is the model's inputs for one small batch (what the dependency graph is
    traced on; ``forward(model, example)`` runs the model on it). ``allow_empty``: a model with
    nothing to prune trains dense (a genome family's draw without a prunable layer) instead of
    being refused."""

    def __init__(self, config: PruneConfig, model: nn.Module, comm: Any, example: Any,
                 forward: Callable[[nn.Module, Any], Any] | None = None, *,
                 allow_empty: bool = False) -> None:
        self.config = config
        self.comm = comm
        self.model = model
        try:
            self.graph: Graph | None = Graph(
                model, example, forward, units=config.units, keep=config.keep,
                input_layer=config.input_layer, target=config.target)
        except PruneError as exc:
            if not (allow_empty and "no linear or convolution layer" in str(exc)):
                raise
            self.graph = None
        # The dense fan-in of every layer (rescale).
        self.fan_in = {id(m): fan_in(m) for m in model.modules() if isinstance(m, _PRODUCERS)}
        if config.criterion == "bn_l1" and self.graph is not None:
            for g in self.graph.groups:  # refuses a group without a batch norm, up front
                if not any(getattr(m, "weight", None) is not None
                           for m in self.graph.layers(g, (nn.modules.batchnorm._BatchNorm,))):
                    raise PruneError(
                        "training.prune.criterion: 'bn_l1' needs a batch norm with a scale in "
                        f"every pruned group; {self.graph.name.get(self.graph.root(g))}'s has "
                        "none (use 'l1', or keep that layer with prune.keep)")
        self.original = dict(zip(self._roots(), self.widths(), strict=True))
        self.scorer = _scorer(config.criterion)
        self.events = config.events()
        self.active = False  # the sparsity penalty applies (epochs up to end_epoch)
        self.collecting = False  # taylor's sums grow (epochs before the last step)
        self.kept: list[list[list[int]]] = []  # per step: each group's kept unit indices
        # taylor: per group, the importance summed over the batches since the last step
        self.taylor = [torch.zeros(w, dtype=torch.float64) for w in self.widths()]
        self._pulled: tuple[list[Any], list[nn.Module]] | None = None  # the penalty's layers

    # -- what a checkpoint and a report need ------------------------------------------------
    def _roots(self) -> list[str]:
        g = self.graph
        return [] if g is None else [str(g.name.get(g.root(x))) for x in g.groups]

    def widths(self) -> list[int]:
        """Every group's width (all units), the shape a checkpoint records."""
        return [] if self.graph is None else self.graph.widths()

    def report(self) -> dict[str, Any]:
        """What a trial records (its ``pruned_units`` attribute): each group's dense and current
        width by the layer it is known by, and the groups left alone."""
        graph = self.graph
        if graph is None:
            return {"groups": {}, "left_alone": [], "note": "no layer whose outputs may be "
                    "removed: trained dense"}
        now = dict(zip(self._roots(), self.widths(), strict=True))
        return {"groups": {k: [self.original.get(k, w), w] for k, w in now.items()},
                "left_alone": self.left_alone()}

    def left_alone(self) -> list[str]:
        """The groups found unsafe to cut (their root layers' names)."""
        return [] if self.graph is None else list(self.graph.unsafe)

    def resize(self, sizes: list[int], optimizer: torch.optim.Optimizer | None = None) -> None:
        """Shrink the model to the widths of a checkpoint (a group's first units; the load
        that follows sets every value)."""
        now = self.widths()
        if len(now) != len(sizes) or any(n > w for w, n in zip(now, sizes, strict=False)):
            raise PruneError(f"training.prune: the checkpoint's widths {list(sizes)} do not "
                             f"fit this model (widths {now})")
        if self.graph is None or list(sizes) == now:
            return
        plan = [(g, list(range(n, w))) for g, w, n
                in zip(self.graph.groups, now, sizes, strict=True) if n < w]
        remove(self.graph, plan, optimizer)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps beyond the widths: taylor's sums so far (a resumed run
        prunes by the batches it did not run again)."""
        return {"taylor": [t.cpu().clone() for t in self.taylor]}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state is not None:
            self.taylor = [t.clone().double() for t in state["taylor"]]

    # -- the schedule -----------------------------------------------------------------------
    def start_epoch(self, epoch: int) -> None:
        self.active = self.config.sparsity > 0 and epoch <= self.config.end_epoch
        self.collecting = self.config.criterion == "taylor" and epoch < max(self.events)

    def due(self, epoch: int) -> bool:
        return self.events.get(epoch, 0.0) > 0.0 and self.graph is not None

    def _penalized(self, group: Any) -> list[nn.Module]:
        """What the sparsity penalty pulls to 0 in a group: the criterion's measure."""
        assert self.graph is not None
        norms = [m for m in self.graph.layers(group, _NORMS)
                 if getattr(m, "weight", None) is not None]
        producers = self.graph.layers(group, _PRODUCERS)
        if self.config.criterion == "l1":
            return producers
        return norms or producers

    @torch.no_grad()
    def after_backward(self, model: nn.Module) -> None:
        """Once per step, after the gradients are summed over ranks (sync ranks stay equal):
        taylor's importances accumulate, then the L1 subgradient ``sparsity * sign(x)`` is
        added to the gradients of what the criterion measures."""
        if self.graph is None:
            return
        if self.collecting:
            for k, g in enumerate(self.graph.groups):
                batch = self._score(g)
                if batch is not None:
                    self.taylor[k] = self.taylor[k].to(batch.device) + batch
        if self.config.rescale:  # each layer learns at its dense pace (lr x fan-in per step)
            for m in model.modules():
                if isinstance(m, _PRODUCERS) and m.weight.grad is not None:
                    ratio = self.fan_in.get(id(m), fan_in(m)) / fan_in(m)
                    if ratio != 1.0:
                        m.weight.grad.mul_(ratio)
        if not self.active:
            return
        if self._pulled is None or self._pulled[0] is not self.graph.groups:
            self._pulled = (self.graph.groups,  # what each group's penalty pulls, once a cut
                            [m for g in self.graph.groups for m in self._penalized(g)])
        for m in self._pulled[1]:
            w = m.weight
            if w is not None and w.grad is not None:
                w.grad.add_(torch.sign(w), alpha=self.config.sparsity)

    def _score(self, group: Any) -> torch.Tensor | None:
        """One group's importance now, float64, per unit (None: nothing measured, as for a
        taylor score of a batch where a member had no gradient)."""
        try:
            s = self.scorer(group)
        except (AttributeError, TypeError):  # a member without a gradient this batch
            return None
        return None if s is None else s.detach().double()

    def prune(self, model: nn.Module, optimizer: torch.optim.Optimizer | None,
              epoch: int) -> bool:
        """Collective (waits for all ranks): remove this epoch's share of units. Returns
        whether the parameter layout changed."""
        graph = self.graph
        if graph is None:
            return False
        fraction = self.events.get(epoch, 0.0)
        if self.config.criterion == "taylor":
            local = [t.cpu() for t in self.taylor]
        else:
            local = []
            for g in graph.groups:
                s = self._score(g)
                local.append(torch.zeros(graph.width(g), dtype=torch.float64)
                             if s is None else s.cpu())
        scores = agreed(local, self.comm)  # waits for all ranks
        plan, kept = [], []
        for g, s, root in zip(graph.groups, scores, self._roots(), strict=True):
            width = graph.width(g)
            cut = cut_count(width, self.original.get(root, width), fraction, graph.step(g))
            keep = choose(s, width - cut)
            kept.append(keep.tolist())
            if cut:
                plan.append((g, sorted(set(range(width)) - set(keep.tolist()))))
        self.kept.append(kept)
        if plan:
            remove(graph, plan, optimizer)
        self.taylor = [torch.zeros(w, dtype=torch.float64) for w in self.widths()]
        return bool(plan)
