"""ASGD (Keuper & Pfreundt, MLHPC 2015): asynchronous SGD that exchanges *states* one-sidedly.

Every rank steps on its own mini-batches, never waiting for another. Every ``send_every`` steps
it writes its parameter vector into its own slot of a random peer's window (MPI-3 RMA). Before
an update a rank reads the slots that changed and blends each external state ``w_j`` that the
Parzen-window gate accepts::

    delta = 1 if ||(w_i - eps*g) - w_j||^2 < ||w_i - w_j||^2 else 0
    w_i <- w_i - eps * (delta * (w_i - (w_i + w_j) / 2) + g)

Window: allocated once, one slot per sender, so writers never collide. A slot is
``[seq, checksum | state (float32) | seq]``, written with one ``Put``. MPI does not order the
bytes of a put, so a reader accepts a slot only if both sequence numbers agree *and* the state's
checksum matches; anything else was read mid-write and is rejected as ``torn``. One
``Lock_all`` for the whole run, never a lock per message; each message is completed (``Flush``)
when the next one is sent, so a sender never waits for a busy target.
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
_HEAD = 16  # bytes: sequence number, checksum (int64 each)
_TAIL = 8  # bytes: sequence number again


def checksum(state: np.ndarray) -> int:
    """Exact, order-independent sum of the float32 bit patterns (mod 2**63)."""
    return int(np.sum(state.view(np.uint32), dtype=np.uint64) & np.uint64(2**63 - 1))


def slot_bytes(n: int) -> int:
    return _HEAD + 4 * n + (4 * n) % 8 + _TAIL  # the trailer stays 8-byte aligned


class Slot:
    """Typed views of one slot's bytes (in a window or in a send buffer)."""

    def __init__(self, raw: np.ndarray, n: int) -> None:
        self.head = raw[:_HEAD].view(np.int64)  # [seq, checksum]
        self.state = raw[_HEAD : _HEAD + 4 * n].view(np.float32)
        self.tail = raw[len(raw) - _TAIL :].view(np.int64)  # [seq]

    def write(self, seq: int, state: np.ndarray) -> None:
        self.state[:] = state
        self.head[:] = (seq, checksum(self.state))
        self.tail[0] = seq


def read_slot(slot: Slot, last_seen: int) -> tuple[str, np.ndarray | None, int]:
    """(status, a copy of the state if NEW, seq). Reads the trailer first and the header last."""
    end = int(slot.tail[0])
    if end == 0:
        return EMPTY, None, 0
    if end <= last_seen:
        return OLD, None, end
    state = slot.state.copy()
    begin, stored = (int(v) for v in slot.head)
    if begin != end or stored != checksum(state):
        return TORN, None, end
    return NEW, state, end


def parzen_gate(w_old: np.ndarray, w_new: np.ndarray, w_ext: np.ndarray) -> bool:
    """Accept ``w_ext`` when the local step moves towards it: the paper's delta(i, j).

    ``||w_new - w_ext||^2 < ||w_old - w_ext||^2`` rewritten as one dot product, which is
    algebraically the same and needs no temporaries of squared norms.
    """
    return float(np.dot(w_new - w_old, w_new + w_old - 2 * w_ext)) < 0.0


def asgd_update(
    w_old: np.ndarray, w_new: np.ndarray, accepted: list[np.ndarray], eps: float
) -> np.ndarray:
    """``w_new = w_old - eps*g`` (the local step) pulled towards the mean of ``w_old`` and the
    accepted states; with one state this is ``w_i - eps*((w_i - (w_i + w_j)/2) + g)``."""
    if not accepted:
        return w_new
    mix = (w_old + np.sum(accepted, axis=0)) / (1 + len(accepted))
    return w_new - eps * (w_old - mix)


