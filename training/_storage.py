"""Storage URLs -> Optuna storages. Shared by the driver and by rank 0 of every trial.

A URL with a database scheme (``sqlite:///``, ``postgresql://``, ``mysql://`` ...) is an
``RDBStorage``; ``journal:///path`` or a bare file path is a ``JournalStorage`` on a
``JournalFileBackend`` -- the embedded default, safe for many processes on one machine.
"""

from __future__ import annotations

import os
import re

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend

DEFAULT_STORAGE = "detol.journal"
_RDB_SCHEMES = ("sqlite", "postgresql", "postgres", "mysql", "mariadb", "oracle", "mssql")


def redact(url: str) -> str:
    """The URL with any password replaced by ``***`` (safe to print or store)."""
    return re.sub(r"(://[^:/@]+:)[^@/]*@", r"\1***@", url)


def journal_path(url: str) -> str | None:
    """The file path if ``url`` names a journal file, else None."""
    if url.startswith("journal://"):
        return url[len("journal://") :]
    if "://" in url or url.split(":", 1)[0].split("+", 1)[0] in _RDB_SCHEMES:
        return None
    return url


def open_storage(url: str) -> BaseStorage:
    """Open (and for a database, connect to) the storage named by ``url``.

    Raises ``ValueError`` with a one-line reason when it cannot be used.
    """
    path = journal_path(url)
    if path is not None:
        if not path:
            raise ValueError("journal storage needs a file path, e.g. 'journal:///tmp/x.journal'")
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise ValueError(f"directory {parent!r} for journal file does not exist")
        return JournalStorage(JournalFileBackend(path))
    scheme = url.split(":", 1)[0].split("+", 1)[0]
    if scheme == "postgres":
        raise ValueError("use 'postgresql://' (SQLAlchemy does not accept 'postgres://')")
    if scheme not in _RDB_SCHEMES:
        raise ValueError(
            f"unsupported storage URL scheme {scheme!r} (use a journal file path, "
            f"'journal:///path', or one of {list(_RDB_SCHEMES[:4])}...)"
        )
    try:
        return RDBStorage(url, engine_kwargs=_engine_kwargs(scheme))
    except ImportError as exc:  # Optuna re-raises a missing driver as a plain ImportError
        name = getattr(exc.__cause__, "name", None) or exc.name or str(exc)
        hint = " (pip install 'detol[postgres]')" if scheme == "postgresql" else ""
        raise ValueError(f"database driver {name!r} is not installed{hint}") from None
    except Exception as exc:  # SQLAlchemy's OperationalError and friends: one line, no password
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise ValueError(f"cannot connect to {redact(url)}: {reason}") from None


def _engine_kwargs(scheme: str) -> dict[str, object]:
    if scheme == "sqlite":
        return {"connect_args": {"timeout": 60}}
    if scheme == "postgresql":
        return {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}
    return {"pool_pre_ping": True}


def load_study(study_name: str, url: str) -> optuna.Study:
    """Load an existing study (no sampler work: reporting processes only report)."""
    return optuna.load_study(
        study_name=study_name, storage=open_storage(url), sampler=optuna.samplers.RandomSampler()
    )
