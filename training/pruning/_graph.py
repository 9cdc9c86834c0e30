"""A model's prunable groups, found by Torch-Pruning's dependency graph, and their removal with
the optimizer's state.

Torch-Pruning (``torch-pruning``, DepGraph, CVPR'23) traces one forward pass of the model on
example inputs and couples what must lose the same units: a layer's output channels, the batch
or layer norm after it, every layer reading them (a ``Linear`` after a ``Flatten`` loses each
channel's columns), the other branches of a residual sum or a concatenation, grouped and
depthwise convolutions, ``nn.MultiheadAttention``'s projections and embeddings. A *group* is one
such coupled set, rooted at a linear or convolution layer's outputs: its units are removed
together or not at all.

What Torch-Pruning does not do is kept here: the optimizer's state is sliced with the weights
(its issue #140) by :func:`remove`, which lets the library prune *index codes* instead of the
weights (every parameter and buffer holds, during the removal, the float64 position of each of
its elements) and then takes each survivor's values and optimizer state by those positions, so
whatever a pruning function of the library selects, the weights, Adam's moments, SGD's momentum
and the running statistics follow it exactly.

Left alone: the classifier's outputs (the last linear or convolution layer of the forward pass),
the layers named in ``[training] prune.keep``, the layer reading the input when ``input_layer``
is false, and any group that the check below finds unsafe: with every group cut at the target,
the model must still run and give outputs of the dense model's shape; a group that breaks that
(a reshape into heads the graph does not see, a custom op) is tried alone, and left alone when
it breaks it (:attr:`Graph.unsafe`, reported). A model whose graph cannot be traced, or that has
no group left, is refused with one line naming ``training.prune``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

_PRODUCERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
_NORMS = (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm)


class PruneError(ValueError):
    """A model or configuration that cannot be pruned; the message names ``training.prune``."""


def _tp() -> Any:
    try:
        import torch_pruning
    except ImportError:  # pragma: no cover - a dependency of detol
        raise PruneError("training.prune: pruning needs the torch-pruning package "
                         "(pip install torch-pruning)") from None
    return torch_pruning


def _first_tensor(out: Any) -> torch.Tensor:
    """The model's prediction in whatever it returns (a tensor, a tuple, a dict, a
    ``ModelOutput``): what the graph is traced from."""
    from training.data._batches import prediction

    return prediction(out)


def call(model: nn.Module, inputs: Any) -> Any:
    """The model on ``inputs`` as a plain loop calls it: a dict as keywords, a tuple or list as
    arguments, anything else as the one argument."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, tuple | list):
        return model(*inputs)
    return model(inputs)


