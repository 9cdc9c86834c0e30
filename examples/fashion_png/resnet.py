"""torchvision's ResNet-18 (untrained) on Fashion-MNIST read from PNG files on disk.

Plain PyTorch and torchvision; the lines marked ``# detol`` are the only ones that exist for
detol. Write the PNG tree first: ``python examples/fashion_png/write_pngs.py``.
"""

import os

import torch
import torchvision_cpu  # noqa: F401  # this machine's wheels only: see its docstring
from PIL import Image
from torch import nn
from torch.utils.data import Subset
from torchvision import datasets, models, transforms

from training import TorchDatasets  # detol

ROOT = os.environ.get("FASHION_PNG", "data/fashion-png")
TRANSFORM = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.286,), (0.353,))])


def grey(path: str) -> Image.Image:
    """ImageFolder's default loader converts to RGB; these are one-channel PNGs."""
    with Image.open(path) as image:
        return image.convert("L")


def build(params: dict, data) -> nn.Module:  # detol: the signature
    model = models.resnet18(weights=None, num_classes=data.n_classes)  # detol: data.n_classes
    # 1x28x28 input: a 3x3 stem at stride 1 and no max-pool keep the small images' detail.
    model.conv1 = nn.Conv2d(data.input_shape[0], 64, 3, 1, 1, bias=False)  # detol: input_shape
    model.maxpool = nn.Identity()
    return model


def load(val_fraction: float) -> TorchDatasets:  # detol: the signature
    train = datasets.ImageFolder(f"{ROOT}/train", TRANSFORM, loader=grey)
    test = datasets.ImageFolder(f"{ROOT}/test", TRANSFORM, loader=grey)
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(0)).tolist()
    n_val = round(len(train) * val_fraction)
    val, fit = Subset(train, order[:n_val]), Subset(train, order[n_val:])
    return TorchDatasets(fit, val, test, n_classes=len(train.classes))  # detol
