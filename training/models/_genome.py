"""Genome + input shape + class count -> ``torch.nn.Module``; parameter count and FLOPs.

Inputs: a sample of shape ``(D,)`` is a 1-channel signal ``(1, D)`` (mnist1d, tabular vectors),
``(C, L)`` a C-channel signal, ``(C, H, W)`` an image; convolutions and pools are 1-D or 2-D to
match. The model reshapes its input batch, so flat arrays of the right size work too.

- ``cell``: stem conv, then ``stages`` stages of ``cells_per_stage`` cells, a residual block
  halving the size and doubling the channels between stages (NAS-Bench-201's skeleton, shorter).
- ``macro``: the DAG itself on the input; a node sums its inputs after aligning them (adaptive
  average pooling to the smallest size, 1x1 projection to the most channels).
- ``stack``: convolutions (with optional 2x max pooling), flatten, dense layers.

Cells and macro DAGs end in adaptive average pooling to at most ``head_size`` per dimension and a
linear classifier. Models are built from ``genome.canonical()``: inactive parts get no weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from spaces import CellGenome, Genome, MacroGenome, StackGenome, cell_edges

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
}


@dataclass(frozen=True)
class _Kit:
    """The 1-D or 2-D flavour of each layer type."""

    dims: int

    def conv(
        self, c_in: int, c_out: int, k: int, *, stride: int = 1, bias: bool = False
    ) -> nn.Module:
        cls = nn.Conv1d if self.dims == 1 else nn.Conv2d
        return cls(c_in, c_out, k, stride=stride, padding=k // 2, bias=bias)

    def norm(self, channels: int, size: Sequence[int]) -> nn.Module:
        # Batch norm cannot train on one value per channel (a 1-sample slice of a 1x1 map).
        if math.prod(size) == 1:
            return nn.Identity()
        return (nn.BatchNorm1d if self.dims == 1 else nn.BatchNorm2d)(channels)

    def pool(self, kind: str, k: int, stride: int) -> nn.Module:
        pad = (k - 1) // 2
        if kind == "max":
            return (nn.MaxPool1d if self.dims == 1 else nn.MaxPool2d)(k, stride, pad)
        cls = nn.AvgPool1d if self.dims == 1 else nn.AvgPool2d
        return cls(k, stride, pad, count_include_pad=False)

    def adapt(self, size: Sequence[int]) -> nn.Module:
        cls = nn.AdaptiveAvgPool1d if self.dims == 1 else nn.AdaptiveAvgPool2d
        return cls(tuple(size) if self.dims == 2 else size[0])


def input_layout(shape: Sequence[int]) -> tuple[int, tuple[int, ...]]:
    """``(channels, spatial size)`` of one sample of ``shape``."""
    shape = tuple(int(s) for s in shape)
    if len(shape) == 1:
        return 1, shape
    if len(shape) in (2, 3):
        return shape[0], shape[1:]
    raise ValueError(f"input_shape: expected (D,), (C, L) or (C, H, W), got {shape}")


def _pooled(size: Sequence[int], k: int, stride: int) -> tuple[int, ...]:
    pad = (k - 1) // 2
    return tuple((s + 2 * pad - k) // stride + 1 for s in size)


class _Head(nn.Sequential):
    def __init__(
        self, kit: _Kit, channels: int, size: Sequence[int], n_classes: int, head_size: int
    ) -> None:
        out = tuple(min(head_size, s) for s in size)
        super().__init__(
            kit.adapt(out), nn.Flatten(), nn.Linear(channels * math.prod(out), n_classes)
        )


# --- cell ----------------------------------------------------------------------------------------


def _cell_op(kit: _Kit, op: str, c: int, size: Sequence[int]) -> nn.Module:
    if op == "skip_connect":
        return nn.Identity()
    if op.startswith("nor_conv_"):
        k = int(op[-1])
        return nn.Sequential(nn.ReLU(), kit.conv(c, c, k), kit.norm(c, size))
    if op in ("avg_pool_3x3", "max_pool_3x3"):
        return kit.pool(op[:3], 3, 1)
    raise ValueError(f"genome: the model builder has no cell op {op!r}")


class _Cell(nn.Module):
    def __init__(self, kit: _Kit, genome: CellGenome, c: int, size: Sequence[int]) -> None:
        super().__init__()
        self.n = genome.nodes
        self.edges = [
            (i, j)
            for (i, j), op in zip(cell_edges(self.n), genome.edges, strict=True)
            if op != "none"
        ]
        self.ops = nn.ModuleList(_cell_op(kit, op, c, size) for op in genome.edges if op != "none")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nodes: list[torch.Tensor | None] = [x] + [None] * (self.n - 1)
        for (i, j), op in zip(self.edges, self.ops, strict=True):
            y = op(nodes[i])
            nodes[j] = y if nodes[j] is None else nodes[j] + y
        out = nodes[-1]
        assert out is not None  # a canonical cell always connects input and output
        return out


class _Reduction(nn.Module):
    """NAS-Bench-201's residual block between stages: stride 2, channels doubled."""

    def __init__(self, kit: _Kit, c_in: int, c_out: int, size: Sequence[int]) -> None:
        super().__init__()
        out = tuple((s + 1) // 2 for s in size)
        self.a = nn.Sequential(nn.ReLU(), kit.conv(c_in, c_out, 3, stride=2), kit.norm(c_out, out))
        self.b = nn.Sequential(nn.ReLU(), kit.conv(c_out, c_out, 3), kit.norm(c_out, out))
        self.skip = nn.Sequential(kit.conv(c_in, c_out, 1, stride=2), kit.norm(c_out, out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x)) + self.skip(x)


def _build_cell(
    kit: _Kit,
    genome: CellGenome,
    c_in: int,
    size: tuple[int, ...],
    n_classes: int,
    opts: dict[str, Any],
) -> nn.Module:
    c = opts["channels"]
    layers: list[nn.Module] = [kit.conv(c_in, c, 3), kit.norm(c, size)]
    for stage in range(opts["stages"]):
        if stage:
            layers.append(_Reduction(kit, c, 2 * c, size))
            c, size = 2 * c, tuple((s + 1) // 2 for s in size)
        layers += [_Cell(kit, genome, c, size) for _ in range(opts["cells_per_stage"])]
    layers += [kit.norm(c, size), nn.ReLU(), _Head(kit, c, size, n_classes, opts["head_size"])]
    return nn.Sequential(*layers)


# --- macro ---------------------------------------------------------------------------------------


class _Join(nn.Module):
    """Sum of inputs after aligning them: adaptive pooling to ``size``, 1x1 conv to ``channels``."""

    def __init__(
        self,
        kit: _Kit,
        shapes: list[tuple[int, tuple[int, ...]]],
        channels: int,
        size: tuple[int, ...],
    ) -> None:
        super().__init__()
        self.align = nn.ModuleList()
        for c, s in shapes:
            steps: list[nn.Module] = []
            if s != size:
                steps.append(kit.adapt(size))
            if c != channels:
                steps.append(kit.conv(c, channels, 1))
            self.align.append(nn.Sequential(*steps))

    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        out = self.align[0](xs[0])
        for f, x in zip(self.align[1:], xs[1:], strict=True):
            out = out + f(x)
        return out


class _MacroNet(nn.Module):
    def __init__(
        self,
        kit: _Kit,
        genome: MacroGenome,
        c_in: int,
        size: tuple[int, ...],
        n_classes: int,
        head_size: int,
    ) -> None:
        super().__init__()
        shapes = [(c_in, size)]
        self.inputs = [node.inputs for node in genome.nodes]
        self.joins = nn.ModuleList()
        self.ops = nn.ModuleList()
        for node in genome.nodes:
            ins = [shapes[i] for i in node.inputs]
            c = max(s[0] for s in ins)
            joined = tuple(min(dim) for dim in zip(*(s[1] for s in ins), strict=True))
            self.joins.append(_Join(kit, ins, c, joined))
            if node.op == "conv":
                assert node.width is not None and node.kernel is not None
                op: nn.Module = nn.Sequential(
                    kit.conv(c, node.width, node.kernel), kit.norm(node.width, joined), nn.ReLU()
                )
                shapes.append((node.width, joined))
            elif node.op in ("max_pool", "avg_pool"):
                assert node.kernel is not None
                op = kit.pool(node.op[:3], node.kernel, 2)
                shapes.append((c, _pooled(joined, node.kernel, 2)))
            elif node.op == "identity":
                op = nn.Identity()
                shapes.append((c, joined))
            else:
                raise ValueError(f"genome: the model builder has no macro op {node.op!r}")
            self.ops.append(op)
        self.head = _Head(kit, *shapes[-1], n_classes, head_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values = [x]
        for inputs, join, op in zip(self.inputs, self.joins, self.ops, strict=True):
            values.append(op(join([values[i] for i in inputs])))
        return self.head(values[-1])


def _build_macro(
    kit: _Kit,
    genome: MacroGenome,
    c_in: int,
    size: tuple[int, ...],
    n_classes: int,
    opts: dict[str, Any],
) -> nn.Module:
    return _MacroNet(kit, genome, c_in, size, n_classes, opts["head_size"])


# --- stack ---------------------------------------------------------------------------------------


def _build_stack(
    kit: _Kit,
    genome: StackGenome,
    c_in: int,
    size: tuple[int, ...],
    n_classes: int,
    opts: dict[str, Any],
) -> nn.Module:
    layers: list[nn.Module] = []
    c = c_in
    for layer in genome.part("conv"):
        assert layer.kernel is not None
        layers += [
            kit.conv(c, layer.width, layer.kernel, bias=True),
            ACTIVATIONS[layer.activation](),
        ]
        if layer.pool:
            layers.append((nn.MaxPool1d if kit.dims == 1 else nn.MaxPool2d)(2, 2, ceil_mode=True))
            size = tuple((s + 1) // 2 for s in size)
        if layer.dropout:
            layers.append(nn.Dropout(layer.dropout))
        c = layer.width
    layers.append(nn.Flatten())
    width = c * math.prod(size)
    for layer in genome.part("dense"):
        layers += [nn.Linear(width, layer.width), ACTIVATIONS[layer.activation]()]
        if layer.dropout:
            layers.append(nn.Dropout(layer.dropout))
        width = layer.width
    layers.append(nn.Linear(width, n_classes))
    return nn.Sequential(*layers)


# --- public --------------------------------------------------------------------------------------

_BUILDERS: dict[str, Callable[..., nn.Module]] = {
    "cell": _build_cell,
    "macro": _build_macro,
    "stack": _build_stack,
}


class GenomeNet(nn.Module):
    """A genome's network; reshapes each input batch to ``(N, *input_shape)`` first."""

    def __init__(self, body: nn.Module, input_shape: tuple[int, ...], genome: Genome) -> None:
        super().__init__()
        self.body = body
        self.input_shape = input_shape
        self.genome_key = genome.key

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x.reshape(x.shape[0], *self.input_shape))


def build_genome_model(
    genome: Genome,
    input_shape: Sequence[int],
    n_classes: int,
    *,
    channels: int = 16,
    stages: int = 2,
    cells_per_stage: int = 1,
    head_size: int = 4,
) -> GenomeNet:
    """The network of ``genome`` for samples of ``input_shape`` and ``n_classes`` classes.

    ``channels``, ``stages`` and ``cells_per_stage`` shape a cell genome's skeleton; ``head_size``
    is the pooled size per dimension before the classifier of cells and macro DAGs.

    >>> import torch
    >>> from spaces import CellGenome
    >>> arch = "|nor_conv_3x3~0|+|none~0|none~1|+|skip_connect~0|none~1|avg_pool_3x3~2|"
    >>> cell = CellGenome.from_nb201_string(arch)
    >>> build_genome_model(cell, (1, 8, 8), 10)(torch.zeros(2, 64)).shape
    torch.Size([2, 10])
    """
    if genome.family not in _BUILDERS:
        raise ValueError(
            f"genome: no model builder for family {genome.family!r} (known: {sorted(_BUILDERS)})"
        )
    for name, value in (
        ("channels", channels),
        ("stages", stages),
        ("cells_per_stage", cells_per_stage),
        ("head_size", head_size),
        ("n_classes", n_classes),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
    c_in, size = input_layout(input_shape)
    if len(size) > 2:
        raise ValueError(
            f"input_shape: expected (D,), (C, L) or (C, H, W), got {tuple(input_shape)}"
        )
    opts = {
        "channels": channels,
        "stages": stages,
        "cells_per_stage": cells_per_stage,
        "head_size": head_size,
    }
    canonical = genome.canonical()
    body = _BUILDERS[genome.family](_Kit(len(size)), canonical, c_in, size, n_classes, opts)
    return GenomeNet(body, (c_in, *size), genome)


@dataclass(frozen=True)
class ModelCost:
    """``n_params``: trainable parameters; ``flops``: multiply-adds of the convolution and linear
    layers for one sample (the convention of NAS-Bench-201 and most NAS papers)."""

    n_params: int
    flops: int


def model_cost(model: nn.Module, input_shape: Sequence[int]) -> ModelCost:
    """Parameter count and per-sample multiply-adds, from one forward pass with hooks.

    >>> from torch import nn
    >>> model_cost(nn.Sequential(nn.Flatten(), nn.Linear(64, 10)), (64,))
    ModelCost(n_params=650, flops=640)
    """
    flops = 0

    def hook(module: nn.Module, inputs: Any, output: torch.Tensor) -> None:
        nonlocal flops
        if isinstance(module, nn.Linear):
            per_output = module.in_features
        else:
            assert isinstance(module, nn.Conv1d | nn.Conv2d)
            per_output = module.in_channels // module.groups * math.prod(module.kernel_size)
        flops += output.numel() * per_output  # one sample: the batch dimension is 1

    handles = [
        m.register_forward_hook(hook)
        for m in model.modules()
        if isinstance(m, nn.Linear | nn.Conv1d | nn.Conv2d)
    ]
    first = next(model.parameters(), None)
    x = torch.zeros(1, *input_shape, device=first.device if first is not None else "cpu")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(x)
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return ModelCost(n_params=n_params, flops=flops)
