"""Rank 0's link to the Optuna trial: per-epoch reports and the pruner's decision (a value of
:mod:`._decisions`)."""

from __future__ import annotations

import importlib
import math
import warnings
from collections.abc import Mapping
from typing import Any

import optuna

from training.session._decisions import CONTINUE, PAUSE, STOP, VECTOR_ATTR, Decision
from training.storage import RETRY_SECONDS, open_storage


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


class StaleTrial(RuntimeError):
    """The trial this job reports to was finished by someone else (the driver failed it when its
    node went silent, and re-queued its parameters): this job's results are late, refused."""


class OptunaReporter:
    """Reports to the running trial ``trial_id`` of ``study_name`` in the storage at ``url``.

    ``objectives[0]`` is reported each epoch (Optuna's intermediate value, what its pruners
    read); in a multi-objective study, where Optuna refuses reports, the epoch's vector of
    ``objectives`` is stored as the user attribute ``VECTOR_ATTR + epoch`` and the pruner is asked
    directly. A pruner with ``pauses = True`` (search.pruners._promotion) pauses rather than stops.
    """

    def __init__(
        self,
        *,
        study_name: str,
        storage_url: str,
        trial_id: int,
        pruner: dict[str, Any] | None,
        objectives: list[str] | None = None,
        reports: bool = True,
    ) -> None:
        self.pruner = build_pruner(pruner)
        self.study = optuna.load_study(
            study_name=study_name,
            storage=open_storage(storage_url, retry_seconds=RETRY_SECONDS),
            sampler=optuna.samplers.RandomSampler(),
            pruner=self.pruner,
        )
        self.trial = optuna.Trial(self.study, trial_id)
        self.objectives = objectives or ["val_accuracy"]
        self.reports = reports  # False: record nothing, never prune

    def decide(self, epoch: int, row: Mapping[str, float]) -> Decision:
        if not self.reports:
            return CONTINUE
        try:
            return self._decide(epoch, row)
        except optuna.exceptions.UpdateFinishedTrialError:
            stored = self.study._storage.get_trial(self.trial._trial_id)  # noqa: SLF001 - one read
            state = stored.state.name
            raise StaleTrial(
                f"trial {self.trial.number} is already {state} in the storage (the driver gave "
                f"up on this job: its node was silent, cut off or lost): the report of epoch "
                f"{epoch} is refused and this job stops") from None

    def _decide(self, epoch: int, row: Mapping[str, float]) -> Decision:
        if len(self.study.directions) > 1:
            vector = [float(row[m]) for m in self.objectives]
            self.trial.set_user_attr(
                f"{VECTOR_ATTR}{epoch}", [v if math.isfinite(v) else None for v in vector]
            )
            # what trial.should_prune does, without its refusal of multi-objective studies
            stop = self.pruner.prune(self.study, self.trial._get_latest_trial())  # noqa: SLF001
        else:
            self.trial.report(float(row[self.objectives[0]]), step=epoch)
            stop = self.trial.should_prune()
        if not stop:
            return CONTINUE
        return PAUSE if getattr(self.pruner, "pauses", False) else STOP


def trial_reporter(spec: Any, rank: int) -> OptunaReporter | None:
    """Rank 0's reporter for the trial ``spec`` names (a TrialSpec); None on the other ranks and
    for a job that reports to no trial. One place for the built-in trainer and own loops."""
    if rank != 0 or not spec.storage_url or spec.trial_id is None:
        return None
    return OptunaReporter(
        study_name=spec.study_name,
        storage_url=spec.storage_url,
        trial_id=spec.trial_id,
        pruner=spec.pruner,
        objectives=list(spec.objectives),
        reports=spec.report,
    )
