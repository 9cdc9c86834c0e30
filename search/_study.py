"""Opening the Optuna study for a study file: create on first run, resume afterwards."""

from __future__ import annotations

import json
import os
import socket

import optuna
from optuna.storages import BaseStorage
from optuna.trial import TrialState

from search._errors import StudyError
from search._registry import build_sampler, pruner_spec
from search._study_file import StudyFile

DRIVER_ATTR = "detol:driver"


def driver_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def open_study(sf: StudyFile, storage: BaseStorage) -> optuna.Study:
    """Create the study, or load it if it exists with the same objectives (resume)."""
    try:
        existing = optuna.load_study(study_name=sf.name, storage=storage)
    except KeyError:
        existing = None
    directions = [optuna.study.StudyDirection[d.upper()] for d in sf.directions]
    if existing is not None:
        if list(existing.directions) != directions:
            have = [d.name.lower() for d in existing.directions]
            raise StudyError(
                "direction",
                f"study {sf.name!r} already exists with directions {have}, "
                f"not {sf.directions}; use another name",
            )
        names = existing.metric_names
        if names is not None and names != sf.objectives:
            raise StudyError(
                "metric",
                f"study {sf.name!r} already exists with metrics {names}, "
                f"not {sf.objectives}; use another name",
            )
    # A seeded sampler that resumes must not replay the sequence it already produced.
    seed = sf.strategy.seed
    if seed is not None and existing is not None:
        seed += len(existing.get_trials(deepcopy=False))
    sampler = build_sampler(sf.strategy.name, sf.strategy.model_dump(), seed)
    pruner = pruner_spec(sf.pruner.name, sf.pruner.spec_options(sf.training.epochs)).build()
    study = optuna.create_study(
        study_name=sf.name,
        storage=storage,
        sampler=sampler,
        pruner=pruner,
        directions=directions,
        load_if_exists=True,
    )
    if existing is None:
        study.set_metric_names(sf.objectives)
        study.set_user_attr("detol:study", json.loads(sf.model_dump_json()) | {"storage": None})
    return study


def recover_orphans(study: optuna.Study) -> list[int]:
    """Fail RUNNING trials whose driver process on this host is gone; re-queue their params.

    Returns the numbers of the trials that were failed. Trials owned by a live driver or by
    another host are left alone.
    """
    host = socket.gethostname()
    failed = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = str(t.user_attrs.get(DRIVER_ATTR, ""))
        owner_host, _, pid = owner.rpartition(":")
        if owner_host != host or not pid.isdigit() or _alive(int(pid)):
            continue
        study._storage.set_trial_user_attr(  # noqa: SLF001 - public storage API, finished trial
            t._trial_id, "exit_reason", f"driver {owner} died while the trial ran; re-queued"
        )
        study.tell(t.number, state=TrialState.FAIL)
        study.enqueue_trial(t.params, user_attrs={"detol:retry_of": t.number})
        failed.append(t.number)
    return failed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
