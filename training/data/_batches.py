"""Batches and model outputs as research code has them, read in one place.

A batch (what the loader yields: the collated samples) is either

- a pair ``(inputs, target)`` (a tuple or list of two), the built-in datasets' shape, or
- a mapping (``{"input_ids": ..., "attention_mask": ..., "labels": ...}``, every Hugging Face
  dataset's shape): ``[training] target`` names the target's key (default ``"labels"``, else
  ``"label"``); the model gets the rest: ``model(value)`` when one key is left (or
  ``[training] inputs`` names one), else ``model(**rest)``. With ``loss = "model"`` (the model
  computes its own loss, the Hugging Face convention) the target stays in the keywords.

A model's output is a tensor, a tuple or list (its first element is the prediction) or a mapping
(``ModelOutput``; its ``logits`` are the prediction, its ``loss`` the model's own loss).

>>> import torch
>>> shape = BatchShape()
>>> inputs, target = shape.split({"x": torch.zeros(3, 2), "labels": torch.tensor([0, 1, 1])})
>>> tuple(inputs.shape), target.tolist(), rows(target)
((3, 2), [0, 1, 1], 3)
>>> prediction((torch.ones(2, 4), "aux")).shape
torch.Size([2, 4])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from training.plugins import PluginError

TARGET_KEYS = ("labels", "label")  # looked up in this order when [training] target is not set


@dataclass(frozen=True)
class BatchShape:
    """How this trial reads a batch: ``target`` and ``inputs`` keys of dict batches (None: the
    defaults above), and whether the model computes its own loss (``loss = "model"``)."""

    target: str | None = None
    inputs: str | None = None
    model_loss: bool = False

    @classmethod
    def of(cls, config: Any) -> BatchShape:
        return cls(target=config.target, inputs=config.inputs, model_loss=config.loss == "model")

    def split(self, batch: Any) -> tuple[Any, Any]:
        """(what the model is called with, the target)."""
        if isinstance(batch, Mapping):
            key = self._target_key(batch)
            if self.inputs is not None:
                if self.inputs not in batch:
                    raise PluginError("training.inputs", f"the samples are dicts with keys "
                                      f"{sorted(batch)}, none is {self.inputs!r}")
                rest: Any = {self.inputs: batch[self.inputs]}
            else:
                rest = {k: v for k, v in batch.items() if k != key}
            if self.model_loss:
                rest = {**rest, key: batch[key]}
            elif len(rest) == 1:
                (rest,) = rest.values()
            return rest, batch[key]
        if isinstance(batch, Sequence) and not isinstance(batch, str | bytes) and len(batch) == 2:
            if self.model_loss:
                raise PluginError("training.loss", '"model" (the model computes its own loss) '
                                  "needs dict samples, whose target key the model is given; "
                                  "the samples are (inputs, target) pairs")
            return batch[0], batch[1]
        what = f"a {type(batch).__name__}" + (f" of {len(batch)}" if isinstance(batch, Sequence)
                                              else "")
        raise PluginError("training.dataset", f"a batch is {what}: samples must be (inputs, "
                          "target) pairs or dicts with a target key (docs/user-models.md)")

    def _target_key(self, batch: Mapping[str, Any]) -> str:
        if self.target is not None:
            if self.target not in batch:
                raise PluginError("training.target", f"the samples are dicts with keys "
                                  f"{sorted(batch)}, none is {self.target!r}")
            return self.target
        for key in TARGET_KEYS:
            if key in batch:
                return key
        raise PluginError("training.target", f"the samples are dicts with keys {sorted(batch)} "
                          f"and none of {list(TARGET_KEYS)}: set [training] target = KEY")

    @staticmethod
    def forward(model: Any, inputs: Any) -> Any:
        """The model's output on ``inputs`` (keywords for a dict)."""
        return model(**inputs) if isinstance(inputs, Mapping) else model(inputs)


def prediction(output: Any) -> Any:
    """The prediction in a model's output: the tensor itself, a sequence's first element, a
    mapping's ``logits``."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, Mapping):
        if "logits" in output:
            return output["logits"]
        raise PluginError("training.model", f"the model's output is a {type(output).__name__} "
                          f"with keys {sorted(output)} and no 'logits' for the prediction")
    if isinstance(output, Sequence) and len(output) and isinstance(output[0], torch.Tensor):
        return output[0]
    raise PluginError("training.model", f"the model's output is a {type(output).__name__}: "
                      "expected a tensor, a tuple whose first element is the prediction, or "
                      "a mapping with 'logits'")


def own_loss(output: Any) -> Any:
    """The loss a model computed itself (``loss = "model"``): its output's ``loss``."""
    if isinstance(output, Mapping) and output.get("loss") is not None:
        return output["loss"]
    if getattr(output, "loss", None) is not None:
        return output.loss
    raise PluginError("training.loss", '"model": the model\'s output has no loss (a Hugging '
                      "Face model computes one when it is given the labels: are they in the "
                      "samples under [training] target?)")


def rows(target: Any) -> int:
    """Samples in a batch: its target's first dimension."""
    return len(target)


def to_device(obj: Any, device: torch.device) -> Any:
    """Tensors moved to ``device``, inside dicts, tuples and lists too."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, Mapping):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, tuple | list):
        return type(obj)(to_device(v, device) for v in obj)
    return obj


def shape_of(obj: Any, *, per_sample: bool = False) -> str:
    """A batch part's shape for messages: ``(2, 64)`` or ``{input_ids: (2, 64), ...}``;
    ``per_sample``: without the batch dimension."""
    if isinstance(obj, torch.Tensor):
        return str(tuple(obj.shape[1:] if per_sample else obj.shape))
    if isinstance(obj, Mapping):
        return "{" + ", ".join(f"{k}: {shape_of(v, per_sample=per_sample)}"
                               for k, v in obj.items()) + "}"
    if isinstance(obj, tuple | list):
        return "(" + ", ".join(shape_of(v, per_sample=per_sample) for v in obj) + ")"
    return type(obj).__name__
