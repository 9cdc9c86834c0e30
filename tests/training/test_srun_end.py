"""Ending an ``srun`` job (issue 27): SIGTERM first, so that srun forwards it and releases its
allocation; a job queued for resources past ``DETOL_QUEUE_WAIT_S`` is given up with the reason.
The SLURM tests (tests/search/test_slurm_orphans.py) check the same on a real srun."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from training.launch._line import QUEUE_WAIT_S, START_TIMEOUT_S, StartWatch, end_job, still_queued


def test_srun_gets_sigterm_before_the_group_is_killed(tmp_path: Path) -> None:
    srun = tmp_path / "srun"  # stands in for srun: says what it received
    srun.write_text(f"#!/bin/sh\ntrap 'echo TERM > {tmp_path}/got; exit 0' TERM\n"
                    "echo ready; while :; do sleep 0.05; done\n")
    srun.chmod(0o755)
    proc = subprocess.Popen([str(srun)], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    end_job(proc, [str(srun), "-n", "2"])
    assert (tmp_path / "got").read_text() == "TERM\n"


@pytest.mark.unit
def test_a_job_queued_too_long_is_given_up_with_its_reason() -> None:
    queued = "srun: job 42 queued and waiting for resources\n"
    assert still_queued(queued, since=100.0, now=100.0 + QUEUE_WAIT_S - 1) == ""
    reason = still_queued(queued, since=100.0, now=100.0 + QUEUE_WAIT_S + 1)
    assert reason.startswith("srun: job 42 still waiting for resources after")
    allocated = queued + "srun: job 42 has been allocated resources\n"
    assert still_queued(allocated, since=0.0, now=1e9) == ""
    assert still_queued("rank output\n", since=0.0, now=1e9) == ""


@pytest.mark.unit
def test_the_start_watch_does_not_count_time_queued_for_resources() -> None:
    watch = StartWatch(0.0)
    queued = "srun: job 7 queued and waiting for resources\n"
    assert watch.stuck(queued, now=500.0) == ""  # still waiting: the start clock restarts
    allocated = queued + "srun: job 7 has been allocated resources\n"
    assert watch.stuck(allocated, now=500.0 + START_TIMEOUT_S - 1) == ""
    reason = watch.stuck(allocated, now=500.0 + START_TIMEOUT_S + 1)
    assert reason.startswith(f"start timeout: the ranks were not all through MPI_Init after "
                             f"{START_TIMEOUT_S + 1:.0f} s"), reason
