"""A rank whose peer on the same node is gone ends itself, so that its MPI job ends.

A launcher ends the whole job when one of its ranks dies; our trial's failure comes from that.
Hydra (the ``mpich`` wheel's ``mpiexec``) notices a rank that exits through the rank's PMI socket
closing, and once in 43 tries here (and once in CI, 2026-12-03) it did not: the dead
rank's peers waited in a collective until the trial's timeout (120 s), and the trial failed for
its timeout instead of for the rank that died. Here every rank watches the other ranks of its
job on its own node (same host name and PID namespace; each known by pid and start time, so a
reused pid is no peer) and, when one has been gone for two checks in a row, exits hard: the
launcher then sees this rank go too, or all of a node's ranks gone, and ends the job. Ranks on
other nodes are their own node's watchers' and their launcher's (``srun --kill-on-bad-exit``).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from training.launch._line import started

CHECK_S = 0.5  # seconds between two looks at the peers
GONE_EXIT = 72  # a rank's exit code when a peer on its node vanished (70: the Dask worker did)


def _node() -> str:
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = "?"
    return f"{socket.gethostname()}|{namespace}"


def node_peers(
    everyone: list[tuple[str, int, str | None]], rank: int
) -> list[tuple[int, int, str]]:
    """``(rank, pid, start)`` of the ranks that share ``rank``'s node, from every rank's
    ``(node, pid, start)`` (start ``None``: cannot be watched).

    >>> node_peers([("a", 10, "5"), ("a", 11, "6"), ("b", 10, "7")], 0)
    [(1, 11, '6')]
    """
    node = everyone[rank][0]
    return [(r, pid, start) for r, (where, pid, start) in enumerate(everyone)
            if where == node and r != rank and start is not None]


def watch_node_peers(comm: Any) -> threading.Event:
    """Start watching this rank's node peers in ``comm`` (a collective: every rank calls it);
    set the returned event before a rank may end normally, so that its peers' ends are no alarm."""
    me = os.getpid()
    everyone = comm.allgather((_node(), me, started(me)))
    peers = node_peers(everyone, comm.rank) if everyone[comm.rank][2] is not None else []
    stop = threading.Event()
    if peers:
        threading.Thread(target=_watch, args=(peers, comm.rank, stop), daemon=True,
                         name="detol-peers").start()
    return stop


def _watch(peers: list[tuple[int, int, str]], rank: int, stop: threading.Event,
           check_s: float = CHECK_S, leave: Callable[[int], Any] = os._exit) -> None:
    missing: set[int] = set()
    while not stop.wait(check_s):
        gone = {peer for peer, pid, start in peers if started(pid) != start}
        if gone & missing and not stop.is_set():  # gone two looks in a row: not a normal end
            peer = min(gone & missing)
            pid = next(p for r, p, _ in peers if r == peer)
            print(f"[rank {rank}] detol: rank {peer} (pid {pid}) of this MPI job on this node "
                  f"is gone; rank {rank} exits so that the job ends", file=sys.stderr, flush=True)
            leave(GONE_EXIT)
            return
        missing = gone
