"""The rules that tell a node's fault from a trial's: srun's lines for a lost node (answered as
lost: re-queued), the worker-ttl that bounds a silent worker (the user's own kept), and the
launcher environment that ends an MPI step when one rank dies."""

from __future__ import annotations

import importlib
import os
from types import SimpleNamespace

import dask
import distributed.proctitle
import pytest

from search.driver._run import WORKER_TTL, worker_ttl_setting
from training.launch import job_env, node_lost, still_queued

pytestmark = pytest.mark.unit

# Lines as srun and slurmstepd printed them on the namespace cluster (SLURM 22.05).
LOST = [
    ("srun: error: Node failure on detol-n2\nsrun: Job step aborted: Waiting up to 7 seconds",
     "srun: error: Node failure on detol-n2"),
    ("slurmstepd-detol-n1: error: *** STEP 36.0 ON detol-n1 CANCELLED AT 2026-11-29T10:39:19 "
     "DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
     "STEP 36.0 ON detol-n1 CANCELLED AT 2026-11-29T10:39:19 DUE TO NODE FAILURE"),
    ("srun: error: Slurm job 18 has expired\nsrun: Check SLURM_JOB_ID environment variable.",
     "srun: error: Slurm job 18 has expired"),
]
NOT_LOST = [
    "srun: error: detol-n1: task 1: Killed",  # a rank killed (OOM, a signal): the trial's
    "slurmstepd: error: *** STEP 5.0 ON detol-n1 CANCELLED AT 2026-11-29T10:00:00 ***",
    "Traceback (most recent call last):\nValueError: bad lr",
    "MPI job exited with code 1",
]


@pytest.mark.parametrize(("output", "line"), LOST)
def test_a_job_that_lost_a_node_says_so(output: str, line: str) -> None:
    assert node_lost(f"some output\n{output}\nmore") == line


@pytest.mark.parametrize("output", NOT_LOST)
def test_a_trial_that_failed_on_its_own_is_not_a_lost_node(output: str) -> None:
    assert node_lost(output) == ""


def test_worker_ttl_bounds_a_silent_worker_unless_the_user_set_one() -> None:
    with dask.config.set({"distributed.scheduler.worker-ttl": "5 minutes"}):
        assert worker_ttl_setting() == {"distributed.scheduler.worker-ttl": WORKER_TTL}
    with dask.config.set({"distributed.scheduler.worker-ttl": "90s"}):
        assert worker_ttl_setting() == {}


def test_an_mpi_step_ends_when_one_rank_dies_unless_the_study_says_otherwise() -> None:
    assert job_env(1, False, {})["SLURM_KILL_BAD_EXIT"] == "1"
    assert job_env(1, False, {"SLURM_KILL_BAD_EXIT": "0"})["SLURM_KILL_BAD_EXIT"] == "0"


def test_an_allocation_whose_steps_cannot_start_is_given_up_and_counts_as_a_lost_node() -> None:
    from training.launch._line import QUEUE_WAIT_S

    output = "srun: Job 74 step creation temporarily disabled, retrying (Requested nodes are busy)"
    assert still_queued(output, since=0.0, now=QUEUE_WAIT_S - 1) == ""  # may still come
    reason = still_queued(output, since=0.0, now=QUEUE_WAIT_S + 1)
    assert reason.startswith(f"srun: Job 74 step creation still disabled after "
                             f"{QUEUE_WAIT_S + 1:.0f} s (DETOL_QUEUE_WAIT_S=")
    assert node_lost(reason) == f"srun: Job 74 step creation still disabled after " \
                                f"{QUEUE_WAIT_S + 1:.0f} s"
    assert still_queued(output + "\nsrun: Step created for StepId=74.1", since=0.0,
                        now=QUEUE_WAIT_S + 1) == ""


def test_a_batch_worker_names_its_process_without_spaces_and_keeps_its_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # SLURM's proctrack/linuxproc cannot parse a /proc/PID/stat whose name has spaces (scancel
    # then left Dask's "dask worker [...]" running), and setproctitle writes over the environment
    # unless SPT_NOENV is set (a search by environment tag then misses the worker).
    titles: list[str] = []
    monkeypatch.setattr(distributed.proctitle, "setproctitle_mod",
                        SimpleNamespace(setproctitle=titles.append))
    monkeypatch.delenv("SPT_NOENV", raising=False)
    import search.clusters._proctitle as preload

    importlib.reload(preload)
    distributed.proctitle.setproctitle_mod.setproctitle("dask worker [tcp://10.213.0.11:4000]")
    assert titles == ["dask-worker-[tcp://10.213.0.11:4000]"]
    assert os.environ["SPT_NOENV"] == "1"
