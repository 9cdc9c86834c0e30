"""Storage URLs -> Optuna storages. Shared by the driver and by rank 0 of every trial.

A URL with a database scheme (``sqlite:///``, ``postgresql://``, ``mysql://`` ...) is an
``RDBStorage``; ``journal:///path`` or a bare file path is a ``JournalStorage`` on a
``JournalFileBackend`` -- the embedded default, safe for many processes on one machine.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
import stat
import tempfile
import threading
import time
import types
from collections.abc import Callable, Container
from typing import Any

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.trial import FrozenTrial, TrialState

from training.storage._journal import JournalDamaged, SafeJournalFileBackend, scan

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


def storage_file(url: str) -> str | None:
    """The file a journal or SQLite URL keeps its study in (None for a server database)."""
    path = journal_path(url)
    if path is None and url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :].split("?", 1)[0]
    return path if path and path != ":memory:" else None


STAT_TIMEOUT_S = 10.0  # a path whose filesystem does not answer (a hung NFS mount) is refused


def _answer_within(what: str, fn: Any, timeout: float = STAT_TIMEOUT_S) -> Any:
    """``fn()``, in a daemon thread: a call into a filesystem that never answers (a hard NFS
    mount whose server is gone) becomes a ValueError after ``timeout`` instead of a hang."""
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise ValueError(f"{what}: its filesystem did not answer in {timeout:g} s "
                         "(an unreachable network filesystem?)")
    if "error" in box:
        raise box["error"]
    return box.get("value")


_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}
SQLITE_MAGIC = b"SQLite format 3\x00"
_A_FILE = {"journal": "a journal file", "sqlite": "an SQLite file"}


def check_storage_file(path: str, kind: str) -> bool:
    """ValueError (one line) unless ``path`` can hold a ``kind`` ("journal" or "sqlite")
    storage: an existing regular file of that format, or a new file in a writable directory. True
    when the file exists. Reads at most the first line; writes nothing (a new file's directory is
    probed with a file created and removed at once)."""
    path = os.path.expanduser(path)

    def look() -> bool:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return False
        if not stat.S_ISREG(st.st_mode):
            what = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
            raise ValueError(f"{path!r} is {what}, not {_A_FILE[kind]}")
        if st.st_size == 0:
            return True
        with open(path, "rb") as f:
            head = f.readline(1 << 16)
        if kind == "sqlite" and not head.startswith(SQLITE_MAGIC):
            raise ValueError(f"{path!r} is not an SQLite database (another file's name?)")
        if kind == "journal" and not _journal_record(head):
            raise ValueError(f"{path!r} is not an Optuna journal: its first line is not a journal "
                             "record (another file's name? an SQLite file needs 'sqlite:///')")
        if not os.access(path, os.W_OK):
            raise ValueError(f"{path!r} is not writable")
        return True

    def probe(parent: str) -> None:
        if not os.path.isdir(parent):
            raise ValueError(f"directory {parent!r} for {_A_FILE[kind]} does not exist")
        try:  # os.access says yes to root on a filesystem that refuses files (/proc, read-only)
            fd, probe_path = tempfile.mkstemp(prefix=".detol-probe-", dir=parent)
        except OSError as exc:
            raise ValueError(f"cannot create files in {parent!r}: {exc.strerror}") from None
        os.close(fd)
        os.unlink(probe_path)

    if _answer_within(repr(path), look):
        return True
    _answer_within(repr(path), lambda: probe(os.path.dirname(os.path.abspath(path))))
    return False


def _journal_record(line: bytes) -> bool:
    if line.startswith(b'{"op_code"'):  # Optuna writes op_code first (a torn first line, too)
        return True
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and "op_code" in record


def open_storage(url: str, *, retry_seconds: float = 0.0) -> BaseStorage:
    """Open (and for a database, connect to) the storage named by ``url``.

    Raises ``ValueError`` with a one-line reason when it cannot be used. Inside a running study
    (a trial's rank 0, a function objective's reporter) pass ``retry_seconds`` so that a
    database that is briefly away is waited for, with back-off, instead of failing the trial.
    """
    deadline = time.monotonic() + retry_seconds
    delay = 0.25
    while True:
        try:
            return _open_storage(url)
        except _Unreachable as exc:
            if time.monotonic() + delay > deadline:
                raise ValueError(str(exc)) from None
            log.warning("%s; retrying in %.2g s", exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 8.0)


class _Unreachable(ValueError):
    """The database did not answer (worth another try)."""


def _open_storage(url: str) -> BaseStorage:
    path = journal_path(url)
    if path is not None:
        if not path:
            raise ValueError("journal storage needs a file path, e.g. 'journal:///tmp/x.journal'")
        check_storage_file(path, "journal")
        return _journal_storage(path)
    scheme = url.split(":", 1)[0].split("+", 1)[0]
    sqlite_file = storage_file(url) if scheme == "sqlite" else None
    if sqlite_file:
        try:
            check_storage_file(sqlite_file, "sqlite")
        except ValueError as exc:
            raise ValueError(f"cannot use {redact(url)}: {exc}") from None
    if scheme == "postgres":
        raise ValueError("use 'postgresql://' (SQLAlchemy does not accept 'postgres://')")
    if scheme not in _RDB_SCHEMES:
        raise ValueError(
            f"unsupported storage URL scheme {scheme!r} (use a journal file path, "
            f"'journal:///path', or one of {list(_RDB_SCHEMES[:4])}...)"
        )
    try:
        rdb = _rdb_storage(url, scheme)
    except ImportError as exc:  # Optuna re-raises a missing driver as a plain ImportError
        name = getattr(exc.__cause__, "name", None) or exc.name or str(exc)
        hint = " (pip install 'detol[postgres]')" if scheme == "postgresql" else ""
        raise ValueError(f"database driver {name!r} is not installed{hint}") from None
    except Exception as exc:  # SQLAlchemy's OperationalError and friends: one line, no password
        cause: BaseException = exc.__cause__ or exc
        reason = str(getattr(cause, "orig", None) or cause).strip().splitlines()[0]
        kind = _Unreachable if _transient(exc) else ValueError
        raise kind(f"cannot connect to {redact(url)}: {reason}") from None
    if scheme == "sqlite":
        return rdb
    # A database server may restart or fail over during a long study: ride it out.
    # Its methods are filled in below the class, which mypy cannot see.
    return RetryingStorage(  # type: ignore[abstract]
        optuna.storages.get_storage(rdb), what=redact(url)
    )


def _journal_storage(path: str) -> JournalStorage:
    """A journal whose torn tail is mended before its first write
    (:mod:`training.storage._journal`);
    damage that is not a tail is one line (``JournalDamaged``) and the file is left as it is."""
    backend = SafeJournalFileBackend(path)
    try:
        return JournalStorage(backend)
    except (ValueError, KeyError):  # Optuna's reader raises once a bad line has a line after it
        scan(path)  # JournalDamaged when a good record follows the bad one
    backend.mend()  # only bad lines at the end: a tail after all
    try:
        return JournalStorage(SafeJournalFileBackend(path))
    except (ValueError, KeyError) as exc:
        raise JournalDamaged(f"journal {path!r} cannot be read: {exc!r}") from None


SCHEMA_TRIES = 6  # 0.1 + 0.2 + ... + 1.6 s of back-off in all


def _rdb_storage(url: str, scheme: str) -> RDBStorage:
    """Optuna's ``RDBStorage``, whose first opening of an empty database makes the tables.

    Two processes opening the same new database at once (two drivers started together, found
    by the crash soak) both issue ``CREATE TABLE``: the later fails with ``duplicate key value
    violates unique constraint "pg_type_typname_nsp_index"`` or ``relation ... already exists``,
    and ``search run`` stopped with "cannot connect". The tables are there once the first
    commits, so a duplicate object is tried again, with back-off."""
    for attempt in range(SCHEMA_TRIES):
        try:
            return RDBStorage(url, engine_kwargs=_engine_kwargs(scheme))
        except Exception as exc:
            if not schema_race(exc) or attempt + 1 == SCHEMA_TRIES:
                raise
            time.sleep(0.1 * 2**attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def schema_race(exc: BaseException) -> bool:
    """Whether ``exc`` is a table (or its type) that another process made first."""
    cause = str(getattr(exc.__cause__ or exc, "orig", None) or exc.__cause__ or exc)
    return "already exists" in cause or "duplicate key value" in cause


def _engine_kwargs(scheme: str) -> dict[str, object]:
    if scheme == "sqlite":
        return {"connect_args": {"timeout": 60}}
    if scheme == "postgresql":
        return {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}
    return {"pool_pre_ping": True}


log = logging.getLogger("detol.storage")
RETRY_SECONDS = float(os.environ.get("DETOL_STORAGE_RETRY_S", "300"))


def _transient(exc: BaseException) -> bool:
    """True for a lost or refused database connection (worth retrying), not for bad requests."""
    from sqlalchemy import exc as sa

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, sa.DBAPIError) and seen.connection_invalidated:
            return True
        if isinstance(seen, sa.OperationalError | sa.InterfaceError | sa.DisconnectionError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class RetryingStorage(BaseStorage):
    """A storage whose calls are retried with exponential back-off while the database is away.

    Every ``BaseStorage`` method goes through :meth:`_call`: a transient connection error is
    retried after 0.25, 0.5, 1, ... 8 s until ``retry_seconds`` have passed, then raised. A
    finishing call (``set_trial_state_values``) that reached the database before the connection
    dropped is recognised on the retry, so a completed result is never told twice or lost.
    """

    def __init__(
        self, inner: BaseStorage, *, what: str = "storage", retry_seconds: float | None = None
    ) -> None:
        self._inner = inner
        self._what = what
        self._retry_seconds = RETRY_SECONDS if retry_seconds is None else retry_seconds
        self.retries = 0

    def __getattr__(self, name: str) -> Any:  # e.g. RDBStorage.engine, url
        return getattr(self._inner, name)

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._call_on(self._inner, name, *args, **kwargs)

    def _call_on(self, target: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        method: Callable[..., Any] = getattr(target, name)
        deadline = time.monotonic() + self._retry_seconds
        delay = 0.25
        attempt = 0
        while True:
            attempt += 1
            try:
                return method(*args, **kwargs)
            except optuna.exceptions.UpdateFinishedTrialError:
                if attempt > 1 and name == "set_trial_state_values":
                    return True  # the first attempt committed before the connection dropped
                raise
            except Exception as exc:
                if not _transient(exc) or time.monotonic() + delay > deadline:
                    raise
                self.retries += 1
                log.warning(
                    "%s unavailable during %s (%s); retrying in %.2g s",
                    self._what,
                    name,
                    str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200],
                    delay,
                )
                time.sleep(delay)
                delay = min(delay * 2, 8.0)


def retrying_call(storage: BaseStorage, what: str, fn: Callable[[], Any]) -> Any:
    """``fn()``: work beside Optuna's own calls on ``storage``'s database (the driver's budget
    lock), retried as those calls are when ``storage`` is a :class:`RetryingStorage` (``what``
    names it in the warning); called once otherwise."""
    if isinstance(storage, RetryingStorage):
        return storage._call_on(types.SimpleNamespace(**{what: fn}), what)  # noqa: SLF001
    return fn()


def transient_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a lost or refused database connection (not a bad request)."""
    return _transient(exc)


