"""Opening a study for the commands that read one: status, best, report, dashboard, export."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from search._errors import StudyError

DEFAULT_STORAGE = "detol.journal"  # training.contract's, without importing Optuna for --help

if TYPE_CHECKING:
    import optuna


def quiet_optuna() -> None:
    """Optuna's own log lines and experimental-feature warnings stay out of the command's output."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def default_storage(storage: str | None, from_file: str | None = None) -> str:
    """``--storage``, else ``$DETOL_STORAGE``, else the study file's, else ``detol.journal``."""
    return storage or os.environ.get("DETOL_STORAGE") or from_file or DEFAULT_STORAGE


def open_url(url: str) -> optuna.storages.BaseStorage:
    from training.contract import open_storage

    try:
        return open_storage(url)
    except ValueError as exc:
        raise StudyError("storage", str(exc)) from None


def reading(url: str) -> str:
    """``url`` for commands that only read: a journal file must already exist (never create one)."""
    from training.contract import journal_path

    path = journal_path(url)
    if path and not Path(path).is_file():
        hint = " (pass --storage or set DETOL_STORAGE)" if url == DEFAULT_STORAGE else ""
        raise StudyError("storage", f"no journal file {path!r}{hint}")
    return url


def load(study: str, storage: str | None) -> tuple[optuna.Study, str]:
    """STUDY is a study name, or a study file whose name and storage are used."""
    import optuna

    from search.studyfile._study_file import load_study_file
    from training.contract import redact

    quiet_optuna()
    name, from_file = study, None
    if study.endswith(".toml") or Path(study).is_file():
        sf = load_study_file(study)
        name, from_file = sf.name, sf.storage
    url = reading(default_storage(storage, from_file))  # reading never creates a journal file
    storage_obj = open_url(url)
    try:
        return optuna.load_study(study_name=name, storage=storage_obj), url
    except KeyError:
        known = optuna.get_all_study_names(storage_obj)
        raise StudyError("study", f"no study {name!r} in {redact(url)} (found: "
                         f"{', '.join(known) or 'none'})") from None


def writable(path: Path) -> Path:
    if path.is_dir():
        raise StudyError("output", f"cannot write {path}: it is a directory")
    if not path.parent.is_dir():
        raise StudyError("output", f"cannot write {path}: directory {str(path.parent)!r} does not "
                         "exist")
    if not os.access(path.parent, os.W_OK):
        raise StudyError("output", f"cannot write {path}: directory {str(path.parent)!r} is not "
                         "writable")
    return path


def beside_storage(url: str, filename: str) -> Path:
    """Where a command writes by default: beside the storage file (a journal or SQLite file),
    else in the working directory, never somewhere the user did not ask for."""
    from training.contract import storage_file

    path = storage_file(url)
    return Path(path).expanduser().parent / filename if path else Path(filename)
