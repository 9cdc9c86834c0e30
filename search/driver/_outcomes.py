"""What a trial's end means to the driver (search.driver._driver): the run's counts, a running
trial's record, the result attributes kept on a trial, and the answers for trials whose result never
came (a lost worker) or whose job failed (its log beside the storage)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from distributed import Future

from search.clusters._watch import ClusterFailed
from search.driver._segments import beside_storage

# User attributes copied from an MPI job's result onto its trial.
RESULT_ATTRS = (
    "ranks",
    "algorithm",
    "wall_time_s",
    "rank_seconds",
    "train_time_s",
    "epochs_run",
    "samples_per_s",
    "exit_reason",
    "n_params",
    "flops",
    "pruned_units",  # [training] prune: {"groups": {layer: [dense, final]}, "left_alone": [..]}
    "test_accuracy",
    "launch_overhead_s",
    "pool",  # a warm pool's {"pid", "trial": trials it served, "fresh": started for this one}
    "command",
    "history",
    "counters",
    "steps_per_rank",
    "slowdown_sleep_s",
    "mpi_thread_level",
    "device",  # rank 0's: "cpu" or "cuda:0 (NVIDIA H100 80GB HBM3)"
    "start_epoch",
    "checkpoint_s",
    "checkpoint_bytes",
    "sim_time_s",
    "host",  # the Dask worker's (where the launcher ran)
    "hosts",  # the distinct hosts of the trial's ranks, in rank order
    "repeats",  # [training] repeats > 1: each seed's final values and their spread
    "batch_job",
    "dask_worker",  # its address: a continuation is sent back there (its warm pool's memory)
    "restored_from",  # a continuation's state: "memory" (in place on a warm pool) or "store"
    "restore_s",
    "launch_failures",  # MPI jobs of this trial that died before every rank was through MPI_Init
)


@dataclass
class RunCounts:
    """What one ``search run`` did, and what the study holds now."""

    complete: int = 0
    pruned: int = 0
    failed: int = 0
    running: int = 0
    finished_before: int = 0
    target: int = 0
    stopped_because: str = ""
    best: str = ""
    failures: list[str] = field(default_factory=list)
    paused: int = 0  # of ``pruned``: paused at a rung (may still be promoted)
    promoted: int = 0  # paused trials resumed by this run
    continuations: int = 0  # of complete + pruned: promoted continuations (same configuration)
    refused: int = 0  # results that came for trials already finished elsewhere (not told)

    @property
    def finished(self) -> int:
        """Finished configurations (``budget.trials`` counts these)."""
        return self.finished_before + self.complete + self.pruned - self.continuations


@dataclass
class Running:
    trial: optuna.Trial
    ranks: int
    started: float = field(default_factory=time.monotonic)
    sim_start: float = 0.0
    continuation: bool = False  # a promoted paused trial: not a new configuration
    resumed_epoch: int = 0  # the checkpoint's epoch it continues from (0: from scratch)
    carried: dict[str, float] = field(default_factory=dict)  # work done before, by its lineage


def result_values(result: dict[str, Any], objectives: list[str]) -> list[float] | None:
    values = result.get("values") or {}
    out = [float(values[m]) for m in objectives if m in values]
    return out if len(out) == len(objectives) and all(map(math.isfinite, out)) else None


def log_directory(storage_url: str, study_name: str) -> Path:
    """Where failed trials' logs go: ``detol-logs/STUDY`` beside a journal or SQLite file, else
    under the working directory."""
    return beside_storage(storage_url) / "detol-logs" / study_name


def weights_directory(storage_url: str, study_name: str) -> Path:
    """Where trials' final weights go (``[training] keep_weights``): ``detol-weights/STUDY``
    beside a journal or SQLite file, else under the working directory."""
    return beside_storage(storage_url) / "detol-weights" / study_name


def interruption(exc: BaseException) -> str:
    """Why the running trials stop, for their ``exit_reason``."""
    if isinstance(exc, ClusterFailed):
        return f"cluster failed: {exc}"
    name = getattr(exc, "signal_name", "")
    return f"driver interrupted ({name})" if name else "driver interrupted"


def record_genome(trial: optuna.Trial, genome: Any) -> None:
    """The genome as readable attributes (notebooks, dashboard), beside its raw params."""
    trial.set_user_attr("genome", genome.canonical_json)
    trial.set_user_attr("genome_key", genome.key)
    trial.set_user_attr("genome_summary", genome.summary())


def outcome(future: Future, result: dict[str, Any] | None) -> dict[str, Any]:
    return fetch_result(future) if result is None else result


def fetch_result(future: Future) -> dict[str, Any]:
    try:
        return dict(future.result())
    except Exception as exc:  # lost worker (KilledWorker), closed connection, cancelled task
        return lost_result(exc)


def lost_result(exc: BaseException) -> dict[str, Any]:
    """A trial whose answer never came (its worker or connection died): re-queued."""
    reason = f"{type(exc).__name__}: {exc}".strip()
    return {"state": "failed", "exit_reason": f"Dask worker lost: {reason}", "lost": True}
