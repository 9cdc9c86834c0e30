"""training/algorithms/_asgd.py's rules that its full mutant set found untested (issue 33): a slot's layout
(the trailer 8-byte aligned, no byte wasted), the parameters rebound as views of one buffer in
order, a refusal that says what is wrong, a lone rank that never times an exchange."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mpi4py import MPI

from training.algorithms._asgd import (
    ASGD,
    EMPTY,
    Slot,
    checksum,
    flatten_parameters,
    parzen_gate,
    read_slot,
    slot_bytes,
)

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8])
def test_a_slot_holds_header_state_and_an_aligned_trailer_in_the_fewest_bytes(n: int) -> None:
    size = slot_bytes(n)
    assert size % 8 == 0 and 0 <= size - (16 + 4 * n + 8) < 8
    raw = np.zeros(size, np.uint8)
    slot = Slot(raw, n)
    state = np.arange(1, n + 1, dtype=np.float32)
    slot.write(300, state)  # past one byte
    assert raw[:8].view(np.int64)[0] == 300 and raw[-8:].view(np.int64)[0] == 300
    np.testing.assert_array_equal(raw[16:16 + 4 * n].view(np.float32), state)


def test_parameters_become_views_of_one_buffer_in_their_order() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    before = [p.detach().clone() for p in model.parameters()]
    flat = flatten_parameters(model)
    assert flat.dtype == torch.float32 and flat.numel() == sum(p.numel() for p in before)
    torch.testing.assert_close(flat, torch.cat([p.reshape(-1) for p in before]))
    flat += 1.0  # the parameters are the buffer
    for p, old in zip(model.parameters(), before, strict=True):
        torch.testing.assert_close(p.detach(), old + 1.0)
    assert flatten_parameters(torch.nn.Sequential()).numel() == 0


def test_a_parameter_that_is_not_float32_is_refused_saying_so() -> None:
    with pytest.raises(ValueError) as info:
        flatten_parameters(torch.nn.Linear(2, 1).double())
    assert str(info.value) == (
        "asgd: every parameter must be float32 (states are sent as float32)")


def test_a_lone_rank_times_no_exchange_and_keeps_its_weights() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    algo = ASGD(model, MPI.COMM_SELF, lr=0.1, send_every=1)
    try:
        weights = algo.flat.clone()
        for _ in range(3):
            algo.before_step(False)
            algo.after_step()
        assert algo.comm_seconds == 0.0 and algo.steps == 3
        assert algo.counters() == dict.fromkeys(
            ("sent", "received", "accepted", "rejected", "torn"), 0)
        torch.testing.assert_close(algo.flat, weights)
        assert algo.n == 4 and algo.eps == 0.1 and algo.slot == slot_bytes(4)
    finally:
        algo.finish()
    torch.testing.assert_close(torch.cat([p.reshape(-1) for p in model.parameters()]), weights)


def _words_sum(state: np.ndarray) -> int:
    """The checksum by its definition: little-endian 64-bit words of two float32 bit patterns
    (signed, wrapping), plus a last odd pattern, mod 2**63."""
    raw = state.astype(np.float32).tobytes()
    total = 0
    for i in range(0, len(raw) - len(raw) % 8, 8):
        total += int.from_bytes(raw[i:i + 8], "little", signed=True)
    if len(raw) % 8:
        total += int.from_bytes(raw[-4:], "little")
    return total % 2**63


@pytest.mark.parametrize("values", [[1.0], [1.0, -2.0], [1.0, -2.0, 3.5], [], [7.25] * 5])
def test_the_checksum_is_the_sum_of_the_states_words(values: list[float]) -> None:
    state = np.array(values, np.float32)
    assert checksum(state) == _words_sum(state)


def test_an_empty_slot_reads_as_empty_with_sequence_zero() -> None:
    assert read_slot(Slot(np.zeros(slot_bytes(2), np.uint8), 2), 0) == (EMPTY, None, 0)


def test_a_step_that_does_not_move_accepts_nothing() -> None:
    w = np.array([1.0, 2.0], np.float32)
    assert not parzen_gate(w, w.copy(), np.array([3.0, 4.0], np.float32))


def test_by_default_a_rank_sends_its_state_after_every_step() -> None:
    algo = ASGD(torch.nn.Linear(2, 1), MPI.COMM_SELF, lr=0.1)
    algo.peers = [0]  # its own peer: puts go into its own window
    try:
        for steps in (1, 2):
            algo.after_step()
            assert algo.counters()["sent"] == steps
    finally:
        algo.win.Unlock_all()
        algo.win.Free()


def test_a_fresh_window_reads_empty_and_a_seed_fixes_the_peer_stream() -> None:
    model = torch.nn.Linear(2, 1)
    algos = [ASGD(model, MPI.COMM_SELF, lr=0.1, seed=s) for s in (4, 4, 5)]
    try:
        first = algos[0]
        first.peers = [0]
        first._received = {0: np.zeros(first.n, np.float32)}  # noqa: SLF001
        assert first._receive() == []  # noqa: SLF001  nothing sent: no torn read either
        assert first.counters()["torn"] == 0
        draws = [a.rng.integers(1 << 30, size=4).tolist() for a in algos]
        assert draws[0] == draws[1] != draws[2]  # reproducible for a seed, and seeded by it
    finally:
        for a in algos:
            a.win.Unlock_all()
            a.win.Free()


def _own_peer(n_in: int = 5) -> ASGD:
    torch.manual_seed(0)
    algo = ASGD(torch.nn.Linear(n_in, 1), MPI.COMM_SELF, lr=0.1, seed=3)
    algo.peers = [0]  # its own peer: puts go into its own window
    algo._received = {0: np.zeros(algo.n, np.float32)}  # noqa: SLF001
    return algo


def test_every_message_and_every_torn_read_is_counted() -> None:
    algo = _own_peer()
    try:
        for k in range(2):
            algo._send_state(np.full(algo.n, k, np.float32))  # noqa: SLF001
            algo.win.Flush(0)
            assert len(algo._receive()) == 1  # noqa: SLF001
        for k in range(2):
            algo._send_state(np.full(algo.n, 5 + k, np.float32))  # noqa: SLF001
            algo.win.Flush(0)
            algo.slots[0].state[0] += 1.0  # overlapped by a write
            assert algo._receive() == []  # noqa: SLF001
        assert algo.counters() == {"sent": 4, "received": 2, "accepted": 0, "rejected": 0,
                                   "torn": 2}
    finally:
        algo.win.Unlock_all()
        algo.win.Free()


@pytest.mark.parametrize(("ahead", "accepted"), [(0.4, 0), (0.6, 1), (1.0, 1), (2.5, 1),
                                                 (-1.0, 0)])
def test_the_gate_accepts_a_state_nearer_after_the_step_than_before(ahead: float,
                                                                    accepted: int) -> None:
    # w_j on the step's line, `ahead` steps from w_old: nearer to w_new than to w_old exactly
    # when |ahead - 1| < |ahead|, i.e. ahead > 1/2
    algo = _own_peer()
    try:
        w_old = np.linspace(-1, 1, algo.n).astype(np.float32)
        step = np.full(algo.n, 0.1, np.float32)
        w = w_old + step
        ext = (w_old + np.float32(ahead) * step).astype(np.float32)
        assert parzen_gate(w_old, w, ext) == bool(accepted)
        algo._w_old[:] = w_old  # noqa: SLF001
        algo._candidates = [ext]  # noqa: SLF001
        assert algo._blend(w) == accepted  # noqa: SLF001
        algo._candidates = [ext]  # noqa: SLF001
        still = w_old.copy()
        assert algo._blend(still) == 0  # noqa: SLF001  a step that does not move
    finally:
        algo.win.Unlock_all()
        algo.win.Free()


def test_broadcasting_from_rank_zero_keeps_a_lone_ranks_weights() -> None:
    algo = _own_peer()
    try:
        before = algo.flat.clone()
        algo.broadcast_parameters()
        torch.testing.assert_close(algo.flat, before)
    finally:
        algo.win.Unlock_all()
        algo.win.Free()


def test_steps_add_up_their_counts_and_exchange_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter(range(1000, 2000, 2))  # each timed stretch of the exchange takes 2 s
    monkeypatch.setattr(MPI, "Wtime", lambda: float(next(ticks)))
    algo = _own_peer()
    try:
        w = algo._weights()  # noqa: SLF001  the parameters themselves (CPU)
        for _ in range(2):
            algo._w_old[:] = w - 0.1  # noqa: SLF001  as if the step moved by +0.1 each
            algo._candidates = [w + 1.0, w - 5.0]  # noqa: SLF001  ahead: accepted; behind: not
            algo.after_step()
        assert (algo.counters()["accepted"], algo.counters()["rejected"]) == (2, 2)
        assert algo.comm_seconds == 2 * 2.0  # two after_step exchanges
        algo.win.Flush(0)
        assert algo.before_step(False) is True
        assert algo.comm_seconds == 3 * 2.0
        (sent,) = algo._candidates  # noqa: SLF001  what step 2 sent: its weights
        np.testing.assert_array_equal(sent, w)
    finally:
        algo.win.Unlock_all()
        algo.win.Free()
