"""The plug-ins of benchmarks/pruning_models.py (found on the ranks through PYTHONPATH, as a
user's are): torchvision's ResNet-18, the transformer encoder of examples/transformer, and
Fashion-MNIST with a training subset (``DETOL_BENCH_FASHION_TRAIN`` images, 1,000 for
validation; the same on every rank and seed)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "examples" / "fashion_png"), str(ROOT / "examples" / "transformer")]
import encoder  # noqa: E402  # examples/transformer/encoder.py
import torchvision_cpu  # noqa: E402, F401  # this machine's wheels only: see its docstring


def resnet18(params: dict[str, Any], data: Any) -> nn.Module:
    """torchvision's ResNet-18 (``weights=None``) with a 3x3 stride-1 stem and no max-pool for
    1x28x28 images, as examples/fashion_png/resnet.py builds it."""
    from torchvision import models

    model = models.resnet18(weights=None, num_classes=data.n_classes)
    model.conv1 = nn.Conv2d(data.input_shape[0], 64, 3, 1, 1, bias=False)
    model.maxpool = nn.Identity()
    return model


def transformer(params: dict[str, Any], data: Any) -> nn.Module:
    return encoder.build(params, data)


def fashion(val_fraction: float) -> Any:
    from training import Dataset, load_dataset

    n = int(os.environ.get("DETOL_BENCH_FASHION_TRAIN", "2000"))
    ds = load_dataset("fashion-mnist", val_fraction)
    keep = np.random.default_rng(0).permutation(len(ds.x_train))[:n]
    return Dataset(ds.x_train[keep].reshape(-1, 1, 28, 28), ds.y_train[keep],
                   ds.x_val[:1000].reshape(-1, 1, 28, 28), ds.y_val[:1000],
                   ds.x_test[:1000].reshape(-1, 1, 28, 28), ds.y_test[:1000], ds.n_classes)
