"""MPI_Init for a rank of ours, the one place it happens (``worker`` and ``warm_worker``).

Under ``srun --mpi=pmi2`` a rank of the ``mpich`` wheel publishes its UCX business card through
PMI-1 ``put`` lines: 4096 bytes (the address, then whatever memory follows it), hex-encoded in
segments sized from the ``vallen_max`` SLURM announces (1024: 511 bytes a segment, runs of zero
bytes shortened). SLURM 22.05's pmi2 plugin reads one PMI-1 request with a single 1024-byte
``read`` ("TODO: read until newline"), so a segment of dense bytes makes a line over 1024 bytes
that it cuts in two: "mpi/pmi2: value not properly terminated in client request", and the ranks
fail in MPI_Init or wait there for ever. What memory follows the address decides it, so one
program failed on every launch (CI: 9 of 9 two-node launches).

Here a rank started by SLURM's pmi2 talks PMI through a relay (a forked process holding the real
PMI socket) that passes every line unchanged but announces a smaller ``vallen_max``: MPICH then
cuts the card into shorter segments and every request fits SLURM's read, whatever the bytes.
"""

from __future__ import annotations

import os
import re
import select
import signal
import socket
from typing import Any

from training.launch._line import _death_signal

SLURM_READ = 1024  # bytes of one PMI-1 request SLURM 22.05's pmi2 plugin reads at once
# What the relay announces: a put line is "cmd=put kvsname=K key=Y value=V\n", 29 bytes besides
# K (SLURM's "JOBID.STEPID"), Y (at most keylen_max, 64) and V; 768 leaves 160 for K.
RELAY_VALLEN = 768
_MAXES = re.compile(rb"\bvallen_max=(\d+)")


def announced(line: bytes) -> bytes:
    """A PMI-1 line from the server as the relay passes it on: ``cmd=maxes`` with
    ``vallen_max`` at most :data:`RELAY_VALLEN`, anything else unchanged.

    >>> announced(b"cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024")
    b'cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=768'
    >>> announced(b"cmd=barrier_out")
    b'cmd=barrier_out'
    """
    if not line.startswith(b"cmd=maxes"):
        return line
    return _MAXES.sub(lambda m: b"vallen_max=%d" % min(int(m.group(1)), RELAY_VALLEN), line)


def relay(client: socket.socket, server: socket.socket) -> None:
    """Pass PMI-1 lines both ways until either side closes, each line in one write (SLURM
    reads one request a ``read``); the server's ``maxes`` answer through :func:`announced`.
    A client that does not open with PMI-1's ``cmd=init`` (PMI-2's wire protocol: length
    headers, no newlines) has its bytes passed as they come."""
    peer = {client: server, server: client}
    pending = {client: b"", server: b""}
    lines_mode: bool | None = None
    while True:
        ready, _, _ = select.select([client, server], [], [])
        for side in ready:
            data = side.recv(65536)
            if not data:
                return
            if lines_mode is None and side is client:
                lines_mode = (pending[side] + data).startswith(b"cmd=init")
            if not lines_mode:
                peer[side].sendall(data)
                continue
            *lines, pending[side] = (pending[side] + data).split(b"\n")
            for line in lines:
                peer[side].sendall((announced(line) if side is server else line) + b"\n")


def interpose_pmi() -> bool:
    """Put :func:`relay` between this process and SLURM's pmi2 (``PMI_FD``); whether it did
    (only under ``srun --mpi=pmi2``). The relay is a child that ends with this process."""
    fd = os.environ.get("PMI_FD", "")
    if os.environ.get("SLURM_MPI_TYPE") != "pmi2" or not fd.isdigit():
        return False
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the relay: the real PMI socket and one end of the pair
        code = 0
        try:
            _death_signal(signal.SIGKILL)  # the relay ends with its rank
            ours.close()
            relay(theirs, socket.socket(fileno=int(fd)))
        except BaseException:  # noqa: BLE001 - the rank sees its PMI socket close
            code = 1
        os._exit(code)
    os.dup2(ours.fileno(), int(fd))  # MPICH finds the relay's end where it looks: PMI_FD
    ours.close()
    theirs.close()
    return True


def start_mpi() -> Any:
    """Import mpi4py's ``MPI`` (which calls MPI_Init), through the PMI relay under SLURM's pmi2;
    the module."""
    interpose_pmi()
    from mpi4py import MPI

    return MPI
