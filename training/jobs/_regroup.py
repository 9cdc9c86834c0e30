"""In-place resize on a warm pool (issue 31): a trial runs on a sub-communicator of the pool's
ranks, and the state of its last pause stays in the pool's memory.

A warm pool of P ranks (training.jobs.warm_worker, ``[launcher] warm = true`` with ``[resize]``: P
is
``resize.max_ranks``) serves a trial of Q <= P ranks on :func:`regroup`'s communicator of its
first Q ranks; the other P - Q ranks wait for the trial's end in the pool's polled agreement
(no CPU). When the trial pauses (a rung, or to widen into idle slots), its checkpoint is written
to the study's store as always, and rank 0 also keeps it in the pool's :class:`Shelf`. A
continuation of that trial served by the same pool, on any width up to P, is a new
sub-communicator of the same processes: rank 0 takes the rank states from the shelf (no file
read back, no new job, no imports), reshards them (training.state._reshard) and scatters them. A
continuation that lands on another pool or a cold job reads the file, as before: the shelf is a
shortcut, never the only copy.

>>> shelf = Shelf(limit=2)
>>> for key in "abc":
...     shelf[key] = {"epoch": 1}
>>> sorted(shelf)
['b', 'c']
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

SHELF_LIMIT = 4  # paused states a pool keeps (rank 0's memory); the oldest goes first


class Shelf(OrderedDict[str, dict[str, Any]]):
    """Checkpoints (header + every rank's state) by artifact id, the last ``limit`` kept."""

    def __init__(self, limit: int = SHELF_LIMIT) -> None:
        super().__init__()
        self.limit = limit

    def __setitem__(self, key: str, value: dict[str, Any]) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)


def regroup(pool: Any, width: int) -> Any:
    """Collective on ``pool`` (waits for all its ranks): a communicator of its first ``width``
    ranks, in the pool's order (its rank 0 is the pool's, where the shelf lives); None on the
    ranks left out. ``width`` must be the same on every rank and at most ``pool.size``."""
    from mpi4py import MPI

    if not 1 <= width <= pool.size:
        raise ValueError(f"ranks: a pool of {pool.size} ranks cannot run {width}")
    comm = pool.Split(0 if pool.rank < width else MPI.UNDEFINED, key=pool.rank)
    return None if comm == MPI.COMM_NULL else comm
