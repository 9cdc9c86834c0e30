"""A throwaway PostgreSQL server (initdb + pg_ctl on a free port), for the tests' fixture and
the benchmarks alike: ``with throwaway_postgres() as server: server.url``."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

PASSWORD = "pg-secret-123"


class PostgresMissing(RuntimeError):
    """PostgreSQL's server programs are not installed here."""


def pg_bin(name: str) -> str:
    """The path of PostgreSQL's ``name`` program; PostgresMissing when it is not installed."""
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                                                  reverse=True)), None)
    if not found:
        raise PostgresMissing(f"PostgreSQL's {name} is not installed (Debian: apt-get install "
                              "postgresql); .ci/run installs it on a fresh machine")
    return found


def free_port() -> int:
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

    def running(self) -> bool:
        """Whether the server is up (it stops itself, e.g. on a full disk)."""
        return subprocess.run([*self._pg_ctl, "status"], capture_output=True,
                              timeout=60).returncode == 0


@contextlib.contextmanager
def throwaway_postgres(
    max_connections: int = 200, *, directory: Path | None = None, options: str = "",
    host: str = "127.0.0.1",
) -> Iterator[PostgresServer]:
    """A fresh server; its URL is ``postgresql://detol:PASSWORD@HOST:PORT/detol``. Stopped
    and deleted on exit. PostgresMissing (before anything is made) when it is not installed.
    ``directory``: where its files go (default: a new temporary directory); ``options``: more
    ``postgres`` command-line options; ``host``: the address it listens on (another than
    127.0.0.1, e.g. the namespace cluster's login address: clients on its subnet may connect)."""
    bins = {name: pg_bin(name) for name in ("initdb", "pg_ctl", "createdb")}
    # Not under pytest's basetemp: that is private to root, and the server runs as 'postgres'.
    root = Path(tempfile.mkdtemp(prefix="detol-pg-", dir=directory))
    data = root / "data"
    run_as: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        run_as = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
        os.chmod(root, 0o700)
    pwfile = root / "pw"
    pwfile.write_text(PASSWORD + "\n")
    if run_as:
        shutil.chown(pwfile, "postgres")
    port = free_port()
    try:
        subprocess.run([*run_as, bins["initdb"], "-D", str(data), "-U", "detol",
                        "--auth=scram-sha-256", f"--pwfile={pwfile}", "--no-sync"],
                       check=True, capture_output=True, text=True, timeout=120)
        if host != "127.0.0.1":  # the nodes on host's subnet, with the password
            with open(data / "pg_hba.conf", "a") as hba:
                hba.write("host all all samenet scram-sha-256\n")
        pg_ctl = [*run_as, bins["pg_ctl"], "-D", str(data), "-l", str(root / "log"), "-o",
                  f"-p {port} -k {root} -c listen_addresses={host} -c fsync=off "
                  f"-c max_connections={max_connections} {options}"]
        server = PostgresServer(f"postgresql://detol:{PASSWORD}@{host}:{port}/detol", pg_ctl)
        server.start()
        try:
            env = {**os.environ, "PGPASSWORD": PASSWORD}
            subprocess.run([bins["createdb"], "-h", host, "-p", str(port), "-U", "detol",
                            "detol"], check=True, env=env, capture_output=True, timeout=60)
            yield server
        finally:
            with contextlib.suppress(subprocess.SubprocessError):
                server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
