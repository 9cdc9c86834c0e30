"""ASGD (Keuper & Pfreundt, MLHPC 2015): asynchronous SGD that exchanges *states* one-sidedly.

Every rank steps on its own mini-batches, never waiting for another. Every ``send_every`` steps
it writes its parameter vector into its own slot of a random peer's window (MPI-3 RMA). Before
an update a rank reads the slots that changed and blends each external state ``w_j`` that the
Parzen-window gate accepts::

    delta = 1 if ||(w_i - eps*g) - w_j||^2 < ||w_i - w_j||^2 else 0
    w_i <- w_i - eps * (delta * (w_i - (w_i + w_j) / 2) + g)

Window: allocated once, one slot per sender, so writers never collide. A slot is
``[seq, state..., seq]``; the writer updates it front to back (ordered accumulates), the reader
back to front, so a slot whose two sequence numbers differ was read mid-write and is rejected
(a seqlock). One ``Lock_all`` for the whole run, never a lock per message.
"""

from __future__ import annotations

import numpy as np
import torch
from mpi4py import MPI

from training._algorithm import (
    Algorithm,
    average_parameters,
    flat_parameters,
    set_flat_parameters,
)

EMPTY, OLD, TORN, NEW = "empty", "old", "torn", "new"


def read_slot(slot: np.ndarray, last_seen: float) -> tuple[str, np.ndarray | None, float]:
    """Read one ``[seq, state..., seq]`` slot: (status, a copy of the state if NEW, seq)."""
    end = float(slot[-1])  # read the closing number first ...
    if end == 0.0:
        return EMPTY, None, 0.0
    if end <= last_seen:
        return OLD, None, end
    state = slot[1:-1].copy()
    begin = float(slot[0])  # ... and the opening one last: equal means no write overlapped
    if begin != end:
        return TORN, None, end
    return NEW, state, end


def parzen_gate(w_old: np.ndarray, w_new: np.ndarray, w_ext: np.ndarray) -> bool:
    """Accept ``w_ext`` when the local step moves towards it: the paper's delta(i, j)."""
    return float(np.sum((w_new - w_ext) ** 2)) < float(np.sum((w_old - w_ext) ** 2))


def asgd_update(w_old: np.ndarray, w_new: np.ndarray, accepted: list[np.ndarray],
                eps: float) -> np.ndarray:
    """``w_new = w_old - eps*g`` (the local step) pulled towards the mean of ``w_old`` and the
    accepted states; with one state this is ``w_i - eps*((w_i - (w_i + w_j)/2) + g)``."""
    if not accepted:
        return w_new
    mix = (w_old + np.sum(accepted, axis=0)) / (1 + len(accepted))
    return w_new - eps * (w_old - mix)


class ASGD(Algorithm):
    name = "asgd"

    def __init__(self, model: torch.nn.Module, comm: MPI.Comm, *, lr: float,
                 send_every: int = 1, seed: int = 0, **_: object) -> None:
        super().__init__(model, comm)
        self.eps = lr
        self.send_every = send_every
        self.n = sum(p.numel() for p in model.parameters())
        self.slot = self.n + 2
        self.rng = np.random.default_rng([seed, comm.rank, 7])
        self.peers = [r for r in range(comm.size) if r != comm.rank]
        self.win = MPI.Win.Allocate(comm.size * self.slot * 8, disp_unit=8, comm=comm)
        self.buf = np.frombuffer(memoryview(self.win), dtype=np.float64)
        self.buf[:] = 0.0
        comm.Barrier()  # waits for all ranks: every window is zeroed before anyone writes
        self.win.Lock_all(MPI.MODE_NOCHECK)  # one epoch of passive-target access for the run
        self.seq = 0.0
        self.last_seen = np.zeros(comm.size)
        self.steps = 0
        self.stats = dict.fromkeys(("sent", "received", "accepted", "rejected", "torn"), 0)
        self._candidates: list[np.ndarray] = []
        self._w_old: np.ndarray | None = None
        self._pending: int | None = None  # peer of the message not yet completed
        self._seq_buf = np.zeros(1)  # send buffers stay untouched until their Flush
        self._state_buf = np.zeros(self.n)
        self.comm_seconds = 0.0

    def _receive(self) -> list[np.ndarray]:
        self.win.Sync()  # make remote writes to our own window visible to local loads
        states = []
        for j in self.peers:
            status, state, seq = read_slot(self.buf[j * self.slot : (j + 1) * self.slot],
                                           self.last_seen[j])
            if status == TORN:
                self.stats["torn"] += 1
            elif status == NEW:
                self.stats["received"] += 1
                self.last_seen[j] = seq
                states.append(state)
        return states

    def _send(self) -> None:
        """Write our state into our slot at a random peer. The previous message is completed
        first (one ``Flush``), not this one: a busy target makes little RMA progress until it
        next enters MPI, so waiting on the message just sent would stall us for its step."""
        if self._pending is not None:
            self.win.Flush(self._pending)  # completes the previous message at its target
        peer = int(self.peers[self.rng.integers(len(self.peers))])
        self.seq += 1.0
        self._seq_buf[0] = self.seq
        self._state_buf[:] = flat_parameters(self.model)
        disp = self.comm.rank * self.slot
        # Accumulate with REPLACE keeps the order of the three writes (MPI accumulate ordering),
        # so a reader that sees equal sequence numbers at both ends sees a whole state.
        self.win.Accumulate(self._seq_buf, peer, target=(disp, 1, MPI.DOUBLE), op=MPI.REPLACE)
        self.win.Accumulate(self._state_buf, peer, target=(disp + 1, self.n, MPI.DOUBLE),
                            op=MPI.REPLACE)
        self.win.Accumulate(self._seq_buf, peer, target=(disp + 1 + self.n, 1, MPI.DOUBLE),
                            op=MPI.REPLACE)
        self._pending = peer
        self.stats["sent"] += 1

    def before_step(self, last_in_epoch: bool) -> bool:
        if self.peers:
            t = MPI.Wtime()
            self._candidates = self._receive()
            self.comm_seconds += MPI.Wtime() - t
            self._w_old = flat_parameters(self.model) if self._candidates else None
        return True

    def after_step(self) -> None:
        self.steps += 1
        if not self.peers:
            return
        t = MPI.Wtime()
        if self._candidates and self._w_old is not None:
            w_new = flat_parameters(self.model)
            accepted = [w for w in self._candidates if parzen_gate(self._w_old, w_new, w)]
            self.stats["accepted"] += len(accepted)
            self.stats["rejected"] += len(self._candidates) - len(accepted)
            if accepted:
                set_flat_parameters(self.model,
                                    asgd_update(self._w_old, w_new, accepted, self.eps))
            self._candidates = []
        if self.steps % self.send_every == 0:
            self._send()
        self.comm_seconds += MPI.Wtime() - t

    def finish(self) -> None:
        self.win.Unlock_all()  # completes the last message
        self.comm.Barrier()  # waits for all ranks: nobody writes into a freed window
        self.win.Free()
        set_flat_parameters(self.model, average_parameters(self.model, self.comm))

    def counters(self) -> dict[str, int]:
        return dict(self.stats)
