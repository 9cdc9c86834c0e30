"""The configuration of one candidate's training, validated in one place."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

import spaces
from training.algorithms import ALGORITHMS
from training.data import check_dataset_name
from training.data._shards import shards_path
from training.plugins import check_name
from training.pruning import (
    SEARCHABLE_PRUNE,
    PruneConfig,
    apply_prune_params,
)

ACTIVATIONS = ("relu", "tanh", "gelu", "silu")
OPTIMIZERS = ("sgd", "adam", "adamw")  # or a "module:function" plug-in
SCHEDULES = ("constant", "cosine", "step", "linear")  # or a "module:function" plug-in
# Fields a study's [space] may search. The rest describe the experiment, not the candidate.
_FIELDS = (
    "lr",
    "batch_size",
    "momentum",
    "weight_decay",
    "optimizer",
    "lr_schedule",
    "warmup_epochs",
    "grad_clip",
    "precision",
    "hidden",
    "layers",
    "activation",
    "dropout",
    "ranks",
    "algorithm",
    "send_every",
    "local_steps",
)
# ... and the keys of [training] prune, as prune_<key> (training/pruning/_config.py).
SEARCHABLE = _FIELDS + SEARCHABLE_PRUNE
# Algorithms that exchange state between ranks: with one rank nothing is exchanged and each is
# plain SGD (ASGD has no peer to write to, an average of one is a no-op), a repeat of "sync".
MIN_RANKS = {"asgd": 2, "localsgd": 2, "simuparallel": 2}
# Parameters only some algorithms read; anything else ignores them.
USED_BY = {"send_every": ("asgd",), "local_steps": ("localsgd",)}


class TrainConfig(BaseModel):
    """Everything one MPI training job needs besides its trial identity.

    >>> TrainConfig(dataset="digits", epochs=3).batch_size
    64
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: str = Field("digits", description="a built-in dataset, shards:PATH (record "
                         "shards `search data pack` wrote; docs/data.md) or module:function")
    epochs: int = Field(10, ge=1, description="epochs each trial trains (the last rung)")
    batch_size: int = Field(64, ge=1, description="global batch, split across ranks")
    lr: float = Field(0.05, gt=0, description="learning rate")
    momentum: float = Field(0.9, ge=0, lt=1, description="sgd momentum")
    weight_decay: float = Field(0.0, ge=0, description="L2 penalty")
    optimizer: str = Field(
        "sgd", description="sgd, adam, adamw, or build(params, model_parameters) -> "
        "torch.optim.Optimizer as module:function; every rank runs it")
    lr_schedule: str = Field(
        "constant", description="constant, cosine, step (x step_gamma every step_epochs), "
        "linear (to 0), or factor(progress, params) -> float as module:function (progress: "
        "0 at the start of training, 1 at its end); the lr is lr x factor")
    lr_every: Literal["step", "epoch"] = Field(
        "step", description="when the schedule's factor changes: every optimizer step or at "
        "each epoch's start")
    warmup_epochs: float = Field(
        0.0, ge=0, description="linear warmup from 0 to the schedule's lr over this many epochs")
    step_epochs: int = Field(1, ge=1, description="lr_schedule = step: epochs between steps")
    step_gamma: float = Field(0.1, gt=0, le=1, description="lr_schedule = step: factor per step")
    grad_clip: float | None = Field(
        None, gt=0, description="clip the gradient's global norm to this (sync: the reduced "
        "gradient)")
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32", description="bf16: autocast on CPU and CUDA; fp16: autocast and a gradient "
        "scaler, CUDA only")
    hidden: int = Field(128, ge=1, description="built-in MLP: units per hidden layer")
    layers: int = Field(2, ge=0, le=64, description="built-in MLP: hidden layers")
    activation: Literal["relu", "tanh", "gelu", "silu"] = Field(
        "relu", description="built-in MLP: activation"
    )
    dropout: float = Field(0.0, ge=0, lt=1, description="built-in MLP: dropout rate")
    ranks: int = Field(2, ge=1, description="MPI ranks per trial")
    algorithm: str = Field("sync", description="one of training.algorithms._registry.ALGORITHMS")
    send_every: int = Field(
        4, ge=1, description="asgd: steps between two state sends (why 4: README, training core)"
    )
    local_steps: int = Field(8, ge=1, description="localsgd: steps between two averages")
    bucket_kb: int = Field(256, ge=1, description="sync: gradient bucket size")
    mpi_async_progress: bool = Field(
        False,
        description="MPICH progress thread (MPIR_CVAR_ASYNC_PROGRESS=1), for ASGD across nodes",
    )
    slowdown: list[float] = Field(
        default_factory=list,
        description="rank i computes slowdown[i] times slower (a straggler, for experiments)",
    )
    seed: int = Field(0, description="seed of the data split, weights and batch order")
    val_fraction: float = Field(
        0.2, gt=0, le=0.5, description="share of the training data held out for validation"
    )
    genome: dict[str, Any] | None = Field(None, description="topology (a spaces genome as a dict)")
    cell_channels: int = Field(16, ge=1, description="cell genomes: stem channels")
    cell_stages: int = Field(2, ge=1, le=4, description="cell genomes: stages")
    cells_per_stage: int = Field(1, ge=1, le=5, description="cell genomes: cells per stage")
    threads_per_rank: int | None = Field(
        None, ge=1, description="torch threads per rank; left out: the trial's cores over its "
        "ranks, at least 1 (a local cluster: the machine's cores over budget.concurrency; a "
        "batch job: the cores it was given)")
    agree_timeout_s: float = Field(
        20.0, gt=0, description="how long a trial's ranks (own loop or built-in trainer) wait "
        "for each other in a session call (report, save_checkpoint, the end of training) "
        "before the trial fails",
    )
    # What users bring (training.plugins._plugins): "package.module:function" names, resolved on
    # the ranks.
    model: str | None = Field(None, description="build(params, data) -> torch.nn.Module")
    loss: str | None = Field(
        None, description='make_loss(params) -> (output, target) -> mean, or "model": the '
        "model computes its own loss (its output's loss; Hugging Face models do when given "
        "the labels)")
    loss_gets: Literal["prediction", "output"] = Field(
        "prediction", description="what the loss plug-in gets: the prediction (a tensor; a "
        "tuple output's first element, a mapping's logits) or the model's whole output")
    target: str | None = Field(
        None, description='dict samples: the target\'s key (default "labels", else "label")')
    inputs: str | None = Field(
        None, description="dict samples: the one key the model is called with (default: all "
        "keys but the target; one left: model(value), several: model(**keys))")
    metrics: str | None = Field(None, description="metrics(output, target) -> {name: mean}")
    task: Literal["classification", "regression"] = Field(
        "classification", description="regression: MSE loss, val_loss and val_mae"
    )
    repeats: int = Field(
        1, ge=1, le=16, description="train each configuration this many times, with seeds "
        "seed, seed + 1, ... (weights, dropout and batch order), in one MPI job: every epoch "
        "reports the mean over them, and the trial records each seed's final values and "
        "their standard deviation (repeats); no pruning during training, pausing or "
        "checkpoints with repeats > 1")
    validate_draws: int = Field(
        1, ge=1, le=64, description="search validate and search run build and run the plug-ins "
        "on this many random draws of the space; draws that fail are named with their "
        "parameters (a note while some pass, an error when all fail)")
    keep_weights: bool = Field(
        False, description="rank 0 writes every trial's final weights to "
        "detol-weights/STUDY/trial-N.pt beside the storage (else the working directory); "
        "search best --export-weights PATH writes the best trial's")
    loader_workers: int = Field(
        0, ge=0, le=64, description="DataLoader worker processes per rank (file datasets only)"
    )
    data_cache: str | None = Field(
        None, description="shards:PATH datasets: a node-local directory where shards are copied "
        "once per node and shared by every trial on it (LRU); unset: read from PATH")
    data_cache_gb: float = Field(
        20.0, gt=0, description="the data cache's limit in GiB (least recently used shards go)")
    shuffle_window: int = Field(
        4, ge=1, le=4096, description="shards:PATH datasets: shards whose samples are shuffled "
        "together (each epoch permutes the shards, then the samples of each window of them)")
    prune: PruneConfig | None = Field(
        None, description="prune neurons and channels during training (docs/training-core.md); "
        "each key searchable in [space] as prune_<key>; an own loop applies it with "
        "session.prune_units (docs/own-loop.md)",
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="free parameters for the model and loss plug-ins ([training.params] and "
        "[space] names that are not training fields)",
    )

    @field_validator("model", "loss", "metrics")
    @classmethod
    def _plugin_name(cls, value: str | None, info: Any) -> str | None:
        if value is None or (info.field_name == "loss" and value == "model"):
            return value
        return check_name(value)

    @field_validator("optimizer", "lr_schedule")
    @classmethod
    def _built_in_or_plugin(cls, value: str, info: Any) -> str:
        names = OPTIMIZERS if info.field_name == "optimizer" else SCHEDULES
        if value in names:
            return value
        if ":" in value:
            return check_name(value)
        raise ValueError(f"{value!r} is not one of {', '.join(names)} or a "
                         "'package.module:function' plug-in")

    @property
    def takes_free_params(self) -> bool:
        """Whether [space] may name parameters of the user's own (a model, loss, optimizer or
        lr_schedule plug-in)."""
        return self.model is not None or (self.loss is not None and self.loss != "model") or (
            ":" in self.optimizer or ":" in self.lr_schedule)

    @property
    def plugins(self) -> dict[str, str]:
        """The plug-in keys that are set, by study-file key (``training.model``: name)."""
        named = {"model": self.model, "loss": self.loss if self.loss != "model" else None,
                 "metrics": self.metrics}
        for key in ("optimizer", "lr_schedule"):
            if ":" in getattr(self, key):
                named[key] = getattr(self, key)
        if ":" in self.dataset and shards_path(self.dataset) is None:
            named["dataset"] = self.dataset
        return {f"training.{k}": v for k, v in named.items() if v is not None}

    def plugin_params(self) -> dict[str, Any]:
        """What ``build(params, data)`` and ``make_loss(params)`` get: the searchable training
        fields' values, the genome (a dict) if any, and the free parameters."""
        out: dict[str, Any] = {k: getattr(self, k) for k in _FIELDS}
        if self.genome is not None:
            out["genome"] = self.genome
        return {**out, **self.params}

    @field_validator("genome")
    @classmethod
    def _valid_genome(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            spaces.genome_from_dict(value)  # raises ValueError naming what is wrong
        return value

    @field_validator("algorithm")
    @classmethod
    def _known_algorithm(cls, value: str) -> str:
        if value not in ALGORITHMS:
            raise ValueError(f"{value!r} is not one of: {', '.join(ALGORITHMS)}")
        return value

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, value: str) -> str:
        check_dataset_name(value)
        return value

    @field_validator("slowdown")
    @classmethod
    def _slowdown_factors(cls, value: list[float]) -> list[float]:
        for i, factor in enumerate(value):
            if not factor >= 1.0 or factor != factor or factor == float("inf"):
                raise ValueError(
                    f"rank {i}'s factor is {factor}: a factor must be a finite number >= 1 "
                    "(1 = the rank's own pace, 3 = three times slower)"
                )
        return value

    @model_validator(mode="after")
    def _enough_ranks(self) -> TrainConfig:
        least = MIN_RANKS.get(self.algorithm, 1)
        if self.ranks < least:
            raise ValueError(ranks_message(self.algorithm, self.ranks))
        if self.batch_size < self.ranks:  # the sampler would refuse it in the trial: refused here
            raise ValueError(
                f"batch_size {self.batch_size} is smaller than ranks = {self.ranks}: batch_size "
                "is the global batch, split across ranks, so each rank needs at least one sample"
            )
        if len(self.slowdown) > self.ranks:
            raise ValueError(
                f"slowdown gives {len(self.slowdown)} factors but the trial has ranks = "
                f"{self.ranks}: one factor per rank at most (rank i takes slowdown[i])"
            )
        if self.prune is not None:
            self._check_prune(self.prune)
            if self.repeats > 1:
                raise ValueError(f"repeats = {self.repeats} cannot prune during training "
                                 "(each seed would prune its own units): leave out prune or "
                                 "repeats")
        return self

    def _check_prune(self, prune: PruneConfig) -> None:
        if prune.end_epoch > self.epochs:
            raise ValueError(f"prune.end_epoch = {prune.end_epoch} is after the last epoch "
                             f"(epochs = {self.epochs})")

    def with_params(self, params: dict[str, Any]) -> TrainConfig:
        """A copy with the searched values of ``params`` applied (validated again)."""
        known = {k: v for k, v in params.items() if k in _FIELDS}
        data = apply_prune_params({**self.model_dump(), **known}, params)
        if self.takes_free_params:
            free = {k: v for k, v in params.items()
                    if k not in TrainConfig.model_fields and k not in SEARCHABLE_PRUNE}
            data["params"] = {**self.params, **free}
        return TrainConfig.model_validate(data)


def ranks_message(algorithm: str, ranks: int) -> str:
    """Why ``algorithm`` cannot run on ``ranks`` ranks (for a config or a whole search space)."""
    return (
        f"algorithm {algorithm!r} needs ranks >= {MIN_RANKS[algorithm]}, got {ranks} "
        "(with one rank nothing is exchanged: it is plain SGD, the same as 'sync')"
    )


# Metrics a trial can return as objectives, with their natural direction. The first objective is
# the one reported every epoch (and pruned on); n_params is known before training starts.
METRICS: dict[str, str] = {
    "val_accuracy": "maximize",
    "val_loss": "minimize",
    "val_mae": "minimize",  # task = "regression"
    "train_loss": "minimize",
    "n_params": "minimize",
    "flops": "minimize",
    "train_time_s": "minimize",
}
