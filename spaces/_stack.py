"""Stacks: an MLP, or a CNN whose convolution layers come before its dense layers; variable depth
with per-layer width, activation and dropout (and kernel and pooling for convolutions)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spaces._genome import (
    Decisions,
    Genome,
    GenomeFamily,
    RngDecisions,
    check_choices,
    check_int,
    check_int_choices,
    check_keys,
    check_min_max,
    count,
    pick,
    put,
)

ACTIVATIONS = ("relu", "tanh", "gelu", "silu")
LAYER_KINDS = ("conv", "dense")
CONV_LAYERS = (0, 8)
DENSE_LAYERS = (0, 16)
WIDTHS = (1, 4096)
KERNELS = (1, 15)


@dataclass(frozen=True, kw_only=True)
class Layer:
    """One layer: ``conv`` (``width`` channels, odd ``kernel``, 'same' padding, optional 2x max
    ``pool``) or ``dense`` (``width`` units); then ``activation`` and ``dropout``."""

    kind: str
    width: int
    activation: str = "relu"
    dropout: float = 0.0
    kernel: int | None = None
    pool: bool = False

    def __post_init__(self) -> None:
        if self.kind not in LAYER_KINDS:
            raise ValueError(f"kind: unknown layer kind {self.kind!r} (known: {list(LAYER_KINDS)})")
        check_int("width", self.width, *WIDTHS)
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation: unknown activation {self.activation!r} (known: {list(ACTIVATIONS)})"
            )
        check_dropout("dropout", self.dropout)
        object.__setattr__(self, "dropout", float(self.dropout))
        if self.kind == "conv":
            check_int("kernel", self.kernel, *KERNELS)
            if self.kernel % 2 == 0:  # type: ignore[operator]
                raise ValueError(f"kernel: {self.kernel} must be odd")
            if not isinstance(self.pool, bool):
                raise ValueError(f"pool: expected true or false, got {self.pool!r}")
        elif self.kernel is not None or self.pool:
            raise ValueError(
                f"kernel: a dense layer takes no kernel or pool, got {self.kernel!r}, {self.pool!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "width": self.width,
            "activation": self.activation,
            "dropout": self.dropout,
        }
        if self.kind == "conv":
            out.update(kernel=self.kernel, pool=self.pool)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Layer:
        if not isinstance(data, Mapping):
            raise ValueError(f"layers: expected a table per layer, got {data!r}")
        check_keys(data, ("kind", "width", "activation", "dropout", "kernel", "pool"), "a layer")
        return cls(**data)

    def label(self) -> str:
        text = f"{self.kind}{self.width}"
        if self.kind == "conv":
            text += f"k{self.kernel}"
        text += f" {self.activation}"
        if self.kind == "conv" and self.pool:
            text += " pool"
        if self.dropout:
            text += f" drop{self.dropout:g}"
        return text


def check_dropout(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise ValueError(f"{name}: {value!r} must be a number in [0, 1)")


@dataclass(frozen=True, eq=False, kw_only=True)
class StackGenome(Genome):
    """Layers in order; convolutions first, then dense layers, then the classifier.

    >>> StackGenome(layers=(Layer(kind="dense", width=128, dropout=0.1),)).summary()
    'stack: dense128 relu drop0.1 | out'
    """

    family = "stack"
    layers: tuple[Layer, ...]

    def __post_init__(self) -> None:
        if isinstance(self.layers, str) or not isinstance(self.layers, Sequence):
            raise ValueError(f"layers: expected a list of layers, got {self.layers!r}")
        layers = tuple(self.layers)
        object.__setattr__(self, "layers", layers)
        check_int("layers", len(layers), 0, CONV_LAYERS[1] + DENSE_LAYERS[1])
        seen_dense = False
        for i, layer in enumerate(layers):
            if not isinstance(layer, Layer):
                raise ValueError(f"layers: expected Layer, got {layer!r}")
            if layer.kind == "conv" and seen_dense:
                raise ValueError(f"layers: conv layer {i} comes after a dense layer")
            seen_dense |= layer.kind == "dense"

    def part(self, kind: str) -> tuple[Layer, ...]:
        return tuple(layer for layer in self.layers if layer.kind == kind)

    def to_dict(self) -> dict[str, Any]:
        return {"family": "stack", "layers": [layer.to_dict() for layer in self.layers]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StackGenome:
        check_keys(data, ("family", "layers"), "a stack genome")
        layers = data.get("layers")
        if isinstance(layers, str) or not isinstance(layers, Sequence):
            raise ValueError(f"layers: expected a list of layers, got {layers!r}")
        return cls(layers=tuple(Layer.from_dict(layer) for layer in layers))

    def canonical(self) -> StackGenome:
        """A stack has no alternative numbering: it is its own canonical form."""
        return self

    def summary(self) -> str:
        return "stack: " + " | ".join([layer.label() for layer in self.layers] + ["out"])


@dataclass(frozen=True, eq=False, kw_only=True)
class StackFamily(GenomeFamily):
    """Stacks of ``min_conv_layers..max_conv_layers`` convolutions (``channels``, ``kernels``,
    ``pools``) then ``min_dense_layers..max_dense_layers`` dense layers (``widths``); each layer
    with one of ``activations`` and ``dropouts``. The defaults are MLPs of 1 to 3 layers.

    Parameters (``p`` = prefix): ``p.conv_layers``,
    ``p.convI.width|kernel|pool|activation|dropout``, ``p.dense_layers``,
    ``p.denseI.width|activation|dropout``; single-option choices are not asked.

    >>> import optuna
    >>> family = StackFamily(max_conv_layers=2, dropouts=(0.0, 0.2))
    >>> trial = optuna.create_study().ask()
    >>> genome = family.suggest(trial)
    >>> family.from_params(trial.params).to_dict() == genome.to_dict()
    True
    """

    name = "stack"
    OPTIONS = (
        "min_conv_layers",
        "max_conv_layers",
        "min_dense_layers",
        "max_dense_layers",
        "channels",
        "kernels",
        "pools",
        "widths",
        "activations",
        "dropouts",
    )
    min_conv_layers: int = 0
    max_conv_layers: int = 0
    min_dense_layers: int = 1
    max_dense_layers: int = 3
    channels: tuple[int, ...] = (16, 32, 64)
    kernels: tuple[int, ...] = (3, 5)
    pools: tuple[bool, ...] = (False, True)
    widths: tuple[int, ...] = (32, 64, 128, 256)
    activations: tuple[str, ...] = ("relu",)
    dropouts: tuple[float, ...] = (0.0,)

    def __post_init__(self) -> None:
        check_min_max("conv_layers", self.min_conv_layers, self.max_conv_layers, CONV_LAYERS)
        check_min_max("dense_layers", self.min_dense_layers, self.max_dense_layers, DENSE_LAYERS)
        object.__setattr__(self, "channels", check_int_choices("channels", self.channels, *WIDTHS))
        object.__setattr__(
            self, "kernels", check_int_choices("kernels", self.kernels, *KERNELS, odd=True)
        )
        object.__setattr__(
            self, "pools", check_choices("pools", self.pools, (False, True), what="value")
        )
        object.__setattr__(self, "widths", check_int_choices("widths", self.widths, *WIDTHS))
        acts = check_choices("activations", self.activations, ACTIVATIONS, what="activation")
        object.__setattr__(self, "activations", acts)
        dropouts = check_choices("dropouts", self.dropouts)
        for d in dropouts:
            check_dropout("dropouts", d)
        object.__setattr__(self, "dropouts", tuple(float(d) for d in dropouts))

    def layer_choices(self, kind: str) -> dict[str, tuple[Any, ...]]:
        """Each searched attribute of a ``kind`` layer and its choices, in decision order."""
        if kind == "conv":
            return {
                "width": self.channels,
                "kernel": self.kernels,
                "pool": self.pools,
                "activation": self.activations,
                "dropout": self.dropouts,
            }
        return {"width": self.widths, "activation": self.activations, "dropout": self.dropouts}

    def bounds(self, kind: str) -> tuple[int, int]:
        if kind == "conv":
            return self.min_conv_layers, self.max_conv_layers
        return self.min_dense_layers, self.max_dense_layers

    def layer(self, decisions: Decisions, prefix: str, kind: str, i: int) -> Layer:
        q = f"{prefix}.{kind}{i}"
        values = {a: pick(decisions, f"{q}.{a}", c) for a, c in self.layer_choices(kind).items()}
        return Layer(kind=kind, **values)

    def random_layer(self, rng: np.random.Generator, kind: str) -> Layer:
        return self.layer(RngDecisions(rng), "", kind, 0)

    def _decide(self, decisions: Decisions, prefix: str) -> StackGenome:
        layers: list[Layer] = []
        for kind in LAYER_KINDS:
            n = count(decisions, f"{prefix}.{kind}_layers", *self.bounds(kind))
            layers += [self.layer(decisions, prefix, kind, i) for i in range(n)]
        return StackGenome(layers=tuple(layers))

    def to_params(self, genome: Genome, prefix: str = "genome") -> dict[str, Any]:
        self.check(genome)
        assert isinstance(genome, StackGenome)
        params: dict[str, Any] = {}
        for kind in LAYER_KINDS:
            low, high = self.bounds(kind)
            part = genome.part(kind)
            put(params, f"{prefix}.{kind}_layers", len(part), high - low + 1)
            for i, layer in enumerate(part):
                for a, c in self.layer_choices(kind).items():
                    put(params, f"{prefix}.{kind}{i}.{a}", getattr(layer, a), len(c))
        return params

    def check(self, genome: Genome) -> None:
        self._check_family(genome)
        assert isinstance(genome, StackGenome)
        for kind in LAYER_KINDS:
            low, high = self.bounds(kind)
            part = genome.part(kind)
            if not low <= len(part) <= high:
                raise ValueError(
                    f"genome: {len(part)} {kind} layers is out of range [{low}, {high}]"
                )
            for i, layer in enumerate(part):
                for a, c in self.layer_choices(kind).items():
                    if getattr(layer, a) not in c:
                        raise ValueError(
                            f"genome: {kind} layer {i} {a} {getattr(layer, a)!r} "
                            f"is not one of {list(c)}"
                        )
