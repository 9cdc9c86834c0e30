"""ASGD's pieces by hand: the slot reader, the Parzen-window gate and the update."""

from __future__ import annotations

import numpy as np
import pytest

from training.algorithms._asgd import (
    EMPTY,
    NEW,
    OLD,
    TORN,
    Slot,
    asgd_update,
    checksum,
    parzen_gate,
    read_slot,
    slot_bytes,
)

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def _slot(n: int = 3) -> Slot:
    return Slot(np.zeros(slot_bytes(n), np.uint8), n)


def test_slot_reader_accepts_whole_states_once() -> None:
    slot = _slot()
    assert read_slot(slot, 0)[0] == EMPTY
    slot.write(3, np.array([1.0, 2.0, 3.0], np.float32))
    status, state, seq = read_slot(slot, 2)
    assert (status, seq) == (NEW, 3)
    np.testing.assert_array_equal(state, [1.0, 2.0, 3.0])
    state[0] = 99.0  # a copy: the window may change under it
    assert slot.state[0] == 1.0
    assert read_slot(slot, 3)[0] == OLD  # already seen


@pytest.mark.parametrize("tear", ["header-ahead", "state-half-written", "trailer-ahead"])
def test_slot_reader_rejects_a_read_that_overlapped_a_write(tear: str) -> None:
    slot = _slot()
    slot.write(3, np.array([1.0, 2.0, 3.0], np.float32))
    if tear == "header-ahead":  # the writer of message 4 got as far as the header
        slot.head[0] = 4
    elif tear == "state-half-written":  # both numbers say 4, the state is half old
        new = Slot(np.zeros(slot_bytes(3), np.uint8), 3)
        new.write(4, np.array([7.0, 8.0, 9.0], np.float32))
        slot.head[:] = new.head
        slot.tail[:] = new.tail
        slot.state[0] = 7.0
    else:  # the trailer landed before the rest
        slot.tail[0] = 4
    status, state, _ = read_slot(slot, 3 if tear == "header-ahead" else 2)
    if tear == "header-ahead":
        assert status == OLD  # nothing new is complete yet
        status, state, _ = read_slot(slot, 2)
    assert status == TORN and state is None


@pytest.mark.parametrize("n", [1, 2, 5, 64])
def test_checksum_sees_any_changed_word(n: int) -> None:
    """Odd and even lengths (the sum runs over int64 pairs plus a last odd word)."""
    rng = np.random.default_rng(n)
    state = rng.normal(size=n).astype(np.float32)
    base = checksum(state)
    assert base == checksum(state.copy())  # deterministic
    for i in range(n):
        torn = state.copy()
        torn[i] = np.float32(torn[i] * 2 + 1)
        assert checksum(torn) != base, i


def test_gate_matches_the_paper_by_hand() -> None:
    w_i = np.array([0.0, 0.0])
    g = np.array([1.0, 0.0])
    eps = 0.1
    w_step = w_i - eps * g  # (-0.1, 0)
    towards = np.array([-1.0, 0.0])  # ||(-0.1,0)-(-1,0)||^2 = 0.81 < ||(0,0)-(-1,0)||^2 = 1
    away = np.array([1.0, 0.0])  # 1.21 > 1
    sideways = np.array([0.0, 1.0])  # 1.01 > 1
    assert parzen_gate(w_i, w_step, towards)
    assert not parzen_gate(w_i, w_step, away)
    assert not parzen_gate(w_i, w_step, sideways)


def test_gate_agrees_with_the_norm_comparison_on_random_vectors() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        w_old, w_new, w_ext = rng.normal(size=(3, 50))
        by_norms = np.sum((w_new - w_ext) ** 2) < np.sum((w_old - w_ext) ** 2)
        assert parzen_gate(w_old, w_new, w_ext) == by_norms


def test_update_is_the_papers_formula_for_one_state() -> None:
    rng = np.random.default_rng(0)
    w_i, g, w_j = rng.normal(size=(3, 6))
    eps = 0.05
    expected = w_i - eps * ((w_i - (w_i + w_j) / 2) + g)  # delta = 1
    got = asgd_update(w_i, w_i - eps * g, [w_j], eps)
    np.testing.assert_allclose(got, expected)
    np.testing.assert_allclose(asgd_update(w_i, w_i - eps * g, [], eps), w_i - eps * g)


def test_several_accepted_states_blend_with_their_mean() -> None:
    w_i = np.zeros(2)
    a, b = np.array([2.0, 0.0]), np.array([0.0, 2.0])
    got = asgd_update(w_i, w_i, [a, b], eps=0.5)
    mean = (w_i + a + b) / 3
    np.testing.assert_allclose(got, w_i - 0.5 * (w_i - mean))
    assert got == pytest.approx([1 / 3, 1 / 3])
