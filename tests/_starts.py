"""The unit tier's promise, kept by the test run itself: a test marked ``unit`` starts no process
(``subprocess``, ``fork``, ``multiprocessing``, hence no ``mpiexec``, PostgreSQL, SLURM or Dask
worker process) and no server (nothing listens on a socket: no Dask scheduler, not even an
in-process one). :func:`install` wraps those calls for the whole run (``tests/conftest.py``);
while a unit test is set up, runs or is torn down, each raises :class:`StartedSomething`.

``DETOL_RECORD_STARTS=PATH`` instead appends ``test id<TAB>what`` to PATH for every start, in any
test (unit or not), and lets it happen: how the unit marks were first chosen (docs/testing.md).
"""

from __future__ import annotations

import multiprocessing.util
import os
import socket
import subprocess
from collections.abc import Callable
from typing import Any


class StartedSomething(RuntimeError):
    """A unit test tried to start a process or a server."""


class _State:
    unit: str | None = None  # the node id of the unit test now in setup, call or teardown
    record: str | None = os.environ.get("DETOL_RECORD_STARTS")


def _guarded(what: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        if _State.record:
            test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
            with open(_State.record, "a") as f:
                f.write(f"{test}\t{what}\n")
        elif _State.unit is not None:
            raise StartedSomething(
                f"{_State.unit} is marked unit but starts {what}: a unit test starts no process "
                "or server (mark it by what it starts, e.g. mpi, or not unit)"
            )
        return original(*args, **kwargs)

    return call


_TARGETS: list[tuple[Any, str, str]] = [
    (subprocess.Popen, "_execute_child", "a subprocess"),
    (os, "fork", "a fork"),
    (os, "forkpty", "a fork"),
    (os, "posix_spawn", "a process (posix_spawn)"),
    (os, "posix_spawnp", "a process (posix_spawnp)"),
    (os, "system", "a shell (os.system)"),
    (multiprocessing.util, "spawnv_passfds", "a multiprocessing process"),
    (socket.socket, "listen", "a server (a listening socket)"),
]


def install() -> None:
    """Wrap every way to start a process or a server, once per run."""
    for owner, name, what in _TARGETS:
        original = getattr(owner, name, None)
        if original is not None and not getattr(original, "_detol_guard", False):
            wrapped = _guarded(what, original)
            wrapped._detol_guard = True  # type: ignore[attr-defined]
            setattr(owner, name, wrapped)


def entering(nodeid: str | None) -> None:
    """The unit test ``nodeid`` begins (None: a test that may start things)."""
    _State.unit = nodeid
