"""Each rank's share of every epoch: the one sampling rule of the synchronous algorithms, for
the built-in trainer and a user's own loop (``Session.sampler``/``Session.shard``) alike.

The epoch's order is one permutation of the dataset, the same on every rank (seed and epoch);
it is cut into global batches of ``batch_size`` and rank ``r`` takes ``batch[r::size]`` of each.
So every sample is read exactly once per epoch across the ranks, every rank takes the same
number of steps (a synchronous algorithm never waits for a step that another rank does not
take), and the trajectory does not depend on the rank count. A last global batch too small to
give every rank a sample joins the one before it, so no rank ever gets an empty batch.

Unlike ``torch.utils.data.DistributedSampler`` nothing is padded or dropped, and the epoch
advances by itself at each pass (``set_epoch`` still works, e.g. after a resume). The
asynchronous algorithms claim batches instead (:class:`training.data.ClaimedBatches`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data import Sampler


class GlobalBatchSlices(Sampler[list[int]]):
    """This rank's slice of every global batch of each epoch: a ``batch_sampler`` for a
    ``DataLoader``. ``arrays``: yield index arrays (in-memory sets) instead of lists.

    >>> s = GlobalBatchSlices(10, batch_size=4, rank=1, size=2, shuffle=False)
    >>> list(s), [s.global_batch(i) for i in range(len(s))]
    ([[1, 3], [5, 7], [9]], [4, 4, 2])
    >>> list(GlobalBatchSlices(9, batch_size=4, rank=1, size=2, shuffle=False))
    [[1, 3], [5, 7]]
    """

    def __init__(
        self,
        n: int,
        *,
        batch_size: int,
        rank: int,
        size: int,
        shuffle: bool = True,
        seed: int = 0,
        epoch: int = 1,
        arrays: bool = False,
    ) -> None:
        if size < 1 or not 0 <= rank < size:
            raise ValueError(f"rank {rank} is not a rank of a job of size {size}")
        if batch_size < size:
            raise ValueError(
                f"batch_size {batch_size} is smaller than the {size} ranks: batch_size is the "
                "global batch, split across ranks, so each rank needs at least one sample"
            )
        if n < size:
            raise ValueError(f"the dataset has {n} samples, fewer than the {size} ranks")
        self.n = n
        self.batch_size = batch_size
        self.rank = rank
        self.size = size
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = epoch
        self.arrays = arrays
        bounds = [(s, min(s + batch_size, n)) for s in range(0, n, batch_size)]
        if len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] < size:
            bounds[-2:] = [(bounds[-2][0], bounds[-1][1])]  # too small to split: joins the last
        self.bounds = bounds

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next pass reads (passes after it count up from there)."""
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.bounds)

    def global_batch(self, i: int) -> int:
        """Rows of global batch ``i`` (all ranks together)."""
        start, stop = self.bounds[i]
        return stop - start

    def __iter__(self) -> Iterator[Any]:
        epoch = self.epoch
        self.epoch += 1  # the next pass is the next epoch, unless set_epoch says otherwise
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.n)
        else:
            order = np.arange(self.n)
        for start, stop in self.bounds:
            rows = order[start:stop][self.rank :: self.size]
            yield rows if self.arrays else rows.tolist()
