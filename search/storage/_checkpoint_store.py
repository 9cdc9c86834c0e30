"""Where a study's checkpoints are: fixed when the study first writes checkpoints, recorded in
the study, and read from there by every later run, on any host and from any directory.

A paused trial is promoted long after it paused, maybe by a driver on another host or started
from another directory; the default store (``detol-artifacts`` beside a journal or SQLite file,
else the working directory, as with PostgreSQL) would then be somewhere else. So the store is
resolved to an absolute path (or a bucket URL) once and kept as the study's user attribute
``detol:checkpoint_store``. A study file (or command line) that names another store is refused
before anything runs; the checkpoints are not moved for the user.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna

from search._errors import StudyError
from training.contract import CHECKPOINT_ATTR, storage_file

STORE_ATTR = "detol:checkpoint_store"


def beside_storage(storage_url: str) -> Path:
    """The directory of a journal or SQLite storage file, else the working directory: where
    detol keeps what belongs to the storage's studies (checkpoints, failed trials' logs)."""
    path = storage_file(storage_url)
    return Path(path).expanduser().resolve().parent if path else Path.cwd()


def artifact_directory(storage_url: str) -> Path:
    """The default checkpoint store, one for every study of the storage (artifact ids are
    UUIDs): ``detol-artifacts`` beside it. ``search dashboard`` serves it."""
    return beside_storage(storage_url) / "detol-artifacts"


def resolved(store: str) -> str:
    """A directory as an absolute path (workers and later runs may start elsewhere); a bucket
    URL as it is."""
    return store if "://" in store else str(Path(store).expanduser().resolve())


def recorded_store(study: optuna.Study) -> str | None:
    """The store the study's checkpoints are in: its attribute, else (a study of an older
    detol) the store its newest checkpointing trial names; None before any was fixed."""
    store = study.user_attrs.get(STORE_ATTR)
    if isinstance(store, str) and store:
        return store
    for t in reversed(study.get_trials(deepcopy=False)):
        checkpoint = t.user_attrs.get(CHECKPOINT_ATTR)
        if isinstance(checkpoint, dict) and checkpoint.get("store"):
            return str(checkpoint["store"])
    return None


def check_store(study: optuna.Study, sf: Any) -> None:
    """StudyError when ``sf`` names a checkpoint store other than the one the study recorded
    (a move is not done for the user: the paused trials' checkpoints stay where they are)."""
    wanted = sf.checkpoints.store
    have = recorded_store(study)
    if wanted is None or have is None or resolved(wanted) == have:
        return
    raise StudyError(
        "checkpoints.store",
        f"study {sf.name!r} keeps its checkpoints in {have} (fixed when it first wrote one), "
        f"not {resolved(wanted)}: leave store out, or set it to {have}",
    )


def fix_store(study: optuna.Study, sf: Any, storage_url: str) -> str | None:
    """The study's checkpoint store, recorded now if this is the first run that checkpoints
    (the study file's, else the default beside the storage); None when trials do not
    checkpoint and none was recorded. Checks ``sf`` first (:func:`check_store`)."""
    check_store(study, sf)
    have = recorded_store(study)
    if have is None and sf.checkpointing:
        have = resolved(sf.checkpoints.store or str(artifact_directory(storage_url)))
    if have is not None and study.user_attrs.get(STORE_ATTR) != have:
        study.set_user_attr(STORE_ATTR, have)
    return have
