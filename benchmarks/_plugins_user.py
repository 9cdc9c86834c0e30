"""The digits MLP as a user would bring it (benchmarks/plugins.py): a model plug-in that builds
the same network as detol's built-in MLP, and the digits data as arrays or as a per-sample
torch dataset (TensorDataset)."""

from __future__ import annotations

import math
from typing import Any

from torch import nn
from torch.utils.data import TensorDataset

from training import DataInfo, Dataset, TorchDatasets, load_dataset


def build(params: dict[str, Any], data: DataInfo) -> nn.Module:
    layers: list[nn.Module] = [nn.Flatten()]
    width = math.prod(data.input_shape)
    for _ in range(params["layers"]):
        layers += [nn.Linear(width, params["hidden"]), nn.ReLU()]
        width = params["hidden"]
    layers.append(nn.Linear(width, data.n_outputs))
    return nn.Sequential(*layers)


def digits_arrays(val_fraction: float) -> Dataset:
    return load_dataset("digits", val_fraction)


def digits_torch(val_fraction: float) -> TorchDatasets:
    import torch

    ds = load_dataset("digits", val_fraction)
    parts = [TensorDataset(torch.from_numpy(x), torch.from_numpy(y)) for x, y in (
        (ds.x_train, ds.y_train), (ds.x_val, ds.y_val), (ds.x_test, ds.y_test))]
    return TorchDatasets(*parts, n_classes=10)
