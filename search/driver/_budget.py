"""One budget, several drivers (issue 27): two `search run` processes on one study share
``budget.trials`` exactly.

A driver's own count (trials it finished and runs, plus those finished before it started) does
not see another driver's trials. So before it asks for a new configuration, a driver counts the
study's *live* configurations in the storage (complete, pruned or running; a promoted
continuation is not a new configuration) and asks only while they are fewer than the budget,
holding a lock that every driver of the study takes for that count and that ask: an asked trial
is RUNNING in the storage at once, so the next driver to take the lock counts it.

The lock: a file lock (``fcntl.flock``) beside a journal or SQLite file, so drivers on one machine
(or on hosts that share the file over a file system with working locks); PostgreSQL's
``pg_advisory_lock`` for a PostgreSQL storage. Other databases: no lock (a rare overshoot of a
trial or two when two drivers ask at the same instant). Taking the PostgreSQL lock while the
server is away waits for it, as every storage call does (``DETOL_STORAGE_RETRY_S``); a server
that restarts while a driver holds the lock ends the lock's session, and with it the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import zlib
from collections.abc import Iterator
from typing import Any

import optuna
from optuna.trial import TrialState

from search.pruners._promotion import RESUME_OF_ATTR
from training.contract import retrying_call, storage_file, transient_error

_LIVE = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)


def live_configurations(study: optuna.Study) -> int:
    """Configurations of ``study`` that count against ``budget.trials`` now, from every driver."""
    return sum(1 for t in study.get_trials(deepcopy=False, states=_LIVE)
               if RESUME_OF_ATTR not in t.user_attrs)


@contextlib.contextmanager
def budget_lock(study: optuna.Study, url: str) -> Iterator[None]:
    """Held by a driver while it counts live configurations and asks the next one."""
    path = storage_file(url)
    if path is not None:
        with open(f"{path}.budget-lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # waits for the other driver's count and ask
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
        return
    storage = study._storage  # noqa: SLF001 - RetryingStorage(_CachedStorage(RDBStorage))
    storage = getattr(storage, "_inner", storage)
    engine = getattr(getattr(storage, "_backend", storage), "engine", None)
    if engine is None or engine.dialect.name != "postgresql":
        yield
        return
    key = zlib.crc32(f"detol-budget:{study.study_name}".encode()) - 2**31
    from sqlalchemy import text

    def take() -> Any:  # a session lock, held by this connection until unlocked or closed
        conn = engine.connect()
        try:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
        except BaseException:
            with contextlib.suppress(Exception):
                conn.close()
            raise
        return conn

    # A server that is away (a restart, a failover) is waited for, as every storage call is.
    conn = retrying_call(study._storage, "the budget lock", take)  # noqa: SLF001
    try:
        yield
    finally:
        try:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
        except Exception as exc:
            if not transient_error(exc):
                raise
            # The connection died (the server restarted): its session's lock died with it.
        finally:
            with contextlib.suppress(Exception):
                conn.close()
