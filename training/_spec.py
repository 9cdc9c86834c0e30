"""The trial spec: what the driver hands to one MPI job, and what comes back. Plain JSON."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from training._config import TrainConfig


@dataclass(frozen=True, kw_only=True)
class TrialSpec:
    """Everything ``python -m training.jobs.worker SPEC.json`` needs. No torch objects; its JSON
    form (:meth:`to_json`) crosses every process boundary.

    ``config`` is typed: a :class:`TrainConfig` (validated where it was made, in the driver), or
    a dict (read from JSON), validated here, once, on construction.

    >>> TrialSpec(config={"epochs": 2}).config.epochs
    2
    """

    config: TrainConfig
    objectives: list[str] = field(default_factory=lambda: ["val_accuracy"])
    study_name: str | None = None
    storage_url: str | None = None
    trial_id: int | None = None
    trial_number: int | None = None
    pruner: dict[str, Any] | None = None
    report: bool = True  # per-epoch report (a vector attribute if multi-objective) + pruning
    launcher: str | list[str] = "mpiexec -n {ranks}"  # {ranks} is filled in
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    result_path: str | None = None
    weights_path: str | None = None
    ask_time: float | None = None
    # run on a warm pool of ranks (training.launch._warm_pool) instead of a fresh job
    warm: bool = False
    # A warm pool this wide serves the trial on a sub-communicator of its first `ranks` ranks,
    # so segments of one trial at any width up to it share one pool and its memory of their
    # paused states (training.jobs._regroup: the in-place resize); None: a pool of `ranks`.
    pool_ranks: int | None = None
    checkpoints: dict[str, Any] | None = None  # training.storage.CheckpointPlan as JSON
    resume_from: str | None = None  # artifact id of the checkpoint this trial continues from
    # A user's own loop (training.jobs._own_loop): {"function": "pkg.mod:train", "params": {...},
    # "sys_path": [...]}; None: the built-in trainer trains ``config``.
    own_loop: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.config, TrainConfig):
            object.__setattr__(self, "config", TrainConfig.model_validate(self.config))

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["config"] = self.config.model_dump(mode="json")
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrialSpec:
        return cls(**data)


def started_marker(result_path: str) -> str:
    """The file rank 0 of a fresh job writes once every rank is through MPI_Init: a job that
    ends without it never ran the trial (``training.launch`` launches it again)."""
    return f"{result_path}.started"
