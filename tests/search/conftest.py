"""A throwaway PostgreSQL server (initdb + pg_ctl) and one-node SLURM and Grid Engine, started by
the tests themselves."""

from __future__ import annotations

import contextlib
import os
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


def _batch_system(script: str, probe: str, install: str,
                  env: dict[str, str] | None = None) -> Iterator[None]:
    """A real one-node batch system: the one running here, else one started by ``.ci/SCRIPT``
    (root), stopped again at the end of the session. ``probe`` is a client command it needs."""
    if not shutil.which(probe):
        pytest.fail(f"{probe} not found: {install} (the README's test command installs it)")
    argv = ["bash", str(REPO / ".ci" / script)]
    running = subprocess.run([*argv, "status"], capture_output=True, timeout=60,
                             env=env).returncode == 0
    if not running:
        started = subprocess.run([*argv, "start"], capture_output=True, text=True, timeout=600,
                                 env=env)
        if started.returncode != 0:
            pytest.fail(f".ci/{script} start failed: {started.stderr.strip()[-2000:]}")
    try:
        yield
    finally:
        if not running:
            subprocess.run([*argv, "stop"], capture_output=True, timeout=120, env=env)


@pytest.fixture(scope="session")
def slurm() -> Iterator[None]:
    """A real one-node SLURM (``.ci/slurm.sh``)."""
    yield from _batch_system("slurm.sh", "sinfo", "Debian: apt-get install slurmctld slurmd "
                             "slurm-client munge; -m 'not slurm' leaves these tests out")


@pytest.fixture(scope="session")
def sge() -> Iterator[None]:
    """A real one-node Grid Engine cell (``.ci/sge.sh``)."""
    yield from _batch_system("sge.sh", "qstat", "Debian: apt-get install gridengine-master "
                             "gridengine-exec gridengine-client; -m 'not sge' leaves these tests "
                             "out")


NODES_CONF = "/etc/detol-nodes/slurm.conf"  # .ci/nodes.sh's SLURM (clients: SLURM_CONF)


@pytest.fixture(scope="session")
def nodes() -> Iterator[None]:
    """A real 3-node SLURM cluster of network namespaces (``.ci/nodes.sh``)."""
    yield from _batch_system("nodes.sh", "sinfo", "Debian: apt-get install slurmctld slurmd "
                             "slurm-client munge nftables; -m 'not multinode' leaves these "
                             "tests out", env={**os.environ, "SLURM_CONF": NODES_CONF})


@pytest.fixture
def nodes_env(nodes: None) -> dict[str, str]:
    """The environment of a client of the namespace cluster (its ``SLURM_CONF``)."""
    return {**os.environ, "SLURM_CONF": NODES_CONF}