class Graph:
    """The prunable groups of ``model`` (traced on ``example``, the model's inputs for one small
    batch; ``forward(model, example)`` runs it), filtered by ``units`` ("all", "neurons",
    "channels"), ``keep`` (module names, each covering what is under it) and ``input_layer``.
    ``target`` is the fraction the safety check cuts each group by."""

    def __init__(self, model: nn.Module, example: Any,
                 forward: Callable[[nn.Module, Any], Any] | None = None, *,
                 units: str = "all", keep: Iterable[str] = (), input_layer: bool = True,
                 target: float = 0.5, check: bool = True) -> None:
        self.model = model
        self.example = example
        self.forward = forward or call
        self.units = units
        self.keep = tuple(keep)
        self.input_layer = input_layer
        names = {name for name, _ in model.named_modules()}
        missing = [k for k in self.keep if k not in names]
        if missing:
            raise PruneError(f"training.prune.keep: no module named {missing[0]!r} in this "
                             f"{type(model).__name__} (names as model.named_modules() gives "
                             "them)")
        self.unsafe: list[str] = []  # root module names of groups left alone, found unsafe
        self.steps: dict[str, int] = {}  # root module name -> units are cut in multiples of it
        self.build()
        if check:
            self.unsafe = self._check(target)
            if self.unsafe:
                self.build()
        if not self.groups:
            why = (f"every group breaks the model when cut ({', '.join(self.unsafe)})"
                   if self.unsafe else "no linear or convolution layer whose outputs may be "
                   "removed (the classifier's and the kept layers' are never)")
            raise PruneError(f"training.prune: cannot prune this {type(model).__name__}: {why}")

    # -- tracing ----------------------------------------------------------------------------
    def build(self) -> None:
        """(Re)trace the model: its groups now (after a removal, their widths changed)."""
        tp = _tp()
        order: list[nn.Module] = []
        hooks = [m.register_forward_hook(lambda m, i, o: order.append(m) if m not in order
                                         else None)
                 for m in self.model.modules() if isinstance(m, _PRODUCERS)]
        training = self.model.training
        try:
            with torch.enable_grad():  # the library traces autograd's graph
                graph = tp.DependencyGraph().build_dependency(
                    self.model, example_inputs=self.example, forward_fn=self.forward,
                    output_transform=_first_tensor, verbose=False)
        except PruneError:
            raise
        except Exception as exc:  # noqa: BLE001 - any tracing failure is one line
            raise PruneError(f"training.prune: cannot trace this {type(self.model).__name__}'s "
                             f"graph: {type(exc).__name__}: {exc}") from None
        finally:
            for h in hooks:
                h.remove()
            self.model.train(training)  # the trace leaves the model in eval mode
        self.dg = graph
        self.name = {m: n for n, m in self.model.named_modules()}
        ignored = [m for m in self.model.modules()
                   if any(self.name.get(m, "") == k or self.name.get(m, "").startswith(k + ".")
                          for k in self.keep)]
        if order:
            ignored.append(order[-1])  # the classifier's outputs
            if not self.input_layer:
                ignored.append(order[0])
        self.classifier = self.name.get(order[-1]) if order else None
        self.first = order[0] if order else None
        # A group is known by the first layer of the forward pass whose outputs it removes
        # (the library's own root follows its trace, which changes after a cut), and listed in
        # that order: the same names and order after every cut, on every rank.
        rank = {m: k for k, m in enumerate(order)}
        modules = {m: k for k, m in enumerate(self.model.modules())}
        self._first: dict[int, nn.Module] = {}
        found = []
        for g in graph.get_all_groups(ignored_layers=ignored, root_module_types=_PRODUCERS):
            producers = self.layers(g, _PRODUCERS) or [g[0].dep.target.module]
            first = min(producers, key=lambda m: (rank.get(m, len(rank)), modules.get(m, 0)))
            self._first[id(g)] = first
            kind = "neurons" if isinstance(first, nn.Linear) else "channels"
            if self.units not in ("all", kind) or self.name.get(first) in self.unsafe:
                continue
            found.append(g)
        self.groups = sorted(found, key=lambda g: (rank.get(self.root(g), len(rank)),
                                                   modules.get(self.root(g), 0)))

    # -- facts of a group -------------------------------------------------------------------
    def root(self, group: Any) -> nn.Module:
        """The layer a group is known by: the first of the forward pass whose outputs it
        removes."""
        return self._first.get(id(group), group[0].dep.target.module)

    def width(self, group: Any) -> int:
        return len(group[0].idxs)

    def widths(self) -> list[int]:
        return [self.width(g) for g in self.groups]

    def step(self, group: Any) -> int:
        """Units are removed in multiples of this: what the check found the smallest cut that
        runs (attention split into heads by a view: the head size), else 1 (torch's
        ``nn.MultiheadAttention``: its number of heads)."""
        return self.steps.get(str(self.name.get(self.root(group))), _heads(group))

    def layers(self, group: Any, kinds: tuple[type, ...]) -> list[nn.Module]:
        """The modules of ``kinds`` whose outputs (not inputs) this group removes."""
        found: list[nn.Module] = []
        for dep, _ in group:
            m = dep.target.module
            if (isinstance(m, kinds) and self.dg.is_out_channel_pruning_fn(dep.handler)
                    and m not in found):
                found.append(m)
        return found

    def describe(self) -> list[str]:
        """One line per group: its root, width and what it couples."""
        out = []
        for g in self.groups:
            members = sorted({self.name.get(dep.target.module, "?") for dep, _ in g})
            out.append(f"{self.name.get(self.root(g))}: {self.width(g)} units, "
                       f"{len(members)} layers ({', '.join(members[:6])}"
                       f"{', ...' if len(members) > 6 else ''})")
        return out

    # -- the safety check -------------------------------------------------------------------
    def _runs(self, cuts: dict[str, int], dense: tuple[int, ...]) -> bool:
        """Whether a copy of the model with the groups rooted at ``cuts``' names cut by that
        many units (their last) still runs and gives outputs of the ``dense`` shape."""
        try:
            twin = copy.deepcopy(self.model)
        except Exception:  # noqa: BLE001 - a model that cannot be copied is not checked
            return True
        try:
            other = Graph(twin, self.example, self.forward, units=self.units, keep=self.keep,
                          input_layer=self.input_layer, check=False)
            for g in other.groups:
                n, width = cuts.get(str(other.name.get(other.root(g))), 0), other.width(g)
                if n:
                    g.prune(list(range(width - n, width)))
            with torch.no_grad():
                shape = tuple(_first_tensor(other.forward(twin.eval(), self.example)).shape)
        except Exception:  # noqa: BLE001 - the cut broke the model: what this finds out
            return False
        return shape == dense

    def _check(self, target: float) -> list[str]:
        """Each group's step (the smallest cut that runs, among the divisors of its width) and
        then the target cut of all; the names of the groups that break the model."""
        training = self.model.training
        try:  # in eval mode: a forward in training mode would move batch norms' statistics
            with torch.no_grad():
                dense = tuple(_first_tensor(self.forward(self.model.eval(), self.example)).shape)
        finally:
            self.model.train(training)
        names = [str(self.name.get(self.root(g))) for g in self.groups]
        widths = dict(zip(names, self.widths(), strict=True))
        first = {n: _heads(g) for n, g in zip(names, self.groups, strict=True)}
        unsafe: list[str] = []
        if self._runs(first, dense):
            self.steps = first
        else:
            for n in names:
                w, base = widths[n], first[n]
                tries = [d for d in range(base, w // 2 + 1, base) if w % d == 0]
                found = next((d for d in tries if self._runs({n: d}, dense)), None)
                if found is None:
                    unsafe.append(n)
                else:
                    self.steps[n] = found
        frac = max(target, 0.25)
        cuts = {n: cut_count(widths[n], widths[n], frac, self.steps[n])
                for n in names if n not in unsafe}
        if not self._runs(cuts, dense):
            unsafe += [n for n in cuts if not self._runs({n: cuts[n]}, dense)]
        return unsafe


def _heads(group: Any) -> int:
    """The number of heads of the ``nn.MultiheadAttention`` in a group (1 without one)."""
    heads = [dep.target.module.num_heads for dep, _ in group
             if isinstance(dep.target.module, nn.MultiheadAttention)]
    return max(heads, default=1)


def cut_count(width: int, original: int, fraction: float, step: int = 1) -> int:
    """Units to remove from a group of ``width`` (of ``original`` before any step) so that
    ``fraction`` of the original ones are gone, in multiples of ``step``, keeping >= ``step``."""
    keep = max(step, round(original * (1.0 - fraction)))
    cut = max(0, width - keep)
    cut -= cut % step
    return cut


@torch.no_grad()
def remove(graph: Graph, plan: list[tuple[Any, list[int]]],
           optimizer: torch.optim.Optimizer | None = None) -> None:
    """Remove ``plan``'s units (per group: the indices to remove) from the graph's model, with
    the optimizer's state sliced the same way; the model's parameters that changed are new
    ``nn.Parameter`` objects afterwards (gradients dropped). The graph is traced again."""
    model = graph.model
    params = dict(model.named_parameters())
    buffers = {n: b for n, b in model.named_buffers() if b.is_floating_point() and b.dim()}
    real: dict[str, torch.Tensor] = {}
    for name, t in [*params.items(), *buffers.items()]:
        real[name] = t.data
        t.grad = None
        t.data = torch.arange(t.numel(), dtype=torch.float64, device=t.device).view(t.shape)
    sizes = {m: {k: v for k, v in vars(m).items()  # out_channels, num_features, embed_dim...
                 if not k.startswith("_") and isinstance(v, int | float | tuple)}
             for m in model.modules()}
    try:
        for group, idxs in plan:
            if idxs:
                group.prune(sorted(idxs))
    except Exception as exc:  # noqa: BLE001 - put the weights and sizes back, then say why
        _settle(model, params, buffers, real, optimizer, failed=True)
        for m, attrs in sizes.items():
            for k, v in attrs.items():
                setattr(m, k, v)
        raise PruneError(f"training.prune: removing units failed: {type(exc).__name__}: "
                         f"{exc}") from None
    _settle(model, params, buffers, real, optimizer)
    graph.build()


def _owner(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    path, _, leaf = name.rpartition(".")
    return (model.get_submodule(path) if path else model), leaf


def _settle(model: nn.Module, params: dict[str, nn.Parameter],
            buffers: dict[str, torch.Tensor], real: dict[str, torch.Tensor],
            optimizer: torch.optim.Optimizer | None, *, failed: bool = False) -> None:
    """After the library removed units from the index codes: every tensor's real values (and
    optimizer state) at the positions its codes kept."""
    now_params = dict(model.named_parameters())
    now_buffers = dict(model.named_buffers())
    for name, old in params.items():
        new = now_params.get(name, old)
        values = real[name]
        if new is old or failed:
            old.data = values
            if new is not old:
                module, leaf = _owner(model, name)
                setattr(module, leaf, old)
            continue
        pos = new.data.reshape(-1).long()
        kept = nn.Parameter(values.reshape(-1).index_select(0, pos).view(new.shape).clone(),
                            requires_grad=old.requires_grad)
        module, leaf = _owner(model, name)
        setattr(module, leaf, kept)
        if optimizer is None:
            continue
        for g in optimizer.param_groups:
            g["params"] = [kept if q is old else q for q in g["params"]]
        state = optimizer.state.pop(old, None)
        if state is not None:
            optimizer.state[kept] = {
                k: (v.reshape(-1).index_select(0, pos.to(v.device)).view(new.shape).clone()
                    if torch.is_tensor(v) and v.shape == values.shape else v)
                for k, v in state.items()}
    for name, old in buffers.items():
        new = now_buffers.get(name, old)
        module, leaf = _owner(model, name)
        if new is old or failed:
            old.data = real[name]
            if new is not old:
                module._buffers[leaf] = old
            continue
        pos = new.reshape(-1).long()
        module._buffers[leaf] = real[name].reshape(-1).index_select(0, pos).view(new.shape)
