"""Ranks agree on which session call they are in, or the trial fails within a bound.

Ray Train's ``report`` is a barrier and Optuna's ``TorchDistributedTrial`` needs every rank to
make every call: a rank that skips a report (or returns early) leaves the others waiting for
ever. Here every control call of a :class:`training.Session` (report, checkpoint, the end of
``train``) first exchanges ``(call, number, epoch)`` with a nonblocking ``Iallgather`` on the
session's own communicator (a ``Dup``: it never matches the user's or the algorithm's
collectives), polled with ``Test()`` until a deadline. Then:

- every rank is in the same call: go on;
- the ranks are in different calls (one returned early, or reports another epoch): every rank
  sees the same table and raises the same :class:`RankDisagreement` naming who did what;
- not every rank came within ``timeout_s`` (one skipped the call and waits in a collective of
  its own, or is stuck): the ranks that came raise :class:`RankDisagreement`.

The program hosting the loop (``training.jobs.worker``) turns the exception into the trial's
failure and aborts the job, so no rank is left waiting.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

REPORT, SAVE, FINISH = 1, 2, 3
CALLS = {REPORT: "report", SAVE: "save_checkpoint", FINISH: "the end of train()"}
_SLEEP_S = 0.0005
_SPIN_S = 0.002  # poll without sleeping this long first: ranks in step arrive within it, and a
# sleep's wake-up on a loaded machine costs milliseconds (the built-in trainer agrees each epoch)


class RankDisagreement(RuntimeError):
    """The ranks of an own-loop trial did not make the same session calls."""


def _doing(call: int, number: int, epoch: int) -> str:
    if call == REPORT:
        return f"called report(epoch={epoch}), its report #{number}"
    if call == SAVE:
        return f"called save_checkpoint after {number} report(s)"
    return f"returned from train() after {number} report(s)"


def describe(table: np.ndarray) -> str | None:
    """None when every row of ``table`` (rank -> call, number, epoch) is the same call, else
    the one-line reason, the same on every rank."""
    rows = [tuple(int(v) for v in row) for row in table]
    if len(set(rows)) == 1:
        return None
    groups: dict[tuple[int, ...], list[int]] = {}
    for rank, row in enumerate(rows):
        groups.setdefault(row, []).append(rank)
    parts = [f"rank{'s' if len(r) > 1 else ''} {', '.join(map(str, r))} {_doing(*row)}"
             for row, r in groups.items()]
    return ("ranks disagree on the session calls: " + "; ".join(parts)
            + " (every rank must call session.report and save_checkpoint the same number of "
              "times, with the same epoch)")


def agree(ctrl: Any, call: int, number: int, epoch: int, timeout_s: float) -> None:
    """Collective on ``ctrl`` (waits for all ranks, at most ``timeout_s``): RankDisagreement
    unless every rank makes the same ``call`` with the same ``number`` and ``epoch``."""
    mine = np.array([call, number, epoch], dtype=np.int64)
    table = np.zeros((ctrl.size, 3), dtype=np.int64)
    request = ctrl.Iallgather(mine, table)  # waits for all ranks (polled below)
    now = time.monotonic()
    deadline, spin_until = now + timeout_s, now + _SPIN_S
    while not request.Test():
        now = time.monotonic()
        if now < spin_until:
            continue
        if now > deadline:
            raise RankDisagreement(
                f"rank {ctrl.rank} {_doing(call, number, epoch)} and waited {timeout_s:g} s "
                "for the other ranks to do the same: a rank skipped it (returned early, or "
                "went on to a collective of its own), or is stuck. Every rank must call "
                "session.report and save_checkpoint the same number of times; if a rank "
                "legitimately works longer alone between two calls, raise "
                "[training] agree_timeout_s"
            )
        time.sleep(_SLEEP_S)
    reason = describe(table)
    if reason is not None:
        raise RankDisagreement(reason)
