"""Every distributed algorithm, on 2 real MPI ranks, lowers the MLP loss on digits and the
K-means loss; ASGD really exchanges states; all ranks end on the same (averaged) weights."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from training._config import ALGORITHMS
from training.launch import launcher_argv

pytestmark = pytest.mark.mpi
JOB = Path(__file__).resolve().parents[1] / "mpi_jobs" / "_algo_job.py"


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("algos") / "out.json"
    argv = launcher_argv("mpiexec -n {ranks}", 2) + [sys.executable, str(JOB), str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=240,
                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_mlp_loss_goes_down(results: dict, algorithm: str) -> None:
    r = results["mlp"][algorithm]
    assert r["after"] < 0.5 * r["before"], r
    assert r["accuracy"] > 0.7, r
    assert r["spread_after_finish"] < 1e-6  # every rank holds the same final weights


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_kmeans_loss_goes_down(results: dict, algorithm: str) -> None:
    r = results["kmeans"][algorithm]
    assert r["after"] < 0.5 * r["before"], r
    assert r["steps"] > 0


def test_asgd_exchanges_and_gates_states(results: dict) -> None:
    for task in ("mlp", "kmeans"):
        c = results[task]["asgd"]["counters"]
        assert c["sent"] > 0 and c["received"] > 0, c
        assert c["accepted"] + c["rejected"] == c["received"], c
        assert c["received"] <= c["sent"]  # a slot overwritten before it is read counts once


def test_sync_overlaps_communication_with_backward(results: dict) -> None:
    c = results["mlp"]["sync"]["counters"]
    assert c["overlapped_buckets"] > 0
