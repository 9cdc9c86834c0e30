"""Uneven ranks on purpose: a rank made ``factor`` times slower than it is, for experiments.

A straggler is modelled as a slower device: after computing its gradient, the rank sleeps
``(factor - 1)`` times the CPU time that computation took (this thread's CPU time, so other
load on the machine does not change how much slower it is). Sleeping, not spinning, is what a
slower GPU or a busier node looks like to the host: the core is free while it waits. The
communication that follows (an allreduce, a one-sided send) is not slowed: a slow device on a
normal network.

``[training] slowdown = [1, 3]`` makes rank 1 three times slower than rank 0; ranks past the
end of the list run at their own pace.
"""

from __future__ import annotations

import time
from collections.abc import Sequence


class Pace:
    """``start()`` before the rank's computation, ``stop()`` after it (sleeps if slowed)."""

    def __init__(self, slowdown: Sequence[float], rank: int) -> None:
        self.factor = float(slowdown[rank]) if rank < len(slowdown) else 1.0
        self.slept_s = 0.0
        self._t = 0.0

    def start(self) -> None:
        if self.factor != 1.0:
            self._t = time.thread_time()

    def stop(self) -> None:
        if self.factor != 1.0:
            wait = (self.factor - 1.0) * (time.thread_time() - self._t)
            time.sleep(wait)
            self.slept_s += wait
