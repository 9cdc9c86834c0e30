"""The dataset plug-in: ``load(val_fraction) -> training.TorchDatasets``."""

import numpy as np
import torch
from sklearn.datasets import load_diabetes
from torch.utils.data import TensorDataset

from training import TorchDatasets


def load(val_fraction: float) -> TorchDatasets:
    x, y = load_diabetes(return_X_y=True)  # ships with scikit-learn: nothing is downloaded
    order = np.random.default_rng(0).permutation(len(x))
    n_test = len(x) // 5
    n_val = round((len(x) - n_test) * val_fraction)
    test, val, train = np.split(order, [n_test, n_test + n_val])
    mean, std = x[train].mean(0), x[train].std(0)
    y_mean, y_std = y[train].mean(), y[train].std()

    def part(rows: np.ndarray) -> TensorDataset:
        xs = torch.tensor((x[rows] - mean) / std, dtype=torch.float32)
        ys = torch.tensor((y[rows] - y_mean) / y_std, dtype=torch.float32)
        return TensorDataset(xs, ys)

    return TorchDatasets(part(train), part(val), part(test), n_targets=1)
