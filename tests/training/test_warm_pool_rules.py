"""The warm pool's host side (training/launch/_warm_pool.py) against a stand-in job
(tests/mpi_jobs/_fake_pool.py: rank 0's socket protocol, no MPI): a pool serves trial after
trial, is checked back in and out by its key, least recently used first, and every way a job
can end mid-trial is one failed result with the reason, the pool killed and its files gone. The
real pool (mpiexec, torch) runs in tests/training/test_pool.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import training.launch._line as _line
import training.launch._warm_pool as wp
from training._spec import TrialSpec
from training.launch import TRIAL_CORES_ENV

FAKE = str(Path(__file__).resolve().parents[1] / "mpi_jobs" / "_fake_pool.py")


def _spec(do: str, **kw: Any) -> TrialSpec:
    return TrialSpec(config={"ranks": 1}, launcher=[sys.executable, FAKE], warm=True,
                     own_loop={"function": "x:y", "params": {"do": do}}, **kw)


@pytest.fixture(autouse=True)
def _no_pools_left() -> Any:
    wp.shutdown_pools()
    yield
    wp.shutdown_pools()
    assert wp.idle_pools() == []


def _run(do: str, **kw: Any) -> dict[str, Any]:
    spec = _spec(do, **kw)
    return wp.run_warm_trial(spec, spec.config)


def test_one_pool_serves_trial_after_trial_and_waits_idle_between() -> None:
    first = _run("complete")
    assert first["state"] == "complete" and first["n"] == 1
    assert first["pool"]["fresh"] is True and first["pool"]["trial"] == 1
    (pool,) = wp.idle_pools()
    second = _run("complete")
    assert second["n"] == 2 and second["pool"] == {"pid": pool.pid, "trial": 2, "fresh": False}
    assert wp.idle_pools() == [pool] and pool.alive
    assert second["command"].endswith("-m training.jobs.warm_worker SOCKET PID")
    assert second["wall_time_s"] >= 0 and second["rank_seconds"] == second["wall_time_s"]
    assert "retire" not in second


def test_a_pool_that_asks_to_retire_is_killed_after_its_reply() -> None:
    result = _run("retire")
    assert result["state"] == "complete" and wp.idle_pools() == []
    assert _run("complete")["pool"]["fresh"] is True


def test_a_rank_that_dies_fails_the_trial_with_its_own_error_and_the_log() -> None:
    result = _run("die")
    assert result["state"] == "failed"
    assert result["exit_reason"] == "RuntimeError: rank 1 broke"
    assert "trial 1 does die" in result["log"]
    assert wp.idle_pools() == []  # a dead pool is never checked in
    assert _run("complete")["pool"]["fresh"] is True


def test_a_job_that_exits_without_a_word_fails_with_its_exit_code() -> None:
    result = _run("exit")
    assert result["state"] == "failed" and "5" in result["exit_reason"]
    assert wp.idle_pools() == []


def test_a_trial_past_its_timeout_is_failed_and_the_pool_killed() -> None:
    result = _run("hang", timeout_s=1.0)
    assert result["state"] == "failed"
    assert result["exit_reason"] == "trial timeout: still running after 1 s, MPI job killed"
    assert wp.idle_pools() == []


def test_a_cancelled_trial_is_failed_and_the_pool_killed() -> None:
    spec = _spec("hang")
    calls = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) > 2

    result = wp.run_warm_trial(spec, spec.config, should_stop=stop)
    assert result["exit_reason"] == "cancelled: the trial was stopped from outside, MPI job killed"
    assert wp.idle_pools() == []


def test_a_pool_that_never_connects_is_started_again_then_fails_naming_the_attempts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_POOL_NEVER_CONNECTS", "1")
    monkeypatch.setattr(wp, "LAUNCH_RETRY_WAIT_S", 0.0)
    result = _run("complete")
    assert result["state"] == "failed"
    assert result["exit_reason"].startswith(
        f"MPI job failed to start: not all 1 ranks of the warm pool got through MPI_Init (it "
        f"ended or was stuck), {wp.LAUNCH_ATTEMPTS} times\n")
    assert len(result["launch_failures"]) == wp.LAUNCH_ATTEMPTS
    assert all("failed before MPI_Init" in f for f in result["launch_failures"])


def test_a_pool_stuck_before_mpi_init_is_killed_and_started_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    monkeypatch.setattr(_line, "START_TIMEOUT_S", 1.0)
    monkeypatch.setattr(wp, "LAUNCH_RETRY_WAIT_S", 0.0)
    monkeypatch.setenv("FAKE_POOL_STUCK_ONCE", str(tmp_path / "stuck"))
    result = _run("complete")
    assert result["state"] == "complete" and result["n"] == 1, result
    (failure,) = result["launch_failures"]
    assert failure.startswith("start timeout: the ranks were not all through MPI_Init after 1 s "
                              "(DETOL_START_TIMEOUT_S=1, a third of trial_timeout if shorter), "
                              "MPI job killed"), failure
    stuck_pid = int((tmp_path / "stuck").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(stuck_pid, 0)  # killed and reaped: nothing left behind


def test_a_launcher_that_is_not_there_is_one_line() -> None:
    spec = TrialSpec(config={"ranks": 1}, launcher=["/nonexistent/mpiexec"], warm=True)
    result = wp.run_warm_trial(spec, spec.config)
    assert result["state"] == "failed" and "/nonexistent/mpiexec" in result["exit_reason"]
    assert result["wall_time_s"] == 0.0


class _Pool:
    def __init__(self, alive: bool = True) -> None:
        self.alive = alive
        self.closed = self.killed = False

    def close(self) -> None:
        self.closed = True

    def kill(self) -> None:
        self.killed = True


def test_idle_pools_are_kept_by_key_and_the_least_recently_used_closes_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wp, "MAX_IDLE_POOLS", 2)
    a, b, c = _Pool(), _Pool(), _Pool()
    key1: Any = (("l1",), ())
    key2: Any = (("l2",), ())
    wp._check_in(key1, a)  # type: ignore[arg-type]  # noqa: SLF001
    wp._check_in(key2, b)  # type: ignore[arg-type]  # noqa: SLF001
    assert wp.idle_pools() == [a, b]
    wp._check_in(key1, c)  # type: ignore[arg-type]  # noqa: SLF001
    assert a.closed and not b.closed and wp.idle_pools() == [b, c]
    assert wp._check_out(key1) is c  # noqa: SLF001
    assert wp._check_out(key1) is None and wp.idle_pools() == [b]  # noqa: SLF001
    b.alive = False
    assert wp._check_out(key2) is None and b.killed and wp.idle_pools() == []  # noqa: SLF001


def test_the_newest_idle_pool_of_a_key_is_checked_out_first() -> None:
    old, new = _Pool(), _Pool()
    key: Any = (("l",), ())
    wp._check_in(key, old)  # type: ignore[arg-type]  # noqa: SLF001
    wp._check_in(key, new)  # type: ignore[arg-type]  # noqa: SLF001
    assert wp._check_out(key) is new and wp.idle_pools() == [old]  # noqa: SLF001
    wp.shutdown_pools()
    assert old.closed and wp.idle_pools() == []


def test_a_pool_needs_a_launcher() -> None:
    with pytest.raises(ValueError, match="launcher must be a non-empty argv list"):
        wp.WarmPool(launcher=[], env={})


def test_the_job_gets_the_trials_environment_and_this_process_as_its_parent() -> None:
    result = _run("complete", env={"FAKE_POOL_TAG": "seen"})
    assert result["tag"] == "seen" and result["parent"] == os.getpid()
    assert "retire" not in result


def test_a_reply_that_arrives_in_pieces_is_read_whole() -> None:
    result = _run("split")
    assert result["state"] == "complete" and result["n"] == 1


def test_a_job_that_closes_its_socket_and_lingers_is_killed_after_the_close_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wp, "_CLOSE_WAIT_S", 0.5)
    result = _run("linger")
    assert result["state"] == "failed" and result["exit_reason"].startswith("warm pool broke:")
    assert wp.idle_pools() == []


def test_a_job_that_closes_its_socket_and_exits_fails_the_trial_with_its_output() -> None:
    result = _run("close")
    assert result["state"] == "failed" and "trial 1 does close" in result.get("log", "")
    assert wp.idle_pools() == []


def test_a_pool_is_one_process_group_with_its_files_removed_when_killed() -> None:
    pool = wp.WarmPool(launcher=[sys.executable, FAKE], env=dict(os.environ))
    assert pool.pid is None and pool.alive is False and pool.trials_served == 0
    pool.start()
    try:
        assert pool.alive and os.getpgid(pool.pid) == pool.pid  # type: ignore[arg-type]
        folder = pool._dir  # noqa: SLF001
        assert folder is not None and folder.name.startswith("detol-pool-")
        assert (folder / "s").is_socket() and pool.env == dict(os.environ)
    finally:
        pool.kill()
    assert not pool.alive and not folder.exists()


def test_the_folders_of_pools_whose_worker_died_are_swept_at_the_next_pool_start(
        tmp_path: Path) -> None:
    # A worker killed with its batch job (SIGTERM, SIGKILL) leaves a busy pool's folder behind.
    host = socket.gethostname()
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    dead = int(ended.stdout)
    gone = tmp_path / f"detol-pool-{host}-{dead}-abc"
    mine = tmp_path / f"detol-pool-{host}-{os.getpid()}-def"  # a live worker's pool
    other = tmp_path / f"detol-pool-other-host-{dead}-ghi"  # another node's, on a shared /tmp
    for folder in (gone, mine, other):
        folder.mkdir()
        (folder / "output.log").write_text("srun: ...")
    assert wp.sweep_pool_dirs(str(tmp_path)) == [gone.name]
    assert not gone.exists() and mine.exists() and other.exists()


def test_a_trial_that_raised_fails_with_the_tail_of_its_traceback_and_the_pool_serves_on() -> None:
    result = _run("raise")
    assert result["state"] == "failed" and "traceback" not in result
    assert result["exit_reason"] == ("ValueError: bad batch\nTraceback (most recent call last):\n"
                                     "ValueError: bad batch")
    assert len(wp.idle_pools()) == 1 and _run("complete")["pool"]["fresh"] is False


def test_the_launch_overhead_is_from_the_ask_to_the_first_step() -> None:
    result = _run("complete", ask_time=1000.0)
    assert result["launch_overhead_s"] == 0.5
    assert "launch_overhead_s" not in _run("complete")  # no ask time: not computed


def test_wall_and_rank_seconds_are_the_trials_own() -> None:
    import time

    before = time.time()
    spec = TrialSpec(config={"ranks": 3, "batch_size": 8}, launcher=[sys.executable, FAKE],
                     warm=True, own_loop={"function": "x:y", "params": {"do": "complete"}})
    result = wp.run_warm_trial(spec, spec.config)
    assert 0.0 < result["wall_time_s"] <= time.time() - before
    assert result["rank_seconds"] == pytest.approx(3 * result["wall_time_s"])


def test_pools_are_kept_apart_by_their_environment_and_threads() -> None:
    first = _run("complete", env={"FAKE_POOL_TAG": "a"})
    again = _run("complete", env={"FAKE_POOL_TAG": "a"})
    other = _run("complete", env={"FAKE_POOL_TAG": "b"})
    assert again["pool"]["pid"] == first["pool"]["pid"] and other["pool"]["fresh"] is True
    # threads_per_rank left out: the cores this process may use over the trial's 1 rank.
    assert first["threads"] == str(len(os.sched_getaffinity(0)))
    with_cores = _run("complete", env={"FAKE_POOL_TAG": "a", TRIAL_CORES_ENV: "3"})
    assert with_cores["threads"] == "3"  # the driver's share of the machine (DETOL_TRIAL_CORES)
    spec = TrialSpec(config={"ranks": 1, "threads_per_rank": 2}, launcher=[sys.executable, FAKE],
                     warm=True, own_loop={"function": "x:y", "params": {"do": "complete"}})
    wider = wp.run_warm_trial(spec, spec.config)
    assert wider["pool"]["fresh"] is True and wider["threads"] == "2"
    assert len(wp.idle_pools()) == 4


def test_the_start_failures_are_listed_with_each_ones_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_POOL_NEVER_CONNECTS", "1")
    monkeypatch.setattr(wp, "LAUNCH_RETRY_WAIT_S", 0.0)
    result = _run("complete")
    assert result["launch_failures"] == [
        "MPI job exited with code 4: fake pool: failed before MPI_Init"] * wp.LAUNCH_ATTEMPTS
    assert result["exit_reason"].splitlines()[1:] == ["MPI job exited with code 4",
                                                      "fake pool: failed before MPI_Init"]


def test_close_asks_the_ranks_to_leave_and_removes_the_pools_files() -> None:
    assert _run("complete")["state"] == "complete"
    (pool,) = wp.idle_pools()
    folder = pool._dir  # noqa: SLF001
    pool.close(timeout=5.0)
    assert not pool.alive and pool.proc.returncode == 0  # type: ignore[union-attr]
    assert folder is not None and not folder.exists()
    never = wp.WarmPool(launcher=[sys.executable, FAKE], env={})
    never.close()  # never started: nothing to do


def test_a_pool_that_closes_and_is_killed_leaves_nothing_open() -> None:
    pool = wp.WarmPool(launcher=[sys.executable, FAKE], env=dict(os.environ))
    pool.start()
    pool.kill()
    assert pool._conn is None and pool._listener is None and pool._dir is None  # noqa: SLF001
    pool.kill()  # twice: nothing left to do


def test_threads_per_rank_left_out_share_the_trial_s_cores() -> None:
    from training.launch import rank_threads

    assert rank_threads(5, 2, {TRIAL_CORES_ENV: "8"}) == 5  # set: kept
    assert rank_threads(None, 2, {TRIAL_CORES_ENV: "8"}) == 4
    assert rank_threads(None, 3, {TRIAL_CORES_ENV: "2"}) == 1  # at least one
    assert rank_threads(None, 1, {}) == len(os.sched_getaffinity(0))
