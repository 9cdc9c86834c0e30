"""Ranks that run at different speeds share an epoch's batches by claiming them.

For algorithms whose ranks never wait for each other during an epoch (``asgd``,
``simuparallel``), a fixed split would make every rank take the same number of steps, so a fast
rank would idle at the epoch's end until the slowest finished its share: asynchrony would buy
nothing. Instead, before each step a rank claims the next local batch of the epoch's order with
one MPI-3 atomic ``Fetch_and_op`` on a counter in rank 0's window; a rank twice as fast takes
about twice the batches. Every sample is still used exactly once per epoch.

No reset between epochs: every rank stops at its first claim past the epoch's end, so an epoch
takes exactly ``batches + ranks`` claims, and epoch e's claims start at ``e * (batches +
ranks)``. The next epoch cannot begin before every rank has made its last claim, because the
trainer's end-of-epoch collective waits for all ranks.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI


class BatchClaims:
    def __init__(self, comm: MPI.Comm) -> None:
        self.comm = comm
        self.win = MPI.Win.Allocate(8 if comm.rank == 0 else 0, disp_unit=8, comm=comm)  # type: ignore[arg-type]
        if comm.rank == 0:
            np.frombuffer(memoryview(self.win), dtype=np.int64)[:] = 0  # type: ignore[arg-type]
        comm.Barrier()  # waits for all ranks: the counter is zero before anyone claims
        self.win.Lock_all(MPI.MODE_NOCHECK)
        self._one = np.ones(1, np.int64)
        self._got = np.zeros(1, np.int64)
        self._base = 0
        self.claimed = 0  # batches this rank took, over all epochs

    def claim(self, batches: int) -> int | None:
        """The next batch index of this epoch for this rank, or None when the epoch is done."""
        self.win.Fetch_and_op(self._one, self._got, 0, 0, MPI.SUM)
        self.win.Flush(0)  # completes the atomic: _got holds the counter's old value
        index = int(self._got[0]) - self._base
        if index < batches:
            self.claimed += 1
            return index
        return None

    def end_epoch(self, batches: int) -> None:
        """Call on every rank after the epoch's collective (every rank has stopped claiming)."""
        self._base += batches + self.comm.size

    def close(self) -> None:
        self.win.Unlock_all()
        self.comm.Barrier()  # waits for all ranks: nobody claims from a freed window
        self.win.Free()
