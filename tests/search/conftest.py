"""A throwaway PostgreSQL server, started by the tests themselves (initdb + pg_ctl)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg_server import PostgresMissing, PostgresServer, throwaway_postgres

__all__ = ["PostgresServer"]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A fresh server; its URL is ``postgresql://detol:PASSWORD@127.0.0.1:PORT/detol``."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(throwaway_postgres())
        except PostgresMissing as exc:
            pytest.fail(str(exc))
        yield server


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    return postgres_server.url


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def slurm() -> Iterator[None]:
    """A real one-node SLURM: the one running here, else one started by ``.ci/slurm.sh`` (root),
    stopped again at the end of the session."""
    if not shutil.which("sinfo"):
        pytest.fail("SLURM is not installed (Debian: apt-get install slurmctld slurmd "
                    "slurm-client munge; the README's test command installs it; -m 'not slurm' "
                    "leaves these tests out)")
    script = ["bash", str(REPO / ".ci" / "slurm.sh")]
    running = subprocess.run([*script, "status"], capture_output=True, timeout=60).returncode == 0
    if not running:
        started = subprocess.run([*script, "start"], capture_output=True, text=True, timeout=600)
        if started.returncode != 0:
            pytest.fail(f".ci/slurm.sh start failed: {started.stderr.strip()[-2000:]}")
    try:
        yield
    finally:
        if not running:
            subprocess.run([*script, "stop"], capture_output=True, timeout=120)
