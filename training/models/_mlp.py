"""Genome/config -> torch.nn.Module. For now: an MLP over flattened inputs."""

from __future__ import annotations

from torch import nn

_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
}


def build_mlp(
    input_dim: int, n_classes: int, *, hidden: int, layers: int, activation: str, dropout: float
) -> nn.Module:
    """``layers`` hidden layers of width ``hidden``, then a linear classifier head.

    >>> build_mlp(64, 10, hidden=32, layers=2, activation="relu", dropout=0.0)[0]
    Flatten(start_dim=1, end_dim=-1)
    """
    modules: list[nn.Module] = [nn.Flatten()]
    width = input_dim
    for _ in range(layers):
        modules += [nn.Linear(width, hidden), _ACTIVATIONS[activation]()]
        if dropout > 0:
            modules.append(nn.Dropout(dropout))
        width = hidden
    modules.append(nn.Linear(width, n_classes))
    return nn.Sequential(*modules)
