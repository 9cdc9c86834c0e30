"""Plug-ins shaped as research code is (tests/training/test_research_code.py,
tests/search/test_plugins.py): dict samples, tuple and mapping outputs, a Hugging Face model that
computes its own loss, an optimizer and a schedule of the user's, a summed loss.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _user_plugins import build
from sklearn.datasets import load_digits
from torch import nn

from training import DataInfo, TorchDatasets, load_dataset

# This machine's torchvision wheel is built for the CUDA torch; transformers imports it.
sys.path.append(str(Path(__file__).resolve().parents[2] / "examples" / "fashion_png"))
import torchvision_cpu  # noqa: E402, F401


class Dicts(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Samples as dicts, as every Hugging Face dataset hands them out."""

    def __init__(self, **columns: Any) -> None:
        self.columns = {k: torch.as_tensor(v) for k, v in columns.items()}

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[i] for k, v in self.columns.items()}


def dict_digits(val_fraction: float) -> TorchDatasets:
    """The built-in digits (same split, same order) as {"pixels", "labels"} samples."""
    ds = load_dataset("digits", val_fraction)
    return TorchDatasets(Dicts(pixels=ds.x_train, labels=ds.y_train),
                         Dicts(pixels=ds.x_val, labels=ds.y_val),
                         Dicts(pixels=ds.x_test, labels=ds.y_test), n_classes=10)


def dict_digits_target_y(val_fraction: float) -> TorchDatasets:
    """Dict samples whose target key is neither "labels" nor "label"."""
    ds = load_dataset("digits", val_fraction)
    return TorchDatasets(Dicts(pixels=ds.x_train, y=ds.y_train), Dicts(pixels=ds.x_val, y=ds.y_val),
                         n_classes=10)


def token_digits(val_fraction: float) -> TorchDatasets:
    """scikit-learn's digits as sequences of 65 tokens ([CLS], then grey levels 0..16)."""
    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order].astype(np.int64), y[order]
    x = np.concatenate([np.full((len(x), 1), 17), x], axis=1)  # a [CLS] token first (BERT pools it)
    n_val = int(len(x) * val_fraction)
    mask = np.ones_like(x)
    return TorchDatasets(
        Dicts(input_ids=x[n_val:], attention_mask=mask[n_val:], labels=y[n_val:]),
        Dicts(input_ids=x[:n_val], attention_mask=mask[:n_val], labels=y[:n_val]), n_classes=10)


class TupleOut(nn.Module):
    """forward -> (logits, aux), as many research models return."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.inner(x)
        return logits, logits.detach().norm()


class MappingOut(TupleOut):
    """forward -> {"logits": ...}, as a Hugging Face ModelOutput."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:  # type: ignore[override]
        return {"logits": self.inner(x)}


def tuple_model(params: dict[str, Any], data: DataInfo) -> nn.Module:
    return TupleOut(build(params, data))


def mapping_model(params: dict[str, Any], data: DataInfo) -> nn.Module:
    return MappingOut(build(params, data))


class NoLogits(TupleOut):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:  # type: ignore[override]
        return {"scores": self.inner(x)}


def no_logits_model(params: dict[str, Any], data: DataInfo) -> nn.Module:
    return NoLogits(build(params, data))


class Elementwise(nn.Module):
    """No matrix product, no convolution: nothing FlopCounterMode counts."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)[:, : len(self.scale)] * self.scale


def elementwise_model(params: dict[str, Any], data: DataInfo) -> nn.Module:
    return Elementwise(data.n_outputs)


def tiny_bert(params: dict[str, Any], data: DataInfo) -> nn.Module:
    """transformers' BERT from a config (random weights, nothing downloaded)."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=18, hidden_size=params.get("width", 32), num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=65,
                        num_labels=data.n_classes, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    return BertForSequenceClassification(config)


def summed_loss(params: dict[str, Any]) -> Any:
    return nn.CrossEntropyLoss(reduction="sum")


def nesterov(params: dict[str, Any], model_parameters: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(model_parameters, lr=params["lr"], momentum=0.9, nesterov=True)


def half_of_them(params: dict[str, Any], model_parameters: list[nn.Parameter]) -> Any:
    return torch.optim.SGD(model_parameters[:1], lr=params["lr"])


def halve_late(progress: float, params: dict[str, Any]) -> float:
    return 1.0 if progress < 0.5 else 0.5


class KeywordsNoLoss(TupleOut):
    """Takes the dict's keys as keywords (labels too) but computes no loss."""

    def forward(self, pixels: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:  # type: ignore[override]
        return {"logits": self.inner(pixels)}


def keywords_no_loss_model(params: dict[str, Any], data: DataInfo) -> nn.Module:
    return KeywordsNoLoss(build(params, data))


def pixel_digits(val_fraction: float) -> TorchDatasets:
    """The built-in digits as {"pixel_values", "labels"} samples (a Hugging Face image set)."""
    ds = load_dataset("digits", val_fraction)
    return TorchDatasets(Dicts(pixel_values=ds.x_train, labels=ds.y_train),
                         Dicts(pixel_values=ds.x_val, labels=ds.y_val), n_classes=10)


def tiny_vit(params: dict[str, Any], data: DataInfo) -> nn.Module:
    """transformers' ViT from a config (random weights): 2x2 patches of the 8x8 digits."""
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=8, patch_size=2, num_channels=1, hidden_size=32,
                       num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                       num_labels=data.n_classes)
    return ViTForImageClassification(config)


def heads_model(params: dict[str, Any], data: DataInfo) -> nn.Module:
    """Attention needs d_model divisible by heads: part of the space cannot be built."""
    if params["d_model"] % params["heads"]:
        raise ValueError(f"d_model {params['d_model']} is not divisible by heads {params['heads']}")
    return nn.Sequential(nn.Flatten(), nn.Linear(64, params["d_model"]), nn.ReLU(),
                         nn.Linear(params["d_model"], data.n_outputs))
