"""The PMI relay a rank puts between MPICH and SLURM's pmi2 (training/jobs/_mpi_start.py): every
line passes whole and unchanged, in one write each, but the server's ``vallen_max``, which SLURM
22.05 announces as 1024 while it reads only 1024 bytes of a request. The real thing, across two
nodes with a rank whose business card is dense, is tests/search/test_multinode.py."""

from __future__ import annotations

import socket
import threading

import pytest

from training.jobs._mpi_start import RELAY_VALLEN, SLURM_READ, announced, relay

pytestmark = pytest.mark.unit


def _lines(sock: socket.socket, count: int) -> list[bytes]:
    data = b""
    while data.count(b"\n") < count:
        data += sock.recv(65536)
    return data.split(b"\n")[:count]


def test_lines_pass_both_ways_and_only_the_maxes_answer_changes() -> None:
    mpich, relay_client = socket.socketpair()
    relay_server, slurm = socket.socketpair()
    thread = threading.Thread(target=relay, args=(relay_client, relay_server), daemon=True)
    thread.start()
    mpich.sendall(b"cmd=init pmi_version=1 pmi_subversion=1\n")
    assert _lines(slurm, 1) == [b"cmd=init pmi_version=1 pmi_subversion=1"]
    slurm.sendall(b"cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n")
    assert _lines(mpich, 1) == [b"cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1"]
    mpich.sendall(b"cmd=get_maxes\n")
    assert _lines(slurm, 1) == [b"cmd=get_maxes"]
    slurm.sendall(b"cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n")
    assert _lines(mpich, 1) == [
        f"cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max={RELAY_VALLEN}".encode()]
    # A line that reaches the relay in pieces leaves it in one piece.
    put = b"cmd=put kvsname=12.0 key=-allgather-1-0-seg-1/9 value=" + b"AB" * 400
    mpich.sendall(put[:100])
    mpich.sendall(put[100:] + b"\n")
    got = slurm.recv(65536)
    assert got == put + b"\n"
    mpich.close()  # the rank exits: the relay ends
    thread.join(5)
    assert not thread.is_alive()


def test_a_put_of_the_announced_length_fits_slurms_read() -> None:
    # MPICH cuts a value into segments of (vallen_max - 2) / 2 bytes, hex-encoded: at worst
    # vallen_max - 2 characters; the rest of the line is the command, a key and SLURM's kvsname.
    key = "-allgather-99-9999-seg-99/99"
    line = f"cmd=put kvsname={'4294967294.4294967294'} key={key} value={'F' * (RELAY_VALLEN - 2)}\n"
    assert len(line.encode()) <= SLURM_READ
    assert announced(b"cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=512").endswith(
        b"vallen_max=512")  # a smaller announcement stands


def test_a_pmi2_wire_client_has_its_bytes_passed_as_they_come() -> None:
    # PMI-2's wire protocol (a 6-character length, then the command; no newline), as Open MPI
    # speaks it under srun --mpi=pmi2: nothing to rewrite, nothing to wait for.
    mpich, relay_client = socket.socketpair()
    relay_server, slurm = socket.socketpair()
    thread = threading.Thread(target=relay, args=(relay_client, relay_server), daemon=True)
    thread.start()
    for sock in (mpich, slurm):
        sock.settimeout(10)  # a relay that waits for a newline never passes it on
    request = b"    48cmd=fullinit;pmijobid=12.0;pmirank=0;threaded=FALSE;"
    mpich.sendall(request)
    assert slurm.recv(65536) == request
    answer = b"    56cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;"
    slurm.sendall(answer)
    assert mpich.recv(65536) == answer
    slurm.close()
    thread.join(5)
    assert not thread.is_alive()
