"""ASGD (Keuper & Pfreundt, MLHPC 2015): asynchronous SGD that exchanges *states* one-sidedly.

Every rank steps on its own mini-batches, never waiting for another. Every ``send_every`` steps
it writes its parameter vector into its own slot of a random peer's window (MPI-3 RMA). Before
an update a rank reads the slots that changed and blends each external state ``w_j`` that the
Parzen-window gate accepts (the paper's rule, eq. 6-7)::

    delta = 1 if ||(w_i - eps*g) - w_j||^2 < ||w_i - w_j||^2 else 0
    w_i <- w_i - eps * (delta * (w_i - (w_i + w_j) / 2) + g)

Two choices the paper leaves open, made here:

- **Several accepted states.** The paper blends one external state per update. When a rank
  finds m > 1 new states accepted by the gate, each judged on its own against the same step,
  it pulls towards the mean of its own state and all m of them:
  ``w_i <- (w_i - eps*g) - eps * (w_i - (w_i + w_1 + ... + w_m) / (m + 1))``; with m = 1 this
  is exactly the paper's rule.
- **eps with momentum or Adam.** The paper's local step is plain SGD with step size eps. Here
  the local step is whatever the optimizer does (``w_i - eps*g`` becomes the optimizer's
  update), and the blend is applied to the weights after it with eps = the learning rate
  ``lr``, outside the optimizer's state: momentum does not accumulate the pull and Adam does
  not rescale it. With momentum 0 this is the paper's update to the bit; with Adam (lr
  usually ~100x smaller than SGD's) the pull is proportionally gentler.

Cost: the parameters are views into one flat float32 buffer (rebound once, at start), so the
weights are read and blended in place; a send is one copy into the send buffer and one ``Put``;
a read is one copy out of the window into a buffer kept for that peer. No temporaries per step.

Window: allocated once, one slot per sender, so writers never collide. A slot is
``[seq, checksum | state (float32) | seq]``, written with one ``Put``. MPI does not order the
bytes of a put, so a reader accepts a slot only if both sequence numbers agree *and* the state's
checksum matches; anything else was read mid-write and is rejected as ``torn``. One
``Lock_all`` for the whole run, never a lock per message; each message is completed (``Flush``)
when the next one is sent, so a sender never waits for a busy target.

MPI runs at thread level ``funneled`` for training jobs (see ``training.launch._line.job_env``):
at mpi4py's default ``multiple`` every MPI call takes a lock, and a ``Flush`` of the mpich wheel
was seen at ~700 us instead of ~6 us on a loaded machine. ``mpi_async_progress`` asks for
``multiple``, which MPICH's progress thread needs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from mpi4py import MPI

from training.algorithms._base import Algorithm, average_parameters, set_flat_parameters

EMPTY, OLD, TORN, NEW = "empty", "old", "torn", "new"
_HEAD = 16  # bytes: sequence number, checksum (int64 each)
_TAIL = 8  # bytes: sequence number again
_MASK = 2**63 - 1


def checksum(state: np.ndarray) -> int:
    """Exact, order-independent sum of the float32 bit patterns, two at a time as int64 words
    (wrapping), mod 2**63: a torn read mixes old and new words and changes the sum. One pass,
    no widening copy (4x cheaper than summing uint32 into uint64)."""
    words = state.view(np.uint32)
    even = len(words) - len(words) % 2
    total = int(np.add.reduce(words[:even].view(np.int64))) if even else 0
    if even < len(words):
        total += int(words[-1])
    return total & _MASK


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


def read_slot(
    slot: Slot, last_seen: int, out: np.ndarray | None = None
) -> tuple[str, np.ndarray | None, int]:
    """(status, the state if NEW, seq). Reads the trailer first and the header last. The state
    is copied (into ``out`` when given): the window may change under it."""
    end = int(slot.tail[0])
    if end == 0:
        return EMPTY, None, 0
    if end <= last_seen:
        return OLD, None, end
    if out is None:
        state = slot.state.copy()
    else:
        np.copyto(out, slot.state)
        state = out
    begin, stored = (int(v) for v in slot.head)
    if begin != end or stored != checksum(state):
        return TORN, None, end
    return NEW, state, end


def parzen_gate(w_old: np.ndarray, w_new: np.ndarray, w_ext: np.ndarray) -> bool:
    """Accept ``w_ext`` when the local step moves towards it: the paper's delta(i, j),
    ``||w_new - w_ext||^2 < ||w_old - w_ext||^2``. (The trainer evaluates the same inequality
    as ``d.d + 2 d.(w_old - w_ext) < 0`` with ``d = w_new - w_old``, in preallocated buffers.)"""
    return float(np.sum((w_new - w_ext) ** 2)) < float(np.sum((w_old - w_ext) ** 2))


def asgd_update(
    w_old: np.ndarray, w_new: np.ndarray, accepted: list[np.ndarray], eps: float
) -> np.ndarray:
    """``w_new = w_old - eps*g`` (the local step) pulled towards the mean of ``w_old`` and the
    accepted states; with one state this is ``w_i - eps*((w_i - (w_i + w_j)/2) + g)``. The
    reference form of what :class:`ASGD` does in place."""
    if not accepted:
        return w_new
    mix = (w_old + np.sum(accepted, axis=0)) / (1 + len(accepted))
    return w_new - eps * (w_old - mix)


@torch.no_grad()
def flatten_parameters(model: torch.nn.Module) -> torch.Tensor:
    """Rebind every parameter of ``model`` as a view into one new contiguous float32 buffer
    (values unchanged) and return the buffer. Make optimizers after this."""
    params = list(model.parameters())
    if any(p.dtype != torch.float32 for p in params):
        raise ValueError("asgd: every parameter must be float32 (states are sent as float32)")
    device = params[0].device if params else torch.device("cpu")
    flat = torch.zeros(sum(p.numel() for p in params), dtype=torch.float32, device=device)
    offset = 0
    for p in params:
        view = flat[offset : offset + p.numel()].view_as(p)
        view.copy_(p)
        p.data = view
        offset += p.numel()
    return flat


class ASGD(Algorithm):
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
        self.flat = flatten_parameters(model)
        self.n = self.flat.numel()
        # On CPU the host vector *is* the parameters; on a GPU it is a copy, written back.
        self._host = self.flat.numpy() if self.flat.device.type == "cpu" else None
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
        self._received = {j: np.zeros(self.n, np.float32) for j in self.peers}
        self._candidates: list[np.ndarray] = []
        self._w_old = np.zeros(self.n, np.float32)
        self._step = np.zeros(self.n, np.float32)  # d = w_new - w_old
        self._away = np.zeros(self.n, np.float32)  # w_old - w_j
        self._pull = np.zeros(self.n, np.float32)  # sum of (w_old - w_j) over accepted j
        self._pending: int | None = None  # peer of the message not yet completed
        self._send_raw = np.zeros(self.slot, np.uint8)  # untouched until its Flush
        self._send = Slot(self._send_raw, self.n)
        self.comm_seconds = 0.0

    def _weights(self) -> np.ndarray:
        return self._host if self._host is not None else self.flat.cpu().numpy()

    def _store(self, weights: np.ndarray) -> None:
        if self._host is None:
            self.flat.copy_(torch.from_numpy(weights))

    def broadcast_parameters(self, root: int = 0) -> None:
        weights = self._weights()
        self.comm.Bcast(weights, root=root)  # waits for root
        self._store(weights)

    def _receive(self) -> list[np.ndarray]:
        self.win.Sync()  # make remote writes to our own window visible to local loads
        states = []
        for j in self.peers:
            status, state, seq = read_slot(self.slots[j], self.last_seen[j], self._received[j])
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

    def _blend(self, w: np.ndarray) -> int:
        """Gate every candidate against this step and pull ``w`` (in place) towards the
        accepted ones; returns how many were accepted."""
        d, away, pull = self._step, self._away, self._pull
        np.subtract(w, self._w_old, out=d)
        dd = float(np.dot(d, d))
        accepted = 0
        for ext in self._candidates:
            np.subtract(self._w_old, ext, out=away)
            # ||w_new - w_j||^2 < ||w_old - w_j||^2  <=>  d.d + 2 d.(w_old - w_j) < 0
            if dd + 2.0 * float(np.dot(d, away)) < 0.0:
                if accepted == 0:
                    np.copyto(pull, away)
                else:
                    pull += away
                accepted += 1
        if accepted:
            # w_old - mean(w_old, accepted...) = sum(w_old - w_j) / (m + 1)
            pull *= self.eps / (1 + accepted)
            w -= pull
        return accepted

    def before_step(self, last_in_epoch: bool) -> bool:
        if self.peers:
            t = MPI.Wtime()
            self._candidates = self._receive()
            if self._candidates:
                np.copyto(self._w_old, self._weights())
            self.comm_seconds += MPI.Wtime() - t
        return True

    def after_step(self) -> None:
        self.steps += 1
        if not self.peers:
            return
        sending = self.steps % self.send_every == 0
        if not (self._candidates or sending):
            return
        t = MPI.Wtime()
        w = self._weights()
        if self._candidates:
            accepted = self._blend(w)
            self.stats["accepted"] += accepted
            self.stats["rejected"] += len(self._candidates) - accepted
            if accepted:
                self._store(w)
            self._candidates = []
        if sending:
            self._send_state(w)
        self.comm_seconds += MPI.Wtime() - t

    def finish(self) -> None:
        self.release()
        set_flat_parameters(self.model, average_parameters(self.model, self.comm))

    def release(self) -> None:
        self.win.Unlock_all()  # completes the last message
        self.comm.Barrier()  # waits for all ranks: nobody writes into a freed window
        self.win.Free()

    def counters(self) -> dict[str, int]:
        return dict(self.stats)

    def state_dict(self) -> dict[str, Any]:
        # The window's slots are not saved: a resumed job starts with empty slots and fresh
        # sequence numbers (a state in flight at the checkpoint is simply not received).
        return {"steps": self.steps, "stats": dict(self.stats), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = int(state["steps"])
        self.stats.update({k: int(v) for k, v in state["stats"].items()})
        self.rng.bit_generator.state = state["rng"]
