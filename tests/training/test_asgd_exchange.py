"""ASGD's exchange wired end to end on 2 real MPI ranks: a received state changes the
receiver's weights exactly by the paper's formula, and only when the Parzen gate accepts it."""

from __future__ import annotations

import numpy as np
import pytest

from tests.mpi_helpers import run_mpi_job

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def wiring(tmp_path_factory: pytest.TempPathFactory) -> dict:
    result: dict = run_mpi_job("_asgd_wiring.py", tmp_path_factory.mktemp("wiring") / "out.json",
                               timeout=120)
    return result


def _vec(r: dict, key: str) -> np.ndarray:
    return np.asarray(r[key], np.float64)


def test_an_accepted_state_is_blended_by_the_papers_formula(wiring: dict) -> None:
    eps, w_i, g, g2 = wiring["eps"], _vec(wiring, "w_i"), _vec(wiring, "g"), _vec(wiring, "g2")
    case = wiring["towards"]
    w_j = _vec(case, "w_j")
    # w_i <- w_i - eps * (delta * (w_i - (w_i + w_j)/2) + g), delta = 1
    expected = w_i - eps * ((w_i - (w_i + w_j) / 2) + g)
    np.testing.assert_allclose(case["weights"][0], expected, rtol=1e-6, atol=1e-6)
    assert case["counters"]["received"] == 1 and case["counters"]["accepted"] == 1
    # No new message before the second step: a plain SGD step, nothing blended twice.
    np.testing.assert_allclose(case["weights"][1], expected - eps * g2, rtol=1e-6, atol=1e-6)


def test_a_rejected_state_leaves_the_local_step_alone(wiring: dict) -> None:
    eps, w_i, g = wiring["eps"], _vec(wiring, "w_i"), _vec(wiring, "g")
    case = wiring["away"]
    np.testing.assert_allclose(case["weights"][0], w_i - eps * g, rtol=1e-6, atol=1e-6)
    assert case["counters"]["received"] == 1 and case["counters"]["rejected"] == 1
    assert case["counters"]["accepted"] == 0


def test_the_blend_stays_out_of_the_momentum_buffer(wiring: dict) -> None:
    """With momentum the first step is the same as plain SGD; the second step's velocity is
    0.9 g + g2, the pull towards w_j not included (eps is lr, applied to the weights)."""
    eps, w_i, g, g2 = wiring["eps"], _vec(wiring, "w_i"), _vec(wiring, "g"), _vec(wiring, "g2")
    case = wiring["towards_momentum"]
    w_j = _vec(case, "w_j")
    first = w_i - eps * ((w_i - (w_i + w_j) / 2) + g)
    np.testing.assert_allclose(case["weights"][0], first, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(case["weights"][1], first - eps * (0.9 * g + g2),
                               rtol=1e-6, atol=1e-6)


def test_the_in_place_blend_matches_the_reference_for_several_states(wiring: dict) -> None:
    checks = wiring["towards"]["blend_checks"]
    assert [c["accepted"] for c in checks] == [c["expected_accepted"] for c in checks]
    assert {c["accepted"] for c in checks} >= {0, 1, 2}  # every branch was taken
    assert max(c["error"] for c in checks) < 1e-5
