"""A driver that dies or is interrupted leaves no trial RUNNING for ever."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from search.driver._study import DRIVER_ATTR, recover_orphans
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
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["ctrl-c", "kill", "hangup"])
def test_an_interrupt_fails_running_trials_requeues_them_and_leaves_nothing_behind(
    tmp_path: Path, write_study: Callable[..., Path], sig: signal.Signals
) -> None:
    tag = f"detol-test-{uuid.uuid4().hex}"
    study_file = write_study(training={"epochs": "400", "ranks": "2"},
                             tail=f'[launcher]\nenv = {{ DETOL_TEST_TAG = "{tag}" }}')
    journal = str(tmp_path / "j.journal")
    scratch = tmp_path / "tmp"  # the trial's temporary directory is made here
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    proc = subprocess.Popen([*search_command(), "run", str(study_file), "--storage", journal, "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
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
    assert list(scratch.glob("detol-trial-*")), "the trial's directory must exist while it runs"
    if sig == signal.SIGINT:  # once is enough: what a local trial's ranks listen on
        assert _listening_beyond_loopback(_processes_tagged(tag)) == [], \
            "a local trial's ranks listen on the machine's network"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert f"interrupted ({sig.name}): running trials marked failed and their parameters " \
           "re-queued; run again to resume" in err
    assert study is not None
    trial, queued = study.get_trials()
    assert trial.state is TrialState.FAIL
    assert trial.user_attrs["exit_reason"] == (
        f"driver interrupted ({sig.name}); parameters re-queued (attempt 2 of 2)")
    assert queued.state is TrialState.WAITING and queued.user_attrs["detol:retry_of"] == 0
    assert _processes_tagged(tag) == [], "MPI processes of the interrupted trial are still alive"
    assert list(scratch.glob("detol-trial-*")) == [], "the trial's directory was left behind"


def _listening_beyond_loopback(pids: list[int]) -> list[str]:
    """TCP sockets in LISTEN state on a non-loopback address that only these ranks hold (the one
    that MPICH's mpiexec hands its ranks, its control port, is left out: the ranks share it)."""
    rank_sockets: dict[str, set[str]] = {}
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").glob("*"):
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                rank_sockets.setdefault(target[8:-1], set()).add(str(pid))
    launcher = set()
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if (fd.parent.parent / "comm").read_text().strip() in ("mpiexec", "hydra_pmi_proxy"):
                launcher.add(os.readlink(fd)[8:-1])
        except OSError:
            continue
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            address = local.split(":")[0]
            loopback = address in ("0100007F", "00000000000000000000000001000000")
            if state == "0A" and inode in rank_sockets and inode not in launcher and not loopback:
                found.append(local)
    return found


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


@pytest.mark.unit
def test_trials_of_a_silent_driver_on_another_host_are_failed(tmp_path: Path) -> None:
    from search.driver._study import HEARTBEAT_ATTR

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


def test_kill_on_a_terminal_gives_the_cursor_back(tmp_path: Path) -> None:
    """The live bar hides the cursor; SIGTERM must show it again, as Ctrl-C does."""
    import pty

    (tmp_path / "slow.py").write_text("import time\ndef objective(params):\n"
                                      "    time.sleep(60)\n    return params['x']\n")
    study = tmp_path / "study.toml"
    study.write_text('name = "slow"\nobjective = "slow:objective"\nmetric = "x"\n'
                     'direction = "minimize"\n[space]\nx = { type = "float", low = 0, high = 1 }\n')
    journal = str(tmp_path / "j.journal")
    leader, follower = pty.openpty()
    proc = subprocess.Popen([*search_command(), "run", str(study), "--storage", journal],
                            stdin=follower, stdout=follower, stderr=follower, cwd=tmp_path,
                            env={**os.environ, "TERM": "xterm", "COLUMNS": "80"})
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 60
    while b"run 1 ok 0" not in seen and time.monotonic() < deadline:  # the bar shows the trial
        seen += os.read(leader, 65536)
    assert b"\x1b[?25l" in seen, seen.decode(errors="replace")  # the bar hid the cursor
    proc.send_signal(signal.SIGTERM)
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the process closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    assert proc.wait(timeout=60) == 143
    assert seen.rfind(b"\x1b[?25h") > seen.rfind(b"\x1b[?25l"), "the cursor stays hidden"
    # At 80 columns the bar keeps its width, its counters and the elapsed time.
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode(errors="replace"))
    assert re.search(r"━{16} +0/20 run 1 ok 0 pruned 0 fail 0 best - +0:00:\d\d", text), text


@pytest.mark.unit
def test_one_driver_heartbeat_keeps_all_its_trials_on_another_host(tmp_path: Path) -> None:
    from search.driver._study import HEARTBEAT_ATTR, driver_beat_key

    study = optuna.create_study(study_name="s", storage=open_storage(str(tmp_path / "j")))
    dist = {"lr": optuna.distributions.FloatDistribution(0.001, 0.1)}
    kept = [study.ask(dist) for _ in range(3)]
    for trial in kept:  # started long ago, the trials' own (old-style) beats long stale
        trial.set_user_attr(DRIVER_ATTR, "other-host:4244")
        trial.set_user_attr(HEARTBEAT_ATTR, time.time() - 600)
    study.set_user_attr(driver_beat_key("other-host:4244"), time.time() - 5)
    gone = study.ask(dist)
    gone.set_user_attr(DRIVER_ATTR, "other-host:4245")
    study.set_user_attr(driver_beat_key("other-host:4245"), time.time() - 600)

    assert recover_orphans(study, claim_wait_s=0.1) == [gone.number]
    trials = study.get_trials()
    assert all(trials[t.number].state is TrialState.RUNNING for t in kept)
    assert "sent no heartbeat for 6" in trials[gone.number].user_attrs["exit_reason"]
