"""What a model costs per sample, as the trainer records it (the ``flops`` user attribute)."""

from __future__ import annotations

from torch import nn

from training.models._genome import model_cost


def flops(model: nn.Module, input_shape: tuple[int, ...]) -> int:
    """Per-sample multiply-adds, or 0 for a model that cannot take a zero float sample."""
    try:
        return model_cost(model, input_shape).flops
    except Exception:  # noqa: BLE001 - a user model (integer inputs, other layers): not counted
        return 0
