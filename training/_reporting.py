"""Rank 0's link to the Optuna trial: per-epoch reports and the pruner's decision."""

from __future__ import annotations

import importlib
import warnings
from typing import Any, Protocol

import optuna

from training._storage import RETRY_SECONDS, open_storage


class Reporter(Protocol):
    def report(self, epoch: int, value: float) -> bool:
        """Record ``value`` for ``epoch``; return True when the trial should stop (pruned)."""
        ...


class NullReporter:
    """Standalone training (no study): never prunes."""

    def report(self, epoch: int, value: float) -> bool:
        return False


def build_pruner(spec: dict[str, Any] | None) -> optuna.pruners.BasePruner:
    """``{"factory": "pkg.module:Class", "kwargs": {...}}`` -> pruner instance; a kwarg that is
    itself such a spec (a wrapped pruner) is built first."""
    if not spec:
        return optuna.pruners.NopPruner()
    module, _, name = spec["factory"].partition(":")
    factory = getattr(importlib.import_module(module), name)
    kwargs = {
        k: build_pruner(v) if isinstance(v, dict) and "factory" in v else v
        for k, v in spec.get("kwargs", {}).items()
    }
    with warnings.catch_warnings():  # PatientPruner is "experimental" in Optuna
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        pruner = factory(**kwargs)
    if not isinstance(pruner, optuna.pruners.BasePruner):
        raise TypeError(f"{spec['factory']} did not build an optuna pruner")
    return pruner


class OptunaReporter:
    """Reports to the running trial ``trial_id`` of ``study_name`` in the storage at ``url``."""

    def __init__(
        self, *, study_name: str, storage_url: str, trial_id: int, pruner: dict[str, Any] | None
    ) -> None:
        study = optuna.load_study(
            study_name=study_name,
            storage=open_storage(storage_url, retry_seconds=RETRY_SECONDS),
            sampler=optuna.samplers.RandomSampler(),
            pruner=build_pruner(pruner),
        )
        self._trial = optuna.Trial(study, trial_id)

    def report(self, epoch: int, value: float) -> bool:
        self._trial.report(value, step=epoch)
        return self._trial.should_prune()
