"""`search run` on a real SLURM: workers are batch jobs (dask-jobqueue), trials are MPI jobs
inside them, and a cluster that cannot deliver stops the run instead of hanging.

The one-node SLURM comes from Debian's packages, started by ``.ci/slurm.sh`` (the ``slurm``
fixture); these tests are skipped only where SLURM is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

from search.clusters._plans import plan_cluster
from search.clusters._watch import ClusterFailed, ClusterHandle, recording_job_class
from search.studyfile._study_file import parse_study
from tests.cli_helpers import search_command
from training.contract import open_storage

pytestmark = [pytest.mark.mpi, pytest.mark.slurm, pytest.mark.usefixtures("slurm")]

JOBS = Path(__file__).resolve().parents[1] / "mpi_jobs"  # tests/mpi_jobs/_trial_helpers.py
CLUSTER = {
    "backend": '"slurm"',
    "memory": '"1GB"',
    "walltime": '"00:15:00"',
    "scheduler_host": '"127.0.0.1"',  # the "compute node" is this machine
    "adapt": "{ minimum = 0, maximum = 2 }",
}


@pytest.fixture(autouse=True)
def _no_job_left_behind() -> Iterator[None]:
    """A failed test may leave a worker job queued (its `search run` killed): never for the next."""
    yield
    subprocess.run(["scancel", "--user", str(os.getuid())], capture_output=True,
                   timeout=30, check=False)


def _study(directory: Path, *, trials: int, concurrency: int = 1, launcher: str | None = None,
           cluster: dict[str, str] | None = None, dataset: str = "digits",
           launcher_env: dict[str, str] | None = None, max_failures: int = 1) -> Path:
    table = {**CLUSTER, **(cluster or {})}
    lines = [
        'name = "slurm"', 'pruner = "none"',
        "[strategy]", 'name = "random"', "seed = 1",
        "[budget]", f"trials = {trials}", f"concurrency = {concurrency}", f"max_failures = {max_failures}", "max_retries = 1",
        "[training]", f"dataset = {json.dumps(dataset)}", "epochs = 2", "ranks = 2", "hidden = 16",
        "[space]", 'lr = { type = "float", low = 0.01, high = 0.1, log = true }',
        "[cluster]", *(f"{k} = {v}" for k, v in table.items()),
        "[launcher]",
    ]
    if launcher:
        lines.append(f"command = {json.dumps(launcher)}")
    if launcher_env:
        lines.append("env = { " + ", ".join(f"{k} = {json.dumps(v)}"
                                             for k, v in launcher_env.items()) + " }")
    path = directory / "study.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _search(study: Path, storage: str, cwd: Path, timeout: float = 240) -> tuple[int, str, str]:
    proc = subprocess.run([*search_command(), "run", str(study), "--storage", storage,
                           "--no-progress"], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def _trials(storage: str) -> list[FrozenTrial]:
    return optuna.load_study(study_name="slurm", storage=open_storage(storage)).get_trials()


def _squeue() -> list[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i %T %j"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    return [line for line in out.splitlines() if line.strip()]


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.25)


def _queue_drains() -> None:
    _wait_for(lambda: not _squeue(), "squeue to be empty (worker jobs released)", 30)


def test_study_runs_on_slurm_batch_jobs_and_releases_them(tmp_path: Path) -> None:
    storage = str(tmp_path / "s.journal")
    code, out, err = _search(_study(tmp_path, trials=3, concurrency=2), storage, tmp_path)
    assert code == 0, out + err
    trials = _trials(storage)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    # Every trial ran in a SLURM job (the Dask worker's SLURM_JOB_ID), as a 2-rank MPI job.
    jobs = {t.user_attrs.get("batch_job") for t in trials}
    assert None not in jobs and all(j.isdigit() for j in jobs), jobs
    assert all(t.user_attrs["ranks"] == 2 and len(t.user_attrs["history"]) == 2 for t in trials)
    _queue_drains()


def test_srun_with_pmi2_runs_one_two_rank_job(tmp_path: Path) -> None:
    storage = str(tmp_path / "s.journal")
    study = _study(tmp_path, trials=1, launcher="srun --mpi=pmi2 -n {ranks}")
    code, out, err = _search(study, storage, tmp_path)
    assert code == 0, out + err
    [trial] = _trials(storage)
    assert trial.state == TrialState.COMPLETE
    assert trial.user_attrs["ranks"] == 2 and len(trial.user_attrs["history"]) == 2
    assert "srun --mpi=pmi2 -n 2 " in trial.user_attrs["command"]
    _queue_drains()


def test_srun_without_pmi_fails_the_trial_instead_of_training_twice(tmp_path: Path) -> None:
    # SLURM's MpiDefault=none: `srun -n 2` starts two "rank 0 of 1" processes.
    storage = str(tmp_path / "s.journal")
    code, out, err = _search(_study(tmp_path, trials=1, launcher="srun -n {ranks}"), storage,
                             tmp_path)
    assert code == 1, out + err  # budget.max_failures = 1
    [trial] = _trials(storage)
    assert trial.state == TrialState.FAIL
    reason = trial.user_attrs["exit_reason"]
    assert "wrong rank count: the trial asked for 2 ranks but its MPI job has 1" in reason
    assert "'srun -n {ranks}'" in reason and "srun --mpi=pmi2" in reason
    assert trial.intermediate_values == {}  # nothing was reported into the trial
    assert "wrong rank count" in out  # the trial's line says why
    _queue_drains()


def test_rejected_job_script_stops_at_once_and_writes_nothing(tmp_path: Path) -> None:
    storage = tmp_path / "s.journal"
    started = time.monotonic()
    code, out, err = _search(_study(tmp_path, trials=1, cluster={"queue": '"nope"'}),
                             str(storage), tmp_path, timeout=60)
    elapsed = time.monotonic() - started
    assert code == 2, out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: cluster.queue: sbatch rejected the 'slurm' worker job")
    assert "invalid partition specified: nope" in lines[0]
    assert elapsed < 30
    assert not storage.exists()  # no study, no storage file
    assert not _squeue()


def test_a_submission_refused_while_running_is_recorded_and_named(tmp_path: Path) -> None:
    # Past the up-front check (a queue closed later, a limit reached): Dask only logs the failed
    # sbatch, so the job class records it and the driver's watch raises.
    sf = parse_study({"name": "x", "training": {"ranks": 2},
                      "cluster": {"backend": "slurm", "memory": "1GB",
                                  "scheduler_host": "127.0.0.1", "queue": "nope"}})
    plan = plan_cluster(sf.cluster, concurrency=1, max_ranks=2)
    errors: list[str] = []
    base = plan.cluster_class()
    with plan.start(job_cls=recording_job_class(base.job_cls, errors)) as cluster:
        cluster.scale(1)
        _wait_for(lambda: bool(errors), "the refused submission to be recorded", 30)
        handle = ClusterHandle(client=None, backend="slurm", worker_timeout=300,  # type: ignore[arg-type]
                               cluster=cluster, submit_errors=errors)
        with pytest.raises(ClusterFailed) as failed:
            handle.check(waiting=True)
    assert failed.value.where == "cluster.queue"
    assert "invalid partition specified: nope" in failed.value.message


def test_worker_timeout_stops_a_run_whose_jobs_never_start(tmp_path: Path) -> None:
    storage = str(tmp_path / "s.journal")
    study = _study(tmp_path, trials=1, cluster={
        "worker_timeout": "6", "job_extra_directives": '["--begin=now+1hour"]'})
    started = time.monotonic()
    code, out, err = _search(study, storage, tmp_path, timeout=120)
    assert code == 1, out + err
    assert time.monotonic() - started < 60
    assert "error: cluster.worker_timeout: trials waited 6 s and no Dask worker connected" in err
    assert "PENDING (BeginTime)" in err  # what was waited for, in SLURM's words
    trials = _trials(storage)
    assert trials[0].state == TrialState.FAIL
    assert trials[0].user_attrs["exit_reason"].startswith("cluster failed: cluster.worker_timeout")
    assert [t.state for t in trials[1:]] == [TrialState.WAITING]  # re-queued for the next run
    _queue_drains()  # the pending job was cancelled


def test_a_cancelled_worker_job_is_a_lost_worker_and_its_trial_runs_again(
        tmp_path: Path) -> None:
    def cancel() -> str:
        [job] = [line.split()[0] for line in _squeue() if " RUNNING " in line]
        subprocess.run(["scancel", job], check=True, timeout=30)
        return job

    _lose_the_worker_job(tmp_path, cancel, _squeue)


def _lose_the_worker_job(tmp_path: Path, cancel: Callable[[], str],
                         jobs: Callable[[], list[str]], cluster: dict[str, str] | None = None,
                         ) -> None:
    """Mid-trial, ``cancel()`` ends the running worker job (and says its id): the trial fails as
    a lost worker, its parameters run again in a new job, the study completes, ``jobs()`` empties."""
    storage = str(tmp_path / "s.journal")
    study = _study(tmp_path, trials=1, dataset="_trial_helpers:digits_slow_once",
                   launcher_env={"PYTHONPATH": str(JOBS), "DETOL_FAULT_DIR": str(tmp_path)},
                   max_failures=2, cluster=cluster)
    proc = subprocess.Popen([*search_command(), "run", str(study), "--storage", storage,
                             "--no-progress"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (tmp_path / "slow-job").exists(), "the first trial's job to start", 90)
        job = cancel()
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err
    first, second = _trials(storage)
    assert first.state == TrialState.FAIL
    assert first.user_attrs["exit_reason"].startswith("Dask worker lost")
    assert "parameters re-queued" in first.user_attrs["exit_reason"]
    assert second.state == TrialState.COMPLETE and second.params == first.params
    assert second.user_attrs["batch_job"] != job  # a new worker job
    _wait_for(lambda: not jobs(), "the queue to be empty (worker jobs released)", 30)
