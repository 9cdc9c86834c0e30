"""What a model costs per sample, as the trainer records it (the ``flops`` user attribute)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count


def _cpu_attention(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any,
                   out_shape: Any = None, **kwargs: Any) -> int:
    return int(sdpa_flop_count(query_shape, key_shape, value_shape))


# Attention on the CPU runs as its own kernel, which torch's counter has no formula for (its
# CUDA kernels have one): the same two matrix products (Q K^T, then by V) are counted here.
_MORE = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention}


def count_flops(model: nn.Module, sample: Any) -> int | None:
    """Multiply-adds of one forward pass on ``sample`` (a real training sample as a batch of
    one: a tensor, or a dict the model takes as keywords), counted by torch's
    ``FlopCounterMode`` (matrix products, convolutions and attention's products; half its
    FLOPs, so a Linear(64, 10) costs 640, as ``model_cost`` counts). None when the model cannot
    be counted (the pass fails, or no counted operation ran): the figure is then absent, never 0.

    >>> count_flops(nn.Sequential(nn.Flatten(), nn.Linear(64, 10)), torch.zeros(1, 64))
    640
    """
    from training.data._batches import BatchShape

    was_training = model.training
    model.eval()
    try:
        # With gradients on: in eval mode without them, torch's transformer layers take a
        # fused "fast path" the counter cannot see into (their products would go uncounted).
        with torch.enable_grad(), FlopCounterMode(display=False, custom_mapping=_MORE) as counter:
            BatchShape.forward(model, sample)
    except Exception:  # noqa: BLE001 - a pass the counter cannot follow: not counted
        return None
    finally:
        model.train(was_training)
    total = int(counter.get_total_flops())
    return total // 2 if total > 0 else None
