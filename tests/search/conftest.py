"""A throwaway PostgreSQL server, started by the tests themselves (initdb + pg_ctl)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def _pg_bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                                                  reverse=True)), None)
    if not found:
        pytest.fail(f"PostgreSQL's {name} is not installed (Debian: apt-get install postgresql); "
                    ".ci/run installs it on a fresh machine")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """A running throwaway server: ``url`` to connect, ``restart()`` to take it away briefly."""

    def __init__(self, url: str, pg_ctl: list[str]) -> None:
        self.url = url
        self._pg_ctl = pg_ctl

    def stop(self) -> None:
        subprocess.run([*self._pg_ctl, "-m", "immediate", "-w", "stop"], check=True,
                       capture_output=True, timeout=120)

    def start(self) -> None:
        subprocess.run([*self._pg_ctl, "-w", "start"], check=True, capture_output=True,
                       timeout=120)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A fresh server; its URL is ``postgresql://detol:PASSWORD@127.0.0.1:PORT/detol``."""
    # Not under pytest's basetemp: that is private to root, and the server runs as 'postgres'.
    root = Path(tempfile.mkdtemp(prefix="detol-pg-"))
    data = root / "data"
    run_as: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        run_as = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
        os.chmod(root, 0o700)
    password = "pg-secret-123"
    pwfile = root / "pw"
    pwfile.write_text(password + "\n")
    if run_as:
        shutil.chown(pwfile, "postgres")
    port = _free_port()

    def pg(*argv: str) -> None:
        subprocess.run([*run_as, *argv], check=True, capture_output=True, text=True, timeout=120)

    pg(_pg_bin("initdb"), "-D", str(data), "-U", "detol", "--auth=scram-sha-256",
       f"--pwfile={pwfile}", "--no-sync")
    pg_ctl = [*run_as, _pg_bin("pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-o",
              f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
              "-c max_connections=200"]
    server = PostgresServer(f"postgresql://detol:{password}@127.0.0.1:{port}/detol", pg_ctl)
    server.start()
    try:
        env = {**os.environ, "PGPASSWORD": password}
        subprocess.run([_pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "detol",
                        "detol"], check=True, env=env, capture_output=True, timeout=60)
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


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
