"""A Hugging Face model as research code has it: transformers' ViT built from a config (random
weights, nothing downloaded), dict samples, the model's own loss. scikit-learn's 8x8 digits as
1-channel images, cut into 2x2 patches.

Plain PyTorch and transformers; the lines marked ``# detol`` are the only ones that exist for
detol (the study file, studies/hf-vit-digits.toml, sets the rest: AdamW, linear warmup, bf16).
"""

import torch
import torchvision_cpu  # noqa: F401  # this machine's wheels only: see its docstring
from sklearn.datasets import load_digits
from transformers import ViTConfig, ViTForImageClassification

from training import TorchDatasets  # detol


class Digits(torch.utils.data.Dataset):
    """Samples as Hugging Face datasets hand them out: {"pixel_values", "labels"}."""

    def __init__(self, images, labels):
        self.images = torch.as_tensor(images, dtype=torch.float32)
        self.labels = torch.as_tensor(labels)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"pixel_values": self.images[i], "labels": self.labels[i]}


def load(val_fraction):  # detol: the signature
    images, labels = load_digits(return_X_y=True)
    images = (images.reshape(-1, 1, 8, 8) / 16.0 - 0.5) / 0.5
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0)).numpy()
    images, labels = images[order], labels[order]
    n_val = int(len(labels) * val_fraction)
    return TorchDatasets(Digits(images[n_val:], labels[n_val:]),  # detol
                         Digits(images[:n_val], labels[:n_val]), n_classes=10)  # detol


def build(params, data):  # detol: the signature
    config = ViTConfig(image_size=8, patch_size=2, num_channels=1,
                       hidden_size=params["width"], num_hidden_layers=params["depth"],
                       num_attention_heads=params["heads"], intermediate_size=2 * params["width"],
                       num_labels=data.n_classes)  # detol: data.n_classes
    return ViTForImageClassification(config)
