"""`search run` on a real Grid Engine: workers are batch jobs (dask-jobqueue's SGECluster) with a
parallel environment's slots for a trial's ranks; a job script the cell refuses stops the run at
once, a worker job deleted mid-trial is a lost worker whose trial runs again, and a driver killed
mid-trial leaves no job and no process behind.

The one-node cell comes from Debian's packages, started by ``.ci/sge.sh`` (the ``sge`` fixture).
The study, its run and its checks are the SLURM tests' (tests/search/test_slurm.py), with
``backend = "sge"``. The lost-job and worker_timeout tests are slow (-m slow): their driver code
is the SLURM tests', which run by default; the adaptive study, the refusals and the killed driver
run by default.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from optuna.trial import TrialState

from search.clusters._plans import plan_cluster
from search.clusters._watch import ClusterFailed, ClusterHandle, recording_job_class
from search.studyfile._study_file import parse_study
from tests.search.test_slurm import _lose_the_worker_job, _search, _study, _trials, _wait_for
from tests.search.test_slurm_orphans import _kill_the_driver

pytestmark = [pytest.mark.mpi, pytest.mark.sge, pytest.mark.usefixtures("sge")]

SGE = {"backend": '"sge"'}  # the rest of the SLURM tests' [cluster] table fits Grid Engine too


def _qstat() -> list[str]:
    """'JOB STATE NAME' for every job of every user in the cell (qw, r, dr...)."""
    out = subprocess.run(["qstat", "-u", "*"], capture_output=True, text=True, check=True,
                         timeout=30).stdout
    rows = [line.split() for line in out.splitlines()[2:]]  # after the two header lines
    return [f"{r[0]} {r[4]} {r[2]}" for r in rows if len(r) > 4 and r[0].isdigit()]


@pytest.fixture(autouse=True)
def _no_job_left_behind() -> Iterator[None]:
    """A failed test may leave a worker job queued (its `search run` killed): never for the next."""
    yield
    subprocess.run(["qdel", "-f", "-u", "*"], capture_output=True, timeout=30, check=False)


def _queue_drains() -> None:
    _wait_for(lambda: not _qstat(), "qstat to be empty (worker jobs released)", 30)


def test_study_runs_on_sge_batch_jobs_and_releases_them(tmp_path: Path) -> None:
    storage = str(tmp_path / "s.journal")
    code, out, err = _search(_study(tmp_path, trials=2, concurrency=2, cluster=SGE), storage,
                             tmp_path)
    assert code == 0, out + err
    trials = _trials(storage)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    # Every trial ran in a Grid Engine job (the Dask worker's JOB_ID), as a 2-rank MPI job.
    jobs = {t.user_attrs.get("batch_job") for t in trials}
    assert None not in jobs and all(j.isdigit() for j in jobs), jobs
    assert all(t.user_attrs["ranks"] == 2 and len(t.user_attrs["history"]) == 2 for t in trials)
    _queue_drains()  # adapt retired the workers, and their jobs ended


@pytest.mark.parametrize(
    ("cluster", "where", "words"),
    [
        ({"queue": '"nope"'}, "cluster.queue", 'job requests unknown queue "nope"'),
        # 64 ranks: more slots than the cell's parallel environment has on any host
        ({"slots_per_worker": "64"}, "cluster.slots_per_worker",
         'cannot run in PE "smp" because it only offers 0 slots'),
    ],
    ids=["bad-queue", "too-many-slots"],
)
def test_rejected_job_script_stops_at_once_and_writes_nothing(
        tmp_path: Path, cluster: dict[str, str], where: str, words: str) -> None:
    storage = tmp_path / "s.journal"
    started = time.monotonic()
    code, out, err = _search(_study(tmp_path, trials=1, cluster={**SGE, **cluster}),
                             str(storage), tmp_path, timeout=60)
    elapsed = time.monotonic() - started
    assert code == 2, out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {where}: qsub rejected the 'sge' worker job"), lines[0]
    assert words in lines[0] and "parallel_environment" in lines[0]
    assert elapsed < 30  # qsub -w v answers; nothing waits for a job that cannot start
    assert not storage.exists()  # no study, no storage file
    assert not _qstat()


def test_a_submission_refused_while_running_is_recorded_and_named() -> None:
    # Past the up-front check: Dask only logs the failed qsub, the job class records it.
    sf = parse_study({"name": "x", "training": {"ranks": 2},
                      "cluster": {"backend": "sge", "memory": "1GB",
                                  "scheduler_host": "127.0.0.1", "queue": "nope"}})
    plan = plan_cluster(sf.cluster, concurrency=1, max_ranks=2)
    errors: list[str] = []
    with plan.start(job_cls=recording_job_class(plan.cluster_class().job_cls, errors)) as cluster:
        cluster.scale(1)
        _wait_for(lambda: bool(errors), "the refused submission to be recorded", 30)
        handle = ClusterHandle(client=None, backend="sge", worker_timeout=300,  # type: ignore[arg-type]
                               cluster=cluster, submit_errors=errors)
        with pytest.raises(ClusterFailed) as failed:
            handle.check(waiting=True)
    assert failed.value.where == "cluster.queue"
    assert 'unknown queue "nope"' in failed.value.message


@pytest.mark.slow  # worker_timeout's watch is shared with SLURM, whose test runs by default
def test_worker_timeout_names_the_jobs_grid_engine_holds(tmp_path: Path) -> None:
    storage = str(tmp_path / "s.journal")
    study = _study(tmp_path, trials=1, cluster={
        **SGE, "worker_timeout": "6", "job_extra_directives": '["-h"]'})  # held: never starts
    code, out, err = _search(study, storage, tmp_path, timeout=120)
    assert code == 1, out + err
    assert "error: cluster.worker_timeout: trials waited 6 s and no Dask worker connected" in err
    assert re.search(r"\(sge jobs (\d+) submitted: \1 hqw\)", err), err  # in qstat's words
    assert _trials(storage)[0].user_attrs["exit_reason"].startswith(
        "cluster failed: cluster.worker_timeout")
    _queue_drains()  # the held job was deleted


@pytest.mark.slow  # the lost-worker re-queue is the SLURM test's (default run) code path
def test_a_deleted_worker_job_is_a_lost_worker_and_its_trial_runs_again(tmp_path: Path) -> None:
    def delete() -> str:
        [job] = [line.split()[0] for line in _qstat() if line.split()[1] == "r"]
        subprocess.run(["qdel", job], check=True, capture_output=True, timeout=30)
        return job

    _lose_the_worker_job(tmp_path, delete, _qstat, cluster=SGE)


def test_a_killed_driver_leaves_no_job_and_no_process(tmp_path: Path) -> None:
    """SIGKILL of the driver mid-trial: the worker job ends (its worker loses the scheduler),
    and Grid Engine ends the job's processes, MPI ranks included, within the SLURM bound."""
    _kill_the_driver(tmp_path, "mid-trial", _qstat, cluster=SGE)


def test_qstat_lists_jobs_of_every_state() -> None:
    """The helper the tests above read the queue with sees a queued job (no vacuous 'empty')."""
    proc = subprocess.run(["qsub", "-b", "y", "-h", "-N", "detol-held", "/bin/true"],
                          capture_output=True, text=True, check=True, timeout=30,
                          cwd=os.environ.get("TMPDIR", "/tmp"))
    job = proc.stdout.split()[2]  # 'Your job 42 ("detol-held") has been submitted'
    try:
        assert f"{job} hqw detol-held" in _qstat()
    finally:
        subprocess.run(["qdel", job], capture_output=True, timeout=30, check=False)
    _queue_drains()
