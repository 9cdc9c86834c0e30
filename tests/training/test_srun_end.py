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
    short = StartWatch(0.0, trial_timeout_s=30.0)  # a third of a short trial timeout
    assert short.stuck("", now=9.0) == "" and short.stuck("", now=11.0).startswith("start timeout")


@pytest.mark.unit
def test_shared_memory_that_killed_ranks_left_is_swept_and_live_segments_are_not(
        tmp_path: Path) -> None:
    import mmap
    import os
    import time

    from training.launch._line import sweep_shm

    def segment(name: str, age_s: float) -> Path:
        path = tmp_path / name
        path.write_bytes(b"\0" * 4096)
        os.utime(path, (time.time() - age_s, time.time() - age_s))
        return path

    orphan = segment("mpich_shm_1a2b_0", 60)
    young = segment("mpich_shm_3c4d_0", 1)  # being set up by a job starting now
    live = segment("mpich_shm_5e6f_0", 60)
    other = segment("not_mpich_0", 60)
    with open(live, "r+b") as f, mmap.mmap(f.fileno(), 4096):  # a running rank maps it
        assert sweep_shm(str(tmp_path)) == ["mpich_shm_1a2b_0"]
        assert not orphan.exists() and young.exists() and live.exists() and other.exists()
    assert sweep_shm(str(tmp_path)) == ["mpich_shm_5e6f_0"]  # unmapped now


@pytest.mark.unit
def test_topology_files_of_killed_mpich_proxies_are_swept_and_open_ones_are_not(
        tmp_path: Path) -> None:
    import os
    import time

    from training.launch._line import sweep_hwloc_files

    def xml(name: str, age_s: float) -> Path:
        path = tmp_path / name
        path.write_text("<topology/>")
        os.utime(path, (time.time() - age_s, time.time() - age_s))
        return path

    orphan = xml("hydra_hwloc_xmlfile_AbC123", 60)
    young = xml("hydra_hwloc_xmlfile_DeF456", 1)  # a proxy starting now
    live = xml("hydra_hwloc_xmlfile_GhI789", 60)
    other = xml("hwloc_other", 60)
    with open(live):  # a running proxy keeps its file open
        assert sweep_hwloc_files(str(tmp_path)) == ["hydra_hwloc_xmlfile_AbC123"]
        assert not orphan.exists() and young.exists() and live.exists() and other.exists()
    assert sweep_hwloc_files(str(tmp_path)) == ["hydra_hwloc_xmlfile_GhI789"]  # closed now
