"""The built-in trainer's optimizer, learning-rate schedule, gradient clipping and precision.

Every algorithm wraps the same ``torch.optim`` optimizer (sync reduces gradients before its
step, ASGD exchanges the weights after it), so any optimizer works with any algorithm. The
schedule is a pure function of the training progress (epoch and step within it), so a resumed,
paused or re-widened trial continues on exactly the rate it left: nothing to checkpoint.

>>> from training._config import TrainConfig
>>> s = Schedule(TrainConfig(lr_schedule="cosine", epochs=2, warmup_epochs=0.5))
>>> [round(s.factor(1, i, 4), 3) for i in (0, 1, 2, 3)], round(s.factor(2, 2, 4), 3)
([0.0, 0.481, 0.854, 0.691], 0.146)
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch

from training.plugins import PluginError, resolve


def make_optimizer(config: Any, model: torch.nn.Module) -> torch.optim.Optimizer:
    """``[training] optimizer``: sgd (momentum), adam, adamw, or the plug-in's."""
    c = config
    params = list(model.parameters())
    if c.optimizer == "adam":
        return torch.optim.Adam(params, lr=c.lr, weight_decay=c.weight_decay)
    if c.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=c.lr, weight_decay=c.weight_decay)
    if c.optimizer == "sgd":
        return torch.optim.SGD(params, lr=c.lr, momentum=c.momentum, weight_decay=c.weight_decay)
    func = c.optimizer.partition(":")[2]
    got = resolve("training.optimizer", c.optimizer)(c.plugin_params(), params)
    if not isinstance(got, torch.optim.Optimizer):
        raise PluginError("training.optimizer", f"{func}() returned {type(got).__name__}, "
                          "expected a torch.optim.Optimizer")
    ours = {id(p) for p in params}
    theirs = {id(p) for g in got.param_groups for p in g["params"]}
    if theirs != ours:
        raise PluginError("training.optimizer", f"{func}() optimizes {len(theirs)} tensors, "
                          f"the model has {len(ours)} parameters: give it all of "
                          "model_parameters (each once)")
    return got


class Schedule:
    """``[training] lr_schedule``, ``lr_every`` and ``warmup_epochs``: each parameter group's lr
    is its initial lr times :meth:`factor`."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.kind = config.lr_schedule
        self.user = None
        if ":" in self.kind:
            self.user = resolve("training.lr_schedule", self.kind)
        self.base: list[float] = []

    @property
    def active(self) -> bool:
        return self.kind != "constant" or self.config.warmup_epochs > 0

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        """Takes ``optimizer``'s initial rates (again after a prune rebuilt it)."""
        self.base = [float(g.get("initial_lr", g["lr"])) for g in optimizer.param_groups]
        for g, lr in zip(optimizer.param_groups, self.base, strict=True):
            g["initial_lr"] = lr

    def factor(self, epoch: int, step: int, steps: int) -> float:
        """The factor at ``step`` (0-based) of ``steps`` in ``epoch`` (1-based)."""
        c = self.config
        within = 0.0 if c.lr_every == "epoch" else min(step, steps) / max(1, steps)
        done = (epoch - 1) + within  # epochs of training behind this step
        progress = min(1.0, done / c.epochs)
        if self.user is not None:
            got = self.user(progress, c.plugin_params())
            try:
                value = float(got)
            except (TypeError, ValueError):
                raise PluginError("training.lr_schedule", f"{self.kind.partition(':')[2]}() "
                                  f"returned {type(got).__name__}, expected a float") from None
            if not (math.isfinite(value) and value >= 0):
                raise PluginError("training.lr_schedule", f"{self.kind.partition(':')[2]}() "
                                  f"returned {value} at progress {progress:.3f}, expected a "
                                  "finite factor >= 0")
        elif self.kind == "cosine":
            value = 0.5 * (1.0 + math.cos(math.pi * progress))
        elif self.kind == "linear":
            value = 1.0 - progress
        elif self.kind == "step":
            value = c.step_gamma ** int(done // c.step_epochs)
        else:
            value = 1.0
        if c.warmup_epochs > 0 and done < c.warmup_epochs:
            value *= done / c.warmup_epochs
        return value

    def apply(self, optimizer: torch.optim.Optimizer, epoch: int, step: int, steps: int) -> None:
        if not self.active:
            return
        if len(self.base) != len(optimizer.param_groups):
            self.attach(optimizer)
        f = self.factor(epoch, step, steps)
        for g, lr in zip(optimizer.param_groups, self.base, strict=True):
            g["lr"] = lr * f


class Precision:
    """``[training] precision``: autocast for the forward pass and the loss (bf16 on CPU and
    CUDA, fp16 on CUDA with a gradient scaler)."""

    def __init__(self, kind: str, device: torch.device) -> None:
        if kind == "fp16" and device.type != "cuda":
            raise PluginError("training.precision", f'"fp16" needs a CUDA device; this rank '
                              f'trains on {device.type}: use "bf16" (autocast on CPU too)')
        self.kind, self.device = kind, device
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(kind)
        self.scaler = torch.amp.GradScaler("cuda") if kind == "fp16" else None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The forward pass's context (every step: fp32 gets a no-op one)."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss if self.scaler is None else self.scaler.scale(loss)

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)  # skipped where the gradients overflowed
        self.scaler.update()

    def state_dict(self) -> dict[str, Any] | None:
        return None if self.scaler is None else self.scaler.state_dict()

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)
