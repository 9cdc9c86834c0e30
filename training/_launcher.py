"""The launcher line of an MPI job: ``"mpiexec -n {ranks}"`` -> an argv, and the job's environment.

Shared by the cold path (:mod:`training.launch`) and the warm pools (:mod:`training._warm_pool`);
it imports neither, so neither imports the other through it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import Any

DEFAULT_LAUNCHER = "mpiexec -n {ranks}"
# A job whose ranks all run on one machine: UCX (the mpich wheel's and Open MPI's fast path)
# over shared memory and loopback only, so the ranks open no port on the machine's network;
# DETOL_SINGLE_NODE also swaps Hydra for MPICH's gforker (see :func:`launcher_argv`).
SINGLE_NODE_ENV = {"UCX_TLS": "self,sm", "UCX_NET_DEVICES": "lo", "DETOL_SINGLE_NODE": "1"}
_HYDRA = ("mpiexec", "mpirun", "mpiexec.hydra")
_TAIL = 3000


class LauncherNotFound(ValueError):
    """The launcher program is not on this machine (or the launcher line is empty)."""


def resolve_program(name: str) -> str:
    """Absolute path of the launcher program, preferring the one installed beside this Python
    (the ``mpich`` wheel puts ``mpiexec`` there, matching the installed mpi4py)."""
    here = os.path.dirname(sys.executable)
    path = os.pathsep.join([here, os.environ.get("PATH", "")])
    found = shutil.which(name, path=path)
    if found is None:
        raise LauncherNotFound(
            f"launcher program {name!r} not found (install the MPICH wheel with "
            "'pip install mpich', or set [launcher] command to your MPI's launcher)"
        )
    return found


def launcher_argv(
    command: str | Sequence[str], ranks: int, env: Mapping[str, str] | None = None
) -> list[str]:
    """``"mpiexec -n {ranks}"`` -> ``["/venv/bin/mpiexec", "-n", "2"]``.

    For a single-node job (``env`` from :data:`SINGLE_NODE_ENV`) whose line is the mpich wheel's
    plain ``mpiexec -n N``: its ``mpiexec.gforker`` instead. Hydra's control port always listens
    on 0.0.0.0 (``-iface lo``, ``-localhost 127.0.0.1`` and ``HYDRA_IFACE`` change only the
    address it hands out); gforker forks the ranks and talks PMI over inherited pipes, so a
    local study opens no port beyond loopback (issue 27)."""
    parts = shlex.split(command) if isinstance(command, str) else list(command)
    if not parts:
        raise LauncherNotFound("launcher command is empty")
    argv = [p.replace("{ranks}", str(ranks)) for p in parts]
    argv[0] = resolve_program(argv[0])
    if (env or {}).get("DETOL_SINGLE_NODE") == "1":
        argv[0] = _forker(argv)
    return argv


def _forker(argv: list[str]) -> str:
    """The gforker beside the wheel's Hydra ``mpiexec`` when ``argv`` is just ``-n N``."""
    program = argv[0]
    gforker = os.path.join(os.path.dirname(program), "mpiexec.gforker")
    plain = len(argv) == 3 and argv[1] in ("-n", "-np") and argv[2].isdigit()
    hydra = os.path.basename(program) in _HYDRA and os.path.exists(
        os.path.join(os.path.dirname(program), "hydra_pmi_proxy"))
    return gforker if plain and hydra and os.access(gforker, os.X_OK) else program


def job_env(
    threads_per_rank: int, async_progress: bool, extra: Mapping[str, str]
) -> dict[str, str]:
    """The MPI job's environment: this process's, one torch thread count, ``[launcher] env``.

    MPI is initialised at thread level ``funneled`` (only the main thread calls MPI, which is
    all the trainer does): mpi4py's default ``multiple`` makes every MPI call take a lock, and
    with the mpich wheel an RMA ``Flush`` then took ~700 us of wall time on a loaded machine
    against ~6 us. An MPICH progress thread (``async_progress``) needs ``multiple``.
    ``[launcher] env`` may set ``MPI4PY_RC_THREAD_LEVEL`` itself.
    """
    env = {**os.environ, "OMP_NUM_THREADS": str(threads_per_rank), **extra}
    env.setdefault("PYTHONUNBUFFERED", "1")
    if async_progress:
        env.setdefault("MPIR_CVAR_ASYNC_PROGRESS", "1")
    if "MPI4PY_RC_THREAD_LEVEL" not in extra:
        env["MPI4PY_RC_THREAD_LEVEL"] = "multiple" if async_progress else "funneled"
    return env


LOG_LIMIT = 1_000_000  # characters of a failed job's output kept for its log file
_ERROR_LINE = re.compile(
    r"^(?:\[rank (\d+)\] )?([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))\b(.*)$"
)


def first_error(output: str) -> str:
    """The first Python exception line in an MPI job's output, with the rank that raised it:
    ``"[rank 1] ModuleNotFoundError: No module named 'x'"`` (empty when there is none)."""
    rank = ""
    for line in output.splitlines():
        if line.startswith("[rank ") and "Traceback" in line:
            rank = line.split("]", 1)[0] + "] "
            continue
        match = _ERROR_LINE.match(line.strip())
        if match:
            where = f"[rank {match.group(1)}] " if match.group(1) else rank
            return f"{where}{match.group(2)}{match.group(3)}".strip()
    return ""


def failed_job(code: int, output: str, error: str = "") -> dict[str, Any]:
    """The result of a job that ended without writing one: the real error first (``error``, else
    the first one in the output), then the tail of its output, and the whole output (capped) for
    the trial's log file."""
    error = error or first_error(output)
    head = f"MPI job exited with code {code}" + (f": {error}" if error else "")
    return {"state": "failed", "exit_reason": f"{head}\n{tail(output)}",
            "log": output[-LOG_LIMIT:]}


def tail(text: str) -> str:
    """The last few thousand characters of a job's output (for ``exit_reason``)."""
    text = text.strip()
    return text if len(text) <= _TAIL else "..." + text[-_TAIL:]
