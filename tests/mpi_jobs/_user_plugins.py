"""Plug-ins as a user would write them, for the tests (imported by name on the ranks).

``build`` makes the same network as detol's built-in MLP (same layers in the same order, so the
same seed gives the same initial weights); ``digits`` serves scikit-learn's digits through
``TorchDatasets`` (a per-sample map-style dataset: the lazy path, not the in-memory one);
``Counting`` records every training row that is read.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from training import DataInfo, TorchDatasets, load_dataset


def build(params: dict[str, Any], data: DataInfo) -> nn.Module:
    width = params["hidden"]
    layers: list[nn.Module] = [nn.Flatten()]
    size = 1
    for s in data.input_shape:
        size *= s
    for _ in range(params["layers"]):
        layers += [nn.Linear(size, width), nn.ReLU()]
        size = width
    layers.append(nn.Linear(size, data.n_outputs))
    return nn.Sequential(*layers)


def build_scaled(params: dict[str, Any], data: DataInfo) -> nn.Module:
    """A free parameter ``scale`` (not a training field) sizes the hidden layer."""
    return build({"hidden": int(params["scale"]) * 8, "layers": 1}, data)


class Rows(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Arrays served one sample at a time (what a dataset on disk looks like to the loader)."""

    def __init__(self, x: Any, y: Any) -> None:
        self.x, self.y = torch.as_tensor(x), torch.as_tensor(y)
        self.read: list[int] = []

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.read.append(int(i))
        return self.x[i], self.y[i]


def digits(val_fraction: float) -> TorchDatasets:
    ds = load_dataset("digits", val_fraction)
    return TorchDatasets(Rows(ds.x_train, ds.y_train), Rows(ds.x_val, ds.y_val),
                         Rows(ds.x_test, ds.y_test), n_classes=10)


def mean_loss(params: dict[str, Any]) -> Any:
    return nn.CrossEntropyLoss()


def top2(output: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    best = output.topk(2, dim=1).indices
    return {"top2": float((best == target[:, None]).any(dim=1).float().mean())}


# Bad plug-ins, one mistake each (tests/search/test_plugins.py).
def returns_dict(params: dict[str, Any], data: DataInfo) -> Any:
    return {"layers": 2}


def wrong_width(params: dict[str, Any], data: DataInfo) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(10, data.n_outputs))  # digits have 64 inputs


def not_a_loss(params: dict[str, Any]) -> Any:
    return 3


if os.environ.get("DETOL_TEST_BROKEN_IMPORT"):
    raise ImportError("this module refuses to import here")
