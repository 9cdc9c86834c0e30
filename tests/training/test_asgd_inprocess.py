"""The ASGD class's exchange in one process (issue 33: only mpiexec jobs drove it, and a mutant
of the class lives only in the test's own process): on COMM_SELF a rank made its own peer puts
into its own window, so sending, reading, the gate and the blend run here and are compared with
the reference formulas (``asgd_update``, ``parzen_gate``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mpi4py import MPI

from training.algorithms._asgd import ASGD, asgd_update, parzen_gate

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def _asgd(n: int = 6, lr: float = 0.1, send_every: int = 1) -> ASGD:
    torch.manual_seed(0)
    model = torch.nn.Linear(n - 1, 1)  # n parameters
    algo = ASGD(model, MPI.COMM_SELF, lr=lr, send_every=send_every, seed=3)
    algo.peers = [0]  # its own peer: puts go into its own window
    algo._received = {0: np.zeros(algo.n, np.float32)}  # noqa: SLF001
    return algo


def test_a_sent_state_is_read_once_and_a_torn_one_is_rejected() -> None:
    algo = _asgd()
    try:
        state = np.arange(algo.n, dtype=np.float32)
        algo._send_state(state)  # noqa: SLF001
        algo.win.Flush(0)
        (got,) = algo._receive()  # noqa: SLF001
        np.testing.assert_array_equal(got, state)
        assert algo._receive() == []  # noqa: SLF001  read already
        algo._send_state(state + 1)  # noqa: SLF001
        algo.win.Flush(0)
        algo.slots[0].state[0] += 5.0  # a write that overlapped the read
        assert algo._receive() == []  # noqa: SLF001
        assert algo.counters() == {"sent": 2, "received": 1, "accepted": 0, "rejected": 0,
                                   "torn": 1}
    finally:
        algo.win.Unlock_all()
        algo.win.Free()


@pytest.mark.parametrize("seed", range(4))
def test_the_in_place_blend_is_the_reference_update(seed: int) -> None:
    algo = _asgd(n=8, lr=0.3)
    try:
        rng = np.random.default_rng(seed)
        w_old = rng.normal(size=algo.n).astype(np.float32)
        w_new = (w_old + 0.2 * rng.normal(size=algo.n)).astype(np.float32)
        # some candidates the step moves towards, some it moves away from
        candidates = [(w_old + s * (w_new - w_old) * k + 0.05 * rng.normal(size=algo.n))
                      .astype(np.float32) for s, k in ((1, 3), (-1, 2), (1, 5), (-1, 1))]
        # three quarters of the step ahead: accepted (the gate's 2 d.(w_old - w_j) term)
        candidates.append(w_old + np.float32(0.75) * (w_new - w_old))
        algo._w_old[:] = w_old  # noqa: SLF001
        algo._candidates = candidates  # noqa: SLF001
        w = w_new.copy()
        accepted = algo._blend(w)  # noqa: SLF001
        gate = [parzen_gate(w_old, w_new, c) for c in candidates]
        assert accepted == sum(gate) and 0 < accepted < len(candidates)
        expected = asgd_update(w_old, w_new, [c for c, g in zip(candidates, gate, strict=True)
                                              if g], 0.3)
        np.testing.assert_allclose(w, expected, rtol=1e-5, atol=1e-6)
    finally:
        algo.win.Unlock_all()
        algo.win.Free()


def test_steps_send_every_k_and_blend_what_arrived() -> None:
    algo = _asgd(send_every=2)
    try:
        w = algo._weights()  # noqa: SLF001  the parameters themselves (CPU)
        algo.before_step(False)
        algo.after_step()
        assert algo.counters()["sent"] == 0
        algo.before_step(False)
        algo.after_step()
        assert algo.counters()["sent"] == 1 and algo.steps == 2  # sent after step 2
        algo.win.Flush(0)
        assert algo.before_step(False) is True
        assert len(algo._candidates) == 1  # noqa: SLF001  its own state of step 2
        w -= 1.0  # the local step moves away from it: rejected
        algo.after_step()  # step 3 does not send
        assert algo.counters()["rejected"] == 1 and algo.counters()["sent"] == 1
        saved = algo.state_dict()
        other = _asgd(send_every=2)
        try:
            other.load_state_dict(saved)
            assert other.steps == 3 and other.counters() == algo.counters()
            assert other.rng.integers(1 << 30) == algo.rng.integers(1 << 30)
        finally:
            other.win.Unlock_all()
            other.win.Free()
    finally:
        algo.win.Unlock_all()
        algo.win.Free()


def test_a_lone_rank_has_no_peer_and_steps_without_messages() -> None:
    algo = ASGD(torch.nn.Linear(2, 1), MPI.COMM_SELF, lr=0.1)
    try:
        assert algo.peers == []
        assert algo.before_step(True) is True
        algo.after_step()
        assert algo.steps == 1 and algo.counters()["sent"] == 0
    finally:
        algo.win.Unlock_all()
        algo.win.Free()
