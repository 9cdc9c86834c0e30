"""ASGD's exchange wired end to end on 2 real MPI ranks: a received state changes the
receiver's weights exactly by the paper's formula, and only when the Parzen gate accepts it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from training.launch import launcher_argv

pytestmark = pytest.mark.mpi
JOB = Path(__file__).resolve().parents[1] / "mpi_jobs" / "_asgd_wiring.py"


@pytest.fixture(scope="module")
def wiring(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("wiring") / "out.json"
    argv = launcher_argv("mpiexec -n {ranks}", 2) + [sys.executable, str(JOB), str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


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
