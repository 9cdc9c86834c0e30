"""The ranks' watch over their peers on the same node (training/jobs/_peers.py): who counts as
a peer, when a peer counts as gone, and that a normal end is no alarm. The real thing, a rank
whose death the launcher misses, is tests/training/test_pool.py."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from training.jobs._peers import GONE_EXIT, _watch, node_peers, started

pytestmark = pytest.mark.unit

NO_PID = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process has it


def test_peers_are_the_other_watchable_ranks_on_this_node() -> None:
    everyone = [("h|pid:[1]", 10, "5"), ("h|pid:[2]", 11, "6"), ("h|pid:[1]", 12, None),
                ("h|pid:[1]", 13, "8"), ("g|pid:[1]", 14, "9")]
    # Another PID namespace on the same host is another node; a rank without a start time
    # (no /proc) cannot be watched; a rank does not watch itself.
    assert node_peers(everyone, 0) == [(3, 13, "8")]
    assert node_peers(everyone, 4) == []


def test_a_running_process_has_a_start_time_and_a_missing_one_has_none() -> None:
    assert started(os.getpid()) is not None and started(os.getpid()) == started(os.getpid())
    assert started(NO_PID) is None


class _Looks(threading.Event):
    """A stop event that lets the watch look ``looks`` times, at once, then stops it."""

    def __init__(self, looks: int) -> None:
        super().__init__()
        self.left = looks

    def wait(self, timeout: float | None = None) -> bool:
        if self.left <= 0:
            self.set()
        self.left -= 1
        return self.is_set()


def _run_watch(peers: list[tuple[int, int, str]], looks: int) -> list[int]:
    left: list[int] = []
    _watch(peers, 0, _Looks(looks), 0.0, left.append)
    return left


def test_a_peer_gone_for_two_looks_ends_the_rank(capfd: pytest.CaptureFixture[str]) -> None:
    me = started(os.getpid())
    assert me is not None
    # A live peer (this process) is no alarm; a pid that was reused (another start time) and
    # one that is gone are.
    assert _run_watch([(1, os.getpid(), me)], looks=5) == []
    assert _run_watch([(1, os.getpid(), me), (2, os.getpid(), "0")], looks=5) == [GONE_EXIT]
    assert "[rank 0] detol: rank 2 (pid" in capfd.readouterr().err
    assert _run_watch([(3, NO_PID, "1")], looks=5) == [GONE_EXIT]


def test_a_normal_end_is_no_alarm() -> None:
    # A peer seen gone once, then this rank is told the job ends (it saw the shut-down a few
    # milliseconds after a faster peer finished): no alarm. Nor when told before any look.
    assert _run_watch([(1, NO_PID, "1")], looks=1) == []
    assert _run_watch([(1, NO_PID, "1")], looks=0) == []
    assert _run_watch([(1, NO_PID, "1")], looks=2) == [GONE_EXIT]