class ASGD(Algorithm):
    name = "asgd"

    def __init__(
        self,
        model: torch.nn.Module,
        comm: MPI.Comm,
        *,
        lr: float,
        send_every: int = 1,
        seed: int = 0,
        **_: object,
    ) -> None:
        super().__init__(model, comm)
        self.eps = lr
        self.send_every = send_every
        self.n = sum(p.numel() for p in model.parameters())
        self.slot = slot_bytes(self.n)
        self.rng = np.random.default_rng([seed, comm.rank, 7])
        self.peers = [r for r in range(comm.size) if r != comm.rank]
        self.win = MPI.Win.Allocate(comm.size * self.slot, disp_unit=1, comm=comm)  # type: ignore[arg-type]
        raw = np.frombuffer(memoryview(self.win), dtype=np.uint8)  # type: ignore[arg-type]
        raw[:] = 0
        self.slots = [
            Slot(raw[j * self.slot : (j + 1) * self.slot], self.n) for j in range(comm.size)
        ]
        comm.Barrier()  # waits for all ranks: every window is zeroed before anyone writes
        self.win.Lock_all(MPI.MODE_NOCHECK)  # one epoch of passive-target access for the run
        self.seq = 0
        self.last_seen = [0] * comm.size
        self.steps = 0
        self.stats = dict.fromkeys(("sent", "received", "accepted", "rejected", "torn"), 0)
        self._candidates: list[np.ndarray] = []
        self._w_old: np.ndarray | None = None
        self._pending: int | None = None  # peer of the message not yet completed
        self._send_raw = np.zeros(self.slot, np.uint8)  # untouched until its Flush
        self._send = Slot(self._send_raw, self.n)
        self.comm_seconds = 0.0

    def _receive(self) -> list[np.ndarray]:
        self.win.Sync()  # make remote writes to our own window visible to local loads
        states = []
        for j in self.peers:
            status, state, seq = read_slot(self.slots[j], self.last_seen[j])
            if status == TORN:
                self.stats["torn"] += 1
            elif status == NEW and state is not None:
                self.stats["received"] += 1
                self.last_seen[j] = seq
                states.append(state)
        return states

    def _send_state(self, state: np.ndarray) -> None:
        """Write ``state`` into our slot at a random peer. The previous message is completed
        first (one ``Flush``), not this one: a busy target makes little RMA progress until it
        next enters MPI, so waiting on the message just sent would stall us for its step."""
        if self._pending is not None:
            self.win.Flush(self._pending)  # completes the previous message at its target
        peer = int(self.peers[self.rng.integers(len(self.peers))])
        self.seq += 1
        self._send.write(self.seq, state)
        self.win.Put(self._send_raw, peer, target=(self.comm.rank * self.slot, self.slot, MPI.BYTE))
        self._pending = peer
        self.stats["sent"] += 1

    def before_step(self, last_in_epoch: bool) -> bool:
        if self.peers:
            t = MPI.Wtime()
            self._candidates = self._receive()
            if self._candidates:
                self._w_old = flat_parameters(self.model, np.float32)
            self.comm_seconds += MPI.Wtime() - t
        return True

    def after_step(self) -> None:
        self.steps += 1
        if not self.peers:
            return
        t = MPI.Wtime()
        sending = self.steps % self.send_every == 0
        w_new = flat_parameters(self.model, np.float32) if self._candidates or sending else None
        if self._candidates and self._w_old is not None and w_new is not None:
            accepted = [w for w in self._candidates if parzen_gate(self._w_old, w_new, w)]
            self.stats["accepted"] += len(accepted)
            self.stats["rejected"] += len(self._candidates) - len(accepted)
            if accepted:
                w_new = asgd_update(self._w_old, w_new, accepted, self.eps)
                set_flat_parameters(self.model, w_new)
            self._candidates = []
        if sending and w_new is not None:
            self._send_state(w_new)
        self.comm_seconds += MPI.Wtime() - t

    def finish(self) -> None:
        self.win.Unlock_all()  # completes the last message
        self.comm.Barrier()  # waits for all ranks: nobody writes into a freed window
        self.win.Free()
        set_flat_parameters(self.model, average_parameters(self.model, self.comm))

    def counters(self) -> dict[str, int]:
        return dict(self.stats)
