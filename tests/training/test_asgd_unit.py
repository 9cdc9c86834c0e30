"""ASGD's pieces by hand: the slot reader (seqlock), the Parzen-window gate and the update."""

from __future__ import annotations

import numpy as np
import pytest

from training._asgd import EMPTY, NEW, OLD, TORN, asgd_update, parzen_gate, read_slot


def test_slot_reader_accepts_whole_states_once_and_rejects_torn_ones() -> None:
    slot = np.zeros(5)
    assert read_slot(slot, 0.0)[0] == EMPTY
    slot[:] = [3.0, 1.0, 2.0, 3.0, 3.0]
    status, state, seq = read_slot(slot, 2.0)
    assert (status, seq) == (NEW, 3.0)
    np.testing.assert_array_equal(state, [1.0, 2.0, 3.0])
    state[0] = 99.0  # a copy: the window may change under it
    assert slot[1] == 1.0
    assert read_slot(slot, 3.0)[0] == OLD  # already seen
    slot[0] = 4.0  # writer started message 4: opening number ahead of the closing one
    slot[1] = -1.0
    assert read_slot(slot, 3.0)[0] == OLD  # nothing complete and unseen yet
    assert read_slot(slot, 2.0) == (TORN, None, 3.0)  # message 3 unseen, but being overwritten


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
