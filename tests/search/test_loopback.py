"""A local study listens on loopback only (issue 27): every listening TCP socket held by the
driver, its Dask cluster, the MPI launcher and the ranks is on 127.0.0.0/8, read from
/proc/net/tcp and /proc/net/tcp6 while trials run (MPICH's Hydra included)."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_helpers import search_command

pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/net/tcp")]


def _listening() -> dict[int, tuple[str, int]]:
    """inode -> (address, port) of every listening TCP socket on this machine."""
    found: dict[int, tuple[str, int]] = {}
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            rows = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            field = row.split()
            if field[3] != "0A":  # TCP_LISTEN
                continue
            address, port = field[1].split(":")
            raw = bytes.fromhex(address)
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found[int(field[9])] = (socket.inet_ntop(family, words), int(port, 16))
    return found


def _tree(root: int) -> set[int]:
    """``root`` and all its descendants (from /proc/*/stat)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, ppid in parent.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    return tree


def _sockets_of(pids: set[int], listening: dict[int, tuple[str, int]]) -> dict[str, set]:
    """command name -> the listening (address, port) its processes hold (an empty set for a
    process that holds none)."""
    held: dict[str, set] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        held.setdefault(name, set())
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and int(link[8:-1]) in listening:
                held.setdefault(name, set()).add(listening[int(link[8:-1])])
    return held


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


@pytest.mark.parametrize("warm", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["cold", "warm-pool"])
def test_a_local_study_listens_on_loopback_only(tmp_path: Path, warm: bool) -> None:
    study = tmp_path / "study.toml"
    study.write_text(f"""\
name = "loop"
pruner = "none"
[strategy]
name = "random"
seed = 1
[budget]
trials = 1
[training]
dataset = "digits"
epochs = 3
ranks = 2
hidden = 16
[space]
lr = {{ type = "float", low = 0.01, high = 0.1, log = true }}
[launcher]
warm = {str(warm).lower()}
""")
    env = {k: v for k, v in os.environ.items() if k != "DETOL_STORAGE"}
    proc = subprocess.Popen([*search_command(), "run", str(study), "--storage",
                             str(tmp_path / "s.journal"), "--no-progress"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    seen: dict[str, set] = {}
    try:
        while proc.poll() is None:
            for name, held in _sockets_of(_tree(proc.pid), _listening()).items():
                seen.setdefault(name, set()).update(held)
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    output = proc.stdout.read() if proc.stdout else ""
    assert proc.returncode == 0, output
    assert any("mpiexec" in name for name in seen), f"no MPI job seen during the run: {seen}"
    outside = {name: sorted(a for a in held if not _loopback(a[0]))
               for name, held in seen.items()}
    assert not {k: v for k, v in outside.items() if v}, f"listening beyond loopback: {outside}"
