"""Faults, for real: a Dask worker or the driver SIGKILLed, an MPI rank dying, a trial past its
timeout, the PostgreSQL server restarted. Each study still ends with its budget and nothing
left RUNNING."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

from tests.cli_helpers import search_command
from tests.search.conftest import PostgresServer
from tests.search.test_recovery import _processes_tagged
from training.contract import open_storage


def _inline(table: dict[str, str]) -> str:
    """A TOML inline table."""
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in table.items()) + " }"


def _objective_module(directory: Path, body: str) -> None:
    (directory / "faulty.py").write_text(textwrap.dedent(body))


def _function_study(directory: Path, *, trials: int, concurrency: int, extra: str = "") -> Path:
    path = directory / "study.toml"
    path.write_text(textwrap.dedent(f"""\
        name = "faults"
        objective = "faulty:objective"
        metric = "score"
        direction = "maximize"
        pruner = "none"
        [strategy]
        name = "random"
        seed = 3
        [budget]
        trials = {trials}
        concurrency = {concurrency}
        {extra}
        [space]
        x = {{ type = "float", low = 0, high = 1 }}
        """))
    return path


def _start(study: Path, storage: str, cwd: Path,
           env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([*search_command(), "run", str(study), "--storage", storage,
                             "--no-progress"], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)


def _finish(
    proc: subprocess.Popen[str], storage: str, timeout: float, name: str = "faults"
) -> tuple[str, str]:
    """The driver's output once it exits; past ``timeout`` it is killed (with its cluster) and
    the test fails with what it printed and the trials' states, not a bare TimeoutExpired."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        try:
            states = [(t.number, t.state.name, t.user_attrs.get("exit_reason"))
                      for t in _trials(storage, name)]
        except Exception as exc:  # noqa: BLE001 - the diagnosis must not hide the failure
            states = [("unreadable", repr(exc), None)]
        pytest.fail(f"the driver did not end within {timeout:g} s; trials: {states}\n"
                    f"stdout:\n{out}\nstderr:\n{err}")


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


def _trials(storage: str, name: str = "faults") -> list[FrozenTrial]:
    return optuna.load_study(study_name=name, storage=open_storage(storage)).get_trials()