def _retrying(name: str) -> Callable[..., Any]:
    def method(self: RetryingStorage, *args: Any, **kwargs: Any) -> Any:
        return self._call(name, *args, **kwargs)

    method.__name__ = name
    return method


for _name, _ in inspect.getmembers(BaseStorage, inspect.isfunction):
    if not _name.startswith("_"):
        setattr(RetryingStorage, _name, _retrying(_name))
RetryingStorage.__abstractmethods__ = frozenset()

_WAITING_ONLY = (TrialState.WAITING,)


def _get_all_trials(
    self: RetryingStorage,
    study_id: int,
    deepcopy: bool = True,
    states: Container[TrialState] | None = None,
) -> list[FrozenTrial]:
    """As the wrapped storage's, but the queue of WAITING trials (``Study.ask`` looks at it on
    every call) is read from the database alone: Optuna's cache would first re-read every
    RUNNING trial in full, a cost that grows with the trials running (issue 18)."""
    backend = getattr(self._inner, "_backend", None)
    if backend is not None and isinstance(states, tuple) and states == _WAITING_ONLY:
        return self._call_on(backend, "get_all_trials", study_id, deepcopy=deepcopy,
                             states=states)
    return self._call("get_all_trials", study_id, deepcopy=deepcopy, states=states)


RetryingStorage.get_all_trials = _get_all_trials  # type: ignore[method-assign]


def load_study(study_name: str, url: str) -> optuna.Study:
    """Load an existing study (no sampler work: reporting processes only report)."""
    return optuna.load_study(
        study_name=study_name,
        storage=open_storage(url, retry_seconds=RETRY_SECONDS),
        sampler=optuna.samplers.RandomSampler()
    )
