"""A driver that dies or is interrupted leaves no trial RUNNING for ever."""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from search._study import DRIVER_ATTR, recover_orphans
from tests.cli_helpers import search_command
from training.contract import open_storage


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_trials_of_a_dead_driver_are_failed_and_requeued(tmp_path: Path) -> None:
    import socket

    study = optuna.create_study(study_name="s", storage=open_storage(str(tmp_path / "j")))
    orphan = study.ask({"lr": optuna.distributions.FloatDistribution(0.001, 0.1)})
    orphan.set_user_attr(DRIVER_ATTR, f"{socket.gethostname()}:{_dead_pid()}")
    alive = study.ask({"lr": optuna.distributions.FloatDistribution(0.001, 0.1)})
    alive.set_user_attr(DRIVER_ATTR, f"{socket.gethostname()}:1")  # pid 1 is alive
    elsewhere = study.ask({"lr": optuna.distributions.FloatDistribution(0.001, 0.1)})
    elsewhere.set_user_attr(DRIVER_ATTR, "some-other-host:12345")

    assert recover_orphans(study) == [orphan.number]

    trials = study.get_trials()
    assert trials[orphan.number].state is TrialState.FAIL
    assert "died while the trial ran" in trials[orphan.number].user_attrs["exit_reason"]
    assert trials[alive.number].state is TrialState.RUNNING
    assert trials[elsewhere.number].state is TrialState.RUNNING
    (queued,) = study.get_trials(states=(TrialState.WAITING,))
    assert queued.params == {}  # enqueued params are fixed when the trial is asked for
    assert queued.system_attrs["fixed_params"] == {"lr": trials[orphan.number].params["lr"]}
    assert queued.user_attrs["detol:retry_of"] == orphan.number


@pytest.mark.mpi
def test_ctrl_c_fails_running_trials_and_leaves_no_mpi_job(
    tmp_path: Path, write_study: Callable[..., Path]
) -> None:
    tag = f"detol-test-{uuid.uuid4().hex}"
    study_file = write_study(training={"epochs": "400", "ranks": "2"},
                             tail=f'[launcher]\nenv = {{ DETOL_TEST_TAG = "{tag}" }}')
    journal = str(tmp_path / "j.journal")
    proc = subprocess.Popen([*search_command(), "run", str(study_file), "--storage", journal, "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    study = None
    while time.monotonic() < deadline:  # wait until the trial trains (it reports epochs)
        time.sleep(0.5)
        try:
            study = optuna.load_study(study_name="t", storage=open_storage(journal))
        except KeyError:
            continue
        running = study.get_trials(states=(TrialState.RUNNING,))
        if running and running[0].intermediate_values:
            break
    else:
        proc.kill()
        pytest.fail("the trial never started training")
    assert _processes_tagged(tag), "the tag must be visible while the trial runs"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert study is not None
    (trial,) = study.get_trials()
    assert trial.state is TrialState.FAIL
    assert trial.user_attrs["exit_reason"] == "driver interrupted"
    assert _processes_tagged(tag) == [], "MPI processes of the interrupted trial are still alive"


def _processes_tagged(tag: str) -> list[int]:
    """PIDs whose environment carries ``tag`` (the trial's MPI job sets it through [launcher])."""
    found = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if tag.encode() in env.read_bytes():
                found.append(int(env.parent.name))
        except OSError:
            continue
    return found


def test_trials_of_a_silent_driver_on_another_host_are_failed(tmp_path: Path) -> None:
    from search._study import HEARTBEAT_ATTR

    study = optuna.create_study(study_name="s", storage=open_storage(str(tmp_path / "j")))
    dist = {"lr": optuna.distributions.FloatDistribution(0.001, 0.1)}
    silent = study.ask(dist)
    silent.set_user_attr(DRIVER_ATTR, "other-host:4242")
    silent.set_user_attr(HEARTBEAT_ATTR, time.time() - 600)
    beating = study.ask(dist)
    beating.set_user_attr(DRIVER_ATTR, "other-host:4243")
    beating.set_user_attr(HEARTBEAT_ATTR, time.time() - 5)
    unclaimed = study.ask(dist)  # its driver died between ask and claiming it

    assert recover_orphans(study, claim_wait_s=0.1) == [silent.number, unclaimed.number]
    trials = study.get_trials()
    assert "sent no heartbeat for 6" in trials[silent.number].user_attrs["exit_reason"]
    assert trials[beating.number].state is TrialState.RUNNING
    assert trials[unclaimed.number].state is TrialState.FAIL
    assert "before the trial started" in trials[unclaimed.number].user_attrs["exit_reason"]
