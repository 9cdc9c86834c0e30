"""The crash soak, short (issue 27): ``benchmarks/crash_soak.py --quick`` runs a real study on a
journal (``search run``, Dask, MPI ranks, a warm pool) while it SIGKILLs the driver, a Dask worker
and an MPI rank, and fills the journal's filesystem (a small tmpfs), each once at an instant drawn
from the seed, resuming the study each time. Nothing finished may be lost, nothing left RUNNING,
the budget met exactly, the journal readable by plain Optuna, and nothing the drivers started left
running. The full soak (200 faults, PostgreSQL too) is the benchmark's; docs/faults.md has its
table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "crash_soak.py"


@pytest.mark.mpi
@pytest.mark.timeout(900)
def test_quick_crash_soak_loses_nothing(tmp_path: Path) -> None:
    """45 s on a quiet machine; 270 s at load 31-38 (so the generous bound)."""
    out = tmp_path / "soak.json"
    soak = subprocess.Popen([sys.executable, str(SCRIPT), "--quick", "--seed", "3", "--json",
                             str(out), "--logs", str(tmp_path / "logs")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = soak.communicate(timeout=840)
    except subprocess.TimeoutExpired:
        soak.terminate()  # SIGTERM: the soak ends what its drivers started, then exits
        output, _ = soak.communicate(timeout=60)
        pytest.fail(f"the quick soak ran past 840 s:\n{output[-3000:]}")
    assert out.exists(), output
    result = json.loads(out.read_text())
    assert result["problems"] == [], output
    assert soak.returncode == 0, output
    kinds = {row["kind"]: row for row in result["table"]}
    expected = {"driver", "worker", "rank", "disk"}
    if result["skipped"]:  # the disk-full fault needs root and a tmpfs mount
        expected.discard("disk")
    assert set(kinds) == expected, result["table"]
    assert all(row["kills"] == row["survived"] == 1 for row in kinds.values()), result["table"]
    assert result["trials_lost"] == result["unreadable_storages"] == result["orphans"] == 0
    (study,) = result["study_runs"]
    assert study["trials"]["RUNNING"] == 0
    assert study["trials"]["COMPLETE"] + study["trials"]["PRUNED"] == study["budget"]
    assert study["budget"] >= result["budget_per_study"]  # raised only when it outran a fault
    assert study["driver_runs"] >= 2  # the driver's SIGKILL was followed by a resume
    # Each fault struck something: a victim process, a full disk, a killed driver.
    assert all(f.get("victim") for f in result["faults"] if f["kind"] in ("worker", "rank"))
