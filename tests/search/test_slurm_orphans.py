"""No orphans on the real one-node SLURM (issue 27): a driver SIGKILLed mid-trial leaves no batch
job and no process behind within the documented bound (docs/faults.md), and a warm pool under
``srun`` ends its allocation when it is retired, so a later trial does not wait for resources."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli_helpers import search_command
from tests.search.test_recovery import _processes_tagged
from tests.search.test_slurm import _search, _squeue, _study, _trials

pytestmark = [pytest.mark.mpi, pytest.mark.slurm, pytest.mark.usefixtures("slurm")]

ORPHAN_BOUND_S = 45.0  # docs/faults.md: death timeout (20 s) + the worker's close + job end


def _until(condition, timeout: float, step: float = 0.25) -> float:  # noqa: ANN001
    """Seconds until ``condition()`` held; fails past ``timeout``."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            return -1.0
        time.sleep(step)
    return time.monotonic() - start


@pytest.mark.parametrize("when", ["mid-trial", "job-queued"])
def test_a_killed_driver_leaves_no_job_and_no_process(tmp_path: Path, when: str) -> None:
    """Mid-trial the worker sees its scheduler's connection break and ends at once; a job that
    starts after its driver died finds no scheduler and ends after the death timeout."""
    _kill_the_driver(tmp_path, when, _squeue)


def _kill_the_driver(tmp_path: Path, when: str, jobs: Callable[[], list[str]],
                     cluster: dict[str, str] | None = None) -> None:
    """SIGKILL a `search run` whose one worker job runs a trial (``when`` = 'mid-trial') or is
    submitted (``job-queued``); then ``jobs()`` (the batch system's queue) must empty and no
    process of the study may be left within ORPHAN_BOUND_S."""
    tag = f"DETOL_ORPHAN_TEST={uuid.uuid4().hex}"
    key, value = tag.split("=")
    study = _study(tmp_path, trials=2,
                   cluster={"adapt": "{ minimum = 1, maximum = 1 }", **(cluster or {})})
    study.write_text(study.read_text().replace("epochs = 2", "epochs = 400"))
    storage = str(tmp_path / "s.journal")
    env = {k: v for k, v in os.environ.items() if k != "DETOL_STORAGE"} | {key: value}
    driver = subprocess.Popen([*search_command(), "run", str(study), "--storage", storage,
                               "--no-progress"], cwd=tmp_path, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if when == "mid-trial":  # an MPI rank (the training worker) of this study runs
            started = _until(lambda: any("training.jobs.worker" in _cmdline(p)
                                         for p in _processes_tagged(tag)), 120)
            assert started >= 0, f"no trial started; queue: {jobs()}"
            assert jobs(), "the trial runs in a batch job"
        else:  # the worker job is submitted, its worker not yet connected
            assert _until(lambda: bool(jobs()), 120, step=0.05) >= 0, "no job submitted"
        driver.send_signal(signal.SIGKILL)  # the driver alone, as the OOM killer would
        driver.wait()
        gone = _until(lambda: not jobs() and not _processes_tagged(tag), ORPHAN_BOUND_S)
        assert gone >= 0, (f"left after {ORPHAN_BOUND_S:g} s: jobs {jobs()}, processes "
                           f"{[_cmdline(p)[:80] for p in _processes_tagged(tag)]}")
        print(f"{when}: orphans ended {gone:.1f} s after the driver was killed "
              f"(load {os.getloadavg()[0]:.1f})")
    finally:
        if driver.poll() is None:
            driver.kill()
        for pid in _processes_tagged(tag):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_a_retired_srun_pool_releases_its_allocation(tmp_path: Path) -> None:
    """`srun -n` without PMI: the rank guard fails the trial and retires its warm pool; the
    pool's srun must end its job (a SIGKILLed srun left one singleton rank running, the job
    RUNNING, and the next trial waiting on (Resources) for ever)."""
    study = _study(tmp_path, trials=1, launcher="srun -n {ranks}", max_failures=1)
    text = study.read_text().split("[cluster]")[0]  # a local study whose launcher is srun
    study.write_text(text + '[launcher]\ncommand = "srun -n {ranks}"\nwarm = true\n')
    storage = str(tmp_path / "s.journal")
    code, out, err = _search(study, storage, tmp_path, timeout=150)
    assert code == 1, out + err  # max_failures = 1: the trial failed, the run stopped
    [trial] = _trials(storage)
    assert "wrong rank count" in trial.user_attrs.get("exit_reason", "")
    assert _until(lambda: not _squeue(), 10) >= 0, f"srun jobs left: {_squeue()}"
