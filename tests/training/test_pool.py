"""Warm pools: one MPI job serves many trials, and a crashed trial stays isolated."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from training.launch import run_trial
from training.launch._warm_pool import idle_pools, shutdown_pools

pytestmark = pytest.mark.mpi

TAG = f"detol-pool-test-{uuid.uuid4().hex[:8]}"
JOBS = Path(__file__).resolve().parents[1] / "mpi_jobs"  # tests/mpi_jobs/_trial_helpers.py
ENV = {"DETOL_POOL_TAG": TAG, "PYTHONPATH": os.pathsep.join([str(JOBS), os.environ.get(
    "PYTHONPATH", "")])}
DIGITS = {"dataset": "digits", "epochs": 1, "ranks": 2, "hidden": 32, "seed": 3}


def _trial(warm: bool = True, timeout_s: float = 120, **config: Any) -> dict[str, Any]:
    spec = {"config": {**DIGITS, **config}, "env": ENV, "warm": warm, "timeout_s": timeout_s,
            "ask_time": time.time()}
    return run_trial(spec)


def _tagged(role: str = "") -> list[int]:
    """PIDs whose environment carries this module's tag (and ``role`` in the command line)."""
    found = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if TAG.encode() in env.read_bytes() and role.encode() in (
                env.parent / "cmdline"
            ).read_bytes():
                found.append(int(env.parent.name))
        except OSError:
            continue
    return found


def _gone_within(seconds: float, role: str = "") -> list[int]:
    end = time.monotonic() + seconds
    while (left := _tagged(role)) and time.monotonic() < end:
        time.sleep(0.2)
    return left


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module", autouse=True)
def _no_rank_left_behind() -> Any:
    yield
    shutdown_pools()
    assert _gone_within(15) == [], "a pool's MPI process outlived shutdown_pools()"


def test_warm_trials_match_cold_and_skip_the_launch() -> None:
    cold = _trial(warm=False)
    first = _trial()
    second = _trial()
    for r in (cold, first, second):
        assert r["state"] == "complete", r["exit_reason"]
    assert first["values"]["val_accuracy"] == cold["values"]["val_accuracy"]
    assert second["values"]["val_accuracy"] == cold["values"]["val_accuracy"]
    def learned(history: list[dict]) -> list[dict]:  # everything but the clock
        return [{k: v for k, v in row.items() if k != "train_time_s"} for row in history]

    assert learned(second["history"]) == learned(cold["history"])
    assert second["pool"]["pid"] == first["pool"]["pid"] and not second["pool"]["fresh"]
    assert "training.jobs.warm_worker" in second["command"]
    # The second trial finds torch imported: its launch is a fraction of a cold one.
    assert second["launch_overhead_s"] < 0.5 * first["launch_overhead_s"]
    assert second["launch_overhead_s"] < 0.5 * cold["launch_overhead_s"]


def test_an_exception_on_rank_1_fails_its_trial_and_the_pool_serves_the_next() -> None:
    bad = _trial(dataset="_trial_helpers:digits_failing_on_two_ranks")
    assert bad["state"] == "failed"
    assert "RuntimeError: user dataset exploded on rank 1" in bad["exit_reason"]
    assert "[rank 1]" in bad["exit_reason"]  # the traceback says where
    # Its log, as a cold trial's (the driver writes it to detol-logs/STUDY/trial-N.log).
    assert "RuntimeError: user dataset exploded on rank 1" in bad["log"]
    good = _trial()
    assert good["state"] == "complete", good["exit_reason"]
    assert good["pool"]["pid"] == bad["pool"]["pid"]


def test_an_idle_pool_sleeps_and_shutdown_leaves_no_rank() -> None:
    assert _trial()["state"] == "complete"
    ranks = _tagged("training.jobs.warm_worker")
    assert len(ranks) >= 2 and idle_pools()
    time.sleep(1.0)  # the trial's own tail of work is done
    # No rank spins in MPI: each idle rank uses far less CPU than a busy loop running beside it
    # over the same window gets (a ratio, so a loaded machine, which slows both, cannot decide).
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # the interpreter is up and spinning
        before = [_cpu_seconds(pid) for pid in ranks], _cpu_seconds(spinner.pid)
        time.sleep(1.5)
        after = [_cpu_seconds(pid) for pid in ranks], _cpu_seconds(spinner.pid)
    finally:
        spinner.kill()
        spinner.wait()
    spun = after[1] - before[1]
    idle = max(a - b for a, b in zip(after[0], before[0], strict=True))
    # Seen: 0.02 s idle vs 0.88 s spun; with a 0-s poll (the red check) 0.30 vs 1.07 s.
    assert spun > 0 and idle < 0.1 * spun, (idle, spun)
    shutdown_pools()
    assert idle_pools() == []
    assert _gone_within(15) == []


def test_a_rank_that_dies_fails_the_trial_and_the_next_gets_a_fresh_pool() -> None:
    dead = _trial(dataset="_trial_helpers:digits_rank1_dies")
    assert dead["state"] == "failed"
    assert "exited with code" in dead["exit_reason"] and "timeout" not in dead["exit_reason"], \
        dead.get("log", "")[-6000:]  # a hung pool's log holds each rank's stack
    assert _gone_within(15) == [], "the broken pool's ranks are still alive"
    after = _trial()
    assert after["state"] == "complete", after["exit_reason"]
    assert after["pool"]["fresh"] and after["pool"]["pid"] != dead["pool"]["pid"]


def test_a_rank_that_dies_unseen_by_the_launcher_still_fails_the_trial_at_once() -> None:
    # Its PMI socket stays open (a child holds it), so Hydra does not end the job: the dead
    # rank's peer on this node does (training/jobs/_peers.py), not the trial's timeout.
    started = time.monotonic()
    dead = _trial(dataset="_trial_helpers:digits_rank1_dies_unseen", timeout_s=90)
    assert dead["state"] == "failed"
    assert "exited with code" in dead["exit_reason"], dead.get("log", "")[-6000:]
    assert "[rank 0] detol: rank 1 (pid" in dead["log"] and "is gone" in dead["log"]
    assert time.monotonic() - started < 60  # not waited out (seen: 90 s timeout without it)
    assert _gone_within(15) == [], "the broken pool's ranks are still alive"


def test_a_trial_past_its_timeout_kills_the_pool_and_says_so() -> None:
    _trial()  # a warm pool is there when the long trial starts
    started = time.monotonic()
    slow = _trial(epochs=100_000, timeout_s=10)  # hours of training if the kill missed
    assert slow["state"] == "failed"
    assert slow["exit_reason"].startswith("trial timeout: still running after 10 s")
    # Shortly before the deadline (0.2 x 10 s) every rank printed where it was, as a cold job's.
    assert slow["log"].count("detol: 2 s before the trial's deadline") == 2, slow["log"][-3000:]
    assert "training/jobs/_trainer.py" in slow["log"]
    assert time.monotonic() - started < 120  # killed, not trained out (bound for load 40+)
    assert not slow["pool"]["fresh"]
    assert _gone_within(15) == [] and idle_pools() == []
