"""training/_asgd.py's rules that its full mutant set found untested (issue 33): a slot's layout
(the trailer 8-byte aligned, no byte wasted), the parameters rebound as views of one buffer in
order, a refusal that says what is wrong, a lone rank that never times an exchange."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mpi4py import MPI

from training._asgd import ASGD, Slot, flatten_parameters, slot_bytes


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8])
def test_a_slot_holds_header_state_and_an_aligned_trailer_in_the_fewest_bytes(n: int) -> None:
    size = slot_bytes(n)
    assert size % 8 == 0 and 0 <= size - (16 + 4 * n + 8) < 8
    raw = np.zeros(size, np.uint8)
    slot = Slot(raw, n)
    state = np.arange(1, n + 1, dtype=np.float32)
    slot.write(5, state)
    assert raw[:8].view(np.int64)[0] == 5 and raw[-8:].view(np.int64)[0] == 5
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
