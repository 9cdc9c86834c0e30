"""What users bring: their model, dataset, loss and metrics as ``package.module:function`` names.

The study file's ``[training]`` keys (all optional)::

    model   = "pkg.mod:build"       # build(params, data: DataInfo) -> torch.nn.Module
    dataset = "pkg.mod:load"        # load(val_fraction) -> Dataset | TorchDatasets
    loss    = "pkg.mod:make_loss"   # make_loss(params) -> (output, target) -> mean loss,
                                    # or "model": the model computes its own (output.loss)
    metrics = "pkg.mod:metrics"     # metrics(output, target) -> {name: batch mean}
    task    = "regression"          # MSE loss, val_loss and val_mae (default "classification")

Names are resolved on the ranks (Python caches the import, so a warm pool imports each once).
This module imports no torch at import time: the driver reads :data:`OURS` and the classes.

>>> DataInfo(input_shape=(1, 8, 8), n_classes=10, n_targets=None, task="classification",
...          n_train=1437).n_outputs
10
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from training.plugins._resolve import import_function

# Our top-level packages: a user module under one of these names that is not ours collides.
TASKS = ("classification", "regression")


class PluginError(ValueError):
    """A plug-in that cannot be used; ``key`` is the study file's key (``training.model``)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


@dataclass(frozen=True, kw_only=True)
class DataInfo:
    """What a model builder knows about the data: one sample's shape (no batch dimension),
    the class count (classification) or target count (regression), the task, the train size."""

    input_shape: tuple[int, ...]
    n_classes: int | None
    n_targets: int | None
    task: str
    n_train: int

    @property
    def n_outputs(self) -> int:
        """The model's output width: classes, or regression targets."""
        n = self.n_classes if self.task == "classification" else self.n_targets
        return int(n or 1)


class TorchDatasets:
    """Map-style torch datasets (``__len__``, ``__getitem__ -> (x, y)``) for training, validation
    and optionally test, read lazily (e.g. ``torchvision.datasets.ImageFolder``).

    ``input_shape`` is taken from the first training sample and ``n_classes`` from the training
    set's ``.classes`` when not given; ``n_targets`` (regression) from the first target's size.

    >>> data = TorchDatasets([(0.0, 1)], [(0.0, 0)], n_classes=2)
    >>> len(data.train), data.test is None
    (1, True)
    """

    def __init__(
        self,
        train: Any,
        val: Any,
        test: Any = None,
        *,
        n_classes: int | None = None,
        n_targets: int | None = None,
        input_shape: tuple[int, ...] | None = None,
    ) -> None:
        for name, ds in (("train", train), ("val", val), ("test", test)):
            if ds is None and name == "test":
                continue
            if not (hasattr(ds, "__len__") and hasattr(ds, "__getitem__")):
                raise TypeError(
                    f"TorchDatasets: {name} must be a map-style dataset (__len__ and "
                    f"__getitem__), got {type(ds).__name__}"
                )
        if len(train) == 0 or len(val) == 0:
            raise ValueError(
                f"TorchDatasets: train and val need samples, got {len(train)} and {len(val)}"
            )
        for name, n in (("n_classes", n_classes), ("n_targets", n_targets)):
            if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
                raise ValueError(f"TorchDatasets: {name} must be an integer >= 1, got {n!r}")
        self.train = train
        self.val = val
        self.test = test
        self.n_classes = n_classes
        self.n_targets = n_targets
        self.input_shape = None if input_shape is None else tuple(int(s) for s in input_shape)


def build_genome_module(
    genome: Any, input_shape: Any, n_outputs: int, **kw: Any
) -> Any:
    """A searched genome (a ``spaces`` genome or its dict, as ``params["genome"]``) as a
    ``torch.nn.Module`` mapping ``input_shape`` samples to ``n_outputs``: to put inside a
    model of your own. ``kw``: ``channels``, ``stages``, ``cells_per_stage``, ``head_size``."""
    from spaces import genome_from_dict
    from training.models import build_genome_model

    if isinstance(genome, dict):
        genome = genome_from_dict(genome)
    return build_genome_model(genome, tuple(input_shape), n_outputs, **kw)


def resolve(key: str, name: str) -> Callable[..., Any]:
    """The function ``name`` (``module:function``); PluginError naming ``key`` if it is not there
    (:func:`import_function`'s one line)."""
    try:
        return import_function(name)
    except ValueError as exc:
        raise PluginError(key, str(exc)) from None


def build_model(config: Any, info: DataInfo) -> Any:
    """The trial's ``torch.nn.Module``: the ``model`` plug-in's, a genome's, or the built-in MLP."""
    from torch import nn

    if config.model is not None:
        func = config.model.partition(":")[2]
        model = resolve("training.model", config.model)(config.plugin_params(), info)
        if not isinstance(model, nn.Module):
            raise PluginError("training.model", f"{func}() returned {type(model).__name__}, "
                              "expected torch.nn.Module")
        return model
    if config.genome is not None:  # a searched topology
        return build_genome_module(
            config.genome, info.input_shape, info.n_outputs, channels=config.cell_channels,
            stages=config.cell_stages, cells_per_stage=config.cells_per_stage,
        )
    from training.models import build_mlp

    return build_mlp(
        math.prod(info.input_shape), info.n_outputs, hidden=config.hidden,
        layers=config.layers, activation=config.activation, dropout=config.dropout,
    )