def _states(trials: list[FrozenTrial]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in trials:
        out[t.state.name] = out.get(t.state.name, 0) + 1
    return out


def test_killed_dask_worker_fails_its_trial_and_the_parameters_run_again(tmp_path: Path) -> None:
    # The one trial to claim the victim file records its pid and sleeps; the test kills that
    # worker. Every other call (the retry included) answers at once.
    _objective_module(tmp_path, f"""
        import os, time
        from pathlib import Path

        VICTIM = Path({str(tmp_path)!r}) / "victim"

        def objective(params):
            try:  # exactly one trial claims the victim's part, however many start at once
                os.close(os.open(VICTIM.with_suffix(".claim"), os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass
            else:
                VICTIM.with_suffix(".tmp").write_text(str(os.getpid()))
                VICTIM.with_suffix(".tmp").rename(VICTIM)
                time.sleep(120)
            time.sleep(0.2)
            return params["x"]
        """)
    study = _function_study(tmp_path, trials=6, concurrency=2)
    storage = str(tmp_path / "s.journal")
    proc = _start(study, storage, tmp_path)
    victim = tmp_path / "victim"
    _wait_for(victim.exists, "the first trial to start")
    worker_pid = int(victim.read_text())
    assert worker_pid != proc.pid
    os.kill(worker_pid, signal.SIGKILL)
    out, err = _finish(proc, storage, 120)
    assert proc.returncode == 0, out + err

    trials = _trials(storage)
    assert _states(trials) == {"COMPLETE": 6, "FAIL": 1}
    (failed,) = [t for t in trials if t.state is TrialState.FAIL]
    reason = failed.user_attrs["exit_reason"]
    assert "worker" in reason.lower() and "re-queued (attempt 2 of 2)" in reason
    assert failed.user_attrs["detol:requeued"] is True
    (retry,) = [t for t in trials if t.user_attrs.get("detol:retry_of") == failed.number]
    assert retry.state is TrialState.COMPLETE
    assert retry.params == failed.params
    assert retry.user_attrs["detol:attempt"] == 2


def test_retries_stop_at_max_retries(tmp_path: Path) -> None:
    # Every run of x's parameters kills its worker: 1 + max_retries attempts, then given up.
    _objective_module(tmp_path, """
        import os, signal

        def objective(params):
            os.kill(os.getpid(), signal.SIGKILL)
        """)
    study = _function_study(tmp_path, trials=1, concurrency=1,
                            extra="max_retries = 2\nmax_failures = 3")
    storage = str(tmp_path / "s.journal")
    proc = _start(study, storage, tmp_path)
    out, err = _finish(proc, storage, 120)
    assert proc.returncode == 1, out + err  # stopped by max_failures
    trials = _trials(storage)
    assert [t.state for t in trials] == [TrialState.FAIL] * 3
    assert len({json.dumps(t.params) for t in trials}) == 1  # the same parameters, 3 times
    assert [t.user_attrs.get("detol:attempt", 1) for t in trials] == [1, 2, 3]
    assert "not re-queued (attempt 3, budget.max_retries=2)" in trials[2].user_attrs["exit_reason"]


def test_killed_driver_resumes_without_losing_or_repeating_finished_trials(
    tmp_path: Path,
) -> None:
    _objective_module(tmp_path, """
        import time

        def objective(params):
            time.sleep(1.0)
            return params["x"]
        """)
    study = _function_study(tmp_path, trials=8, concurrency=2)
    storage = str(tmp_path / "s.journal")
    proc = _start(study, storage, tmp_path)

    def some_finished() -> bool:
        try:
            trials = _trials(storage)
        except KeyError:
            return False
        done = sum(t.state is TrialState.COMPLETE for t in trials)
        return done >= 3 and any(t.state is TrialState.RUNNING for t in trials)

    _wait_for(some_finished, "three finished trials")
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its local Dask cluster, as a crash
    proc.communicate(timeout=30)
    before = {t.number: t for t in _trials(storage) if t.state is TrialState.COMPLETE}
    orphans = [t for t in _trials(storage) if t.state is TrialState.RUNNING]
    assert orphans

    again = _start(study, storage, tmp_path)
    out, err = again.communicate(timeout=180)
    assert again.returncode == 0, out + err
    assert sorted(int(n) for n in re.findall(r"^trial (\d+) failed: ", out, re.M)) == sorted(
        t.number for t in orphans)

    trials = _trials(storage)
    assert _states(trials) == {"COMPLETE": 8, "FAIL": len(orphans)}
    for number, t in before.items():  # nothing finished was lost or changed
        assert trials[number].state is TrialState.COMPLETE and trials[number].value == t.value
    for orphan in orphans:
        failed = trials[orphan.number]
        if not orphan.params:  # asked, but the driver died before it claimed and started it
            assert "before the trial started" in failed.user_attrs["exit_reason"]
            continue
        assert "died while the trial ran" in failed.user_attrs["exit_reason"]
        (retry,) = [t for t in trials if t.user_attrs.get("detol:retry_of") == orphan.number]
        assert retry.params == orphan.params and retry.state is TrialState.COMPLETE
    keys = [json.dumps(t.params, sort_keys=True) for t in trials if t.state is TrialState.COMPLETE]
    assert len(keys) == len(set(keys))  # no parameters evaluated twice to completion


@pytest.mark.mpi
def test_dead_rank_fails_its_trial_quickly_and_the_worker_runs_the_next(
    tmp_path: Path, write_study: Callable[..., Path], helpers_env: dict[str, str]
) -> None:
    env = {**helpers_env, "DETOL_FAULT_DIR": str(tmp_path)}
    study = write_study(
        top='pruner = "none"\nstrategy = "random"',
        training={"dataset": '"_trial_helpers:digits_rank1_dies_once"', "epochs": "3",
                  "ranks": "2", "hidden": "16"},
        tail=f"[budget]\ntrials = 2\nmax_failures = 3\n[launcher]\nenv = {_inline(env)}",
    )
    storage = str(tmp_path / "s.journal")
    done = subprocess.run([*search_command(), "run", str(study), "--storage", storage,
                           "--no-progress"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    trials = _trials(storage, "t")
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE]
    failed = trials[0]
    assert "rank" in failed.user_attrs["exit_reason"].lower() or "exit" in failed.user_attrs[
        "exit_reason"].lower()
    assert failed.user_attrs["wall_time_s"] < 60  # bounded: no rank waits forever
    assert "detol:requeued" not in failed.user_attrs  # the trial's own failure: not retried


@pytest.mark.mpi
def test_trial_past_its_timeout_is_stopped_and_recorded(
    tmp_path: Path, write_study: Callable[..., Path]
) -> None:
    tag = f"detol-test-{uuid.uuid4().hex}"
    study = write_study(
        top='pruner = "none"\nstrategy = "random"',
        training={"epochs": "1000", "ranks": "2"},
        tail=f"[budget]\ntrials = 1\ntrial_timeout = 6\nmax_failures = 1\n"
             f'[launcher]\nenv = {{ DETOL_TEST_TAG = "{tag}" }}',
    )
    storage = str(tmp_path / "s.journal")
    started = time.monotonic()
    done = subprocess.run([*search_command(), "run", str(study), "--storage", storage,
                           "--no-progress"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr  # max_failures reached
    (trial,) = _trials(storage, "t")
    assert trial.state is TrialState.FAIL
    assert "timeout" in trial.user_attrs["exit_reason"].lower()
    assert 6 <= trial.user_attrs["wall_time_s"] < 20
    assert time.monotonic() - started < 90
    assert _processes_tagged(tag) == []


@pytest.mark.mpi
def test_postgresql_restart_during_a_study_loses_nothing(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    _objective_module(tmp_path, """
        import time

        def objective(params, report):
            for step in range(3):
                time.sleep(0.1)
                report(step, params["x"] * step)  # the worker writes to the database too
            return params["x"]
        """)
    study = _function_study(tmp_path, trials=24, concurrency=2).read_text()
    study = study.replace('name = "faults"', f'name = "pg-restart-{uuid.uuid4().hex[:8]}"')
    name = study.split('"')[1]
    path = tmp_path / "pg.toml"
    path.write_text(study)
    url = postgres_server.url
    proc = _start(path, url, tmp_path)

    def finished() -> int:
        try:
            return sum(t.state is TrialState.COMPLETE for t in _trials(url, name))
        except KeyError:
            return 0

    _wait_for(lambda: finished() >= 5, "five finished trials")
    postgres_server.stop()
    time.sleep(3)  # the driver and the workers meet a dead server
    postgres_server.start()
    out, err = _finish(proc, url, 240, name)
    assert proc.returncode == 0, out + err
    assert "retrying" in err
    trials = _trials(url, name)
    reasons = [t.user_attrs.get("exit_reason") for t in trials if t.state is TrialState.FAIL]
    assert _states(trials) == {"COMPLETE": 24}, reasons
    assert all(len(t.intermediate_values) == 3 for t in trials)


def _ancestor_outside(pids: list[int]) -> int:
    """The first process above ``pids`` that is not one of them (the tagged MPI job's parent:
    the Dask worker that launched it)."""
    tagged = set(pids)
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat").read_text()
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent not in tagged:
            return parent
    raise AssertionError(f"no parent outside {pids}")


@pytest.mark.mpi
def test_a_trial_lost_with_its_worker_resumes_from_its_last_checkpoint(tmp_path: Path) -> None:
    # A slowed 1-rank trial writes a checkpoint every epoch; once one of epoch >= 2 is in the
    # storage, the Dask worker running the job is SIGKILLed (its mpiexec dies with it). The
    # re-queued trial must continue from that checkpoint, not from epoch 1.
    tag = f"detol-ckpt-{uuid.uuid4().hex}"
    study = tmp_path / "study.toml"
    study.write_text(textwrap.dedent(f"""\
        name = "faults"
        pruner = "none"
        [budget]
        trials = 1
        [checkpoints]
        every = 1
        [training]
        dataset = "digits"
        epochs = 8
        ranks = 1
        hidden = 64
        slowdown = [25]
        [launcher]
        env = {{ DETOL_TEST_TAG = "{tag}" }}
        [space]
        lr = {{ type = "float", low = 0.01, high = 0.1, log = true }}
        """))
    storage = str(tmp_path / "s.journal")
    scratch = tmp_path / "tmp"  # the trials' folders are made here
    scratch.mkdir()
    proc = _start(study, storage, tmp_path, env={**os.environ, "TMPDIR": str(scratch)})

    def checkpointed() -> bool:
        try:
            trials = _trials(storage)
        except KeyError:  # the study is not created yet
            return False
        point = trials[0].user_attrs.get("detol:checkpoint") if trials else None
        return bool(point) and point["epoch"] >= 2

    _wait_for(checkpointed, "a checkpoint of epoch 2", timeout=120)
    worker = _ancestor_outside(_processes_tagged(tag))
    assert worker != proc.pid
    assert len(list(scratch.glob("detol-trial-*"))) == 1  # the killed worker's trial's folder
    os.kill(worker, signal.SIGKILL)
    out, err = _finish(proc, storage, 180)
    assert proc.returncode == 0, out + err
    # the retry, on this host, swept the folder the killed worker could not remove
    assert list(scratch.glob("detol-trial-*")) == []

    trials = _trials(storage)
    assert _states(trials) == {"COMPLETE": 1, "FAIL": 1}, [t.user_attrs.get("exit_reason")
                                                         for t in trials]
    failed, retry = trials
    saved = failed.user_attrs["detol:checkpoint"]["epoch"]  # the newest before the kill
    assert saved >= 2
    assert f"re-queued from its epoch-{saved} checkpoint" in failed.user_attrs["exit_reason"]
    assert retry.user_attrs["detol:resume_from"]["epoch"] == saved
    assert retry.user_attrs["start_epoch"] == saved + 1
    assert retry.user_attrs["epochs_run"] == 8 - saved  # the lost epochs only, not all 8
    assert sorted(retry.intermediate_values) == list(range(1, 9))
    assert [r["epoch"] for r in retry.user_attrs["history"]] == list(range(1, 9))
