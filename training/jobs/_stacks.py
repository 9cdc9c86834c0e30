"""A hung trial says where it hangs: every rank prints every thread's stack shortly before the
trial's deadline, so the log of a trial killed for its timeout shows each rank's place (cold
jobs, ``training.jobs.worker``, and each trial a warm pool serves, ``training.jobs.warm_worker``).
"""

from __future__ import annotations

import faulthandler
import sys
import threading
import time

# Seconds after the deadline dump that faulthandler's own watchdog dumps instead: only when the
# dump could not take the GIL (a thread holds it inside a C call, so its frames stand still).
GIL_HELD_GRACE_S = 3.0


def _dump_stacks_at(after_s: float, lead_s: float) -> threading.Timer:
    """Print every thread's stack to stderr after ``after_s`` seconds (``lead_s`` before the
    trial's deadline), holding the GIL; cancel it with :func:`cancel`.

    faulthandler's watchdog (dump_traceback_later) reads the other threads' frames without the
    GIL, while they run: CI saw it read a torch backward frame mid-update and crash the rank
    (SIGSEGV, "line 57010688"). A Python thread dumps between bytecodes, where frames are whole."""
    def dump() -> None:
        sys.stderr.write(f"detol: {lead_s:.0f} s before the trial's deadline; "
                         "every thread's stack follows\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(sys.stderr, all_threads=True)
        sys.stderr.flush()
        faulthandler.cancel_dump_traceback_later()

    timer = threading.Timer(after_s, dump)
    timer.daemon = True
    timer.start()
    faulthandler.dump_traceback_later(after_s + GIL_HELD_GRACE_S)
    return timer


def stacks_before(deadline: float | None, timeout_s: float | None) -> threading.Timer | None:
    """:func:`_dump_stacks_at` for a trial that ends at ``deadline`` (the launcher's clock,
    ``time.time()``; ``None``: ``timeout_s`` from now); ``None`` without a timeout."""
    if not timeout_s:
        return None
    lead = min(10.0, 0.2 * timeout_s)  # a fifth of the timeout, 10 s at most
    end = time.time() + timeout_s if deadline is None else deadline
    return _dump_stacks_at(max(0.0, end - lead - time.time()), lead)


def cancel(timer: threading.Timer | None) -> None:
    """Stop a dump that has not happened (the trial ended first), and faulthandler's fallback."""
    if timer is not None:
        timer.cancel()
    faulthandler.cancel_dump_traceback_later()