def _mse(output: Any, target: Any) -> Any:
    import torch.nn.functional as F

    return F.mse_loss(output.reshape(target.shape), target.to(output.dtype))


def _on_prediction(loss: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``loss`` applied to the prediction in a model's output (training.data._batches)."""
    from training.data._batches import prediction

    return lambda output, target: loss(prediction(output), target)


def make_loss(config: Any, *, summed: bool = False) -> Callable[[Any, Any], Any]:
    """(output, target) -> the batch's MEAN loss: the model's own (``loss = "model"``: its
    output's ``loss``), the ``loss`` plug-in's, MSE for regression, cross-entropy for
    classification. ``output`` is the model's whole output; all but the model's own loss and
    a plug-in with ``loss_gets = "output"`` see its prediction (training.data._batches).
    ``summed``: the batch's sum instead (the mean times the batch's rows; the built-in
    cross-entropy sums directly, one operation fewer)."""
    if summed:
        if config.loss is None and config.task == "classification":
            from torch import nn

            return _on_prediction(nn.CrossEntropyLoss(reduction="sum"))
        mean = make_loss(config)
        return lambda output, target: mean(output, target) * len(target)
    if config.loss == "model":
        from training.data._batches import own_loss

        return lambda output, target: own_loss(output)
    if config.loss is not None:
        func = config.loss.partition(":")[2]
        loss = resolve("training.loss", config.loss)(config.plugin_params())
        if not callable(loss):
            raise PluginError("training.loss", f"{func}() returned {type(loss).__name__}, "
                              "expected a function (output, target) -> loss")
        return loss if config.loss_gets == "output" else _on_prediction(loss)
    if config.task == "regression":
        return _on_prediction(_mse)
    from torch import nn

    return _on_prediction(nn.CrossEntropyLoss())


def _accuracy(output: Any, target: Any) -> dict[str, float]:
    from training.data._batches import prediction

    return {"accuracy": float((prediction(output).argmax(dim=1) == target).float().mean())}


def _mae(output: Any, target: Any) -> dict[str, float]:
    from training.data._batches import prediction

    output = prediction(output)
    diff = output.reshape(target.shape) - target.to(output.dtype)
    return {"mae": float(diff.abs().mean())}


def make_metrics(config: Any) -> Callable[[Any, Any], dict[str, float]]:
    """(output, target) -> batch means by name (``val_`` is prefixed by the trainer): accuracy
    (classification) or mae (regression), plus the ``metrics`` plug-in's."""
    base = _accuracy if config.task == "classification" else _mae
    user = _user_metrics(config)
    if user is None:
        return base

    def both(output: Any, target: Any) -> dict[str, float]:
        return {**base(output, target), **user(output, target)}

    return both


def _user_metrics(config: Any) -> Callable[[Any, Any], dict[str, float]] | None:
    """The ``metrics`` plug-in, its answer checked: {identifier other than 'loss': float}."""
    if config.metrics is None:
        return None
    func = config.metrics.partition(":")[2]
    user = resolve("training.metrics", config.metrics)

    from training.data._batches import prediction

    def checked(output: Any, target: Any) -> dict[str, float]:
        got = user(prediction(output), target)
        if not isinstance(got, dict):
            raise PluginError("training.metrics", f"{func}() returned {type(got).__name__}, "
                              "expected dict[str, float]")
        out = {}
        for name, value in got.items():
            if not isinstance(name, str) or not name.isidentifier() or name == "loss":
                raise PluginError("training.metrics", f"{func}() returned the name {name!r}: "
                                  "names are identifiers other than 'loss'")
            out[name] = float(value)
        return out

    return checked


def make_batch_sums(config: Any) -> Callable[[Any, Any], dict[str, float]]:
    """(output, target) -> each validation metric SUMMED over the batch, ``loss`` included, in
    a form whose total does not depend on how the samples were cut into batches and ranks (so
    P ranks report what one rank would, bit for bit where the outputs are the same): accuracy
    is the count of correct predictions (an integer, exact), the built-in losses and mae are
    float64 sums of per-sample values; a ``loss`` or ``metrics`` plug-in's batch mean is
    multiplied by the batch size (in float64)."""
    import torch.nn.functional as F

    from training.data._batches import prediction

    user_loss = make_loss(config) if config.loss is not None else None
    user_metrics = _user_metrics(config)
    classify = config.task == "classification"

    def per_sample(values: Any) -> float:
        return float(values.reshape(len(values), -1).double().mean(dim=1).sum())

    def sums(output: Any, target: Any) -> dict[str, float]:
        n = len(target)
        pred = prediction(output)
        out: dict[str, float] = {}
        if classify:
            out["accuracy"] = int((pred.argmax(dim=1) == target).sum())
            if user_loss is None:
                out["loss"] = float(F.cross_entropy(pred, target, reduction="none")
                                    .double().sum())
        else:
            diff = pred.reshape(target.shape) - target.to(pred.dtype)
            out["mae"] = per_sample(diff.abs())
            if user_loss is None:
                out["loss"] = per_sample(diff * diff)
        if user_loss is not None:
            out["loss"] = float(user_loss(output, target)) * n
        if user_metrics is not None:  # a plug-in's name wins, as in make_metrics
            out.update({k: float(v) * n for k, v in user_metrics(output, target).items()})
        return out

    return sums
