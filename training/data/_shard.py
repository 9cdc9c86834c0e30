"""Each rank's share of every epoch, for a loop of the user's own (``Session.shard``).

The epoch's order is one permutation of the dataset, the same on every rank (seed and epoch);
it is cut into global batches of ``batch_size`` and rank ``r`` takes ``batch[r::size]`` of each,
as the built-in trainer does. So every sample is read exactly once per epoch across the ranks,
every rank takes the same number of steps (a synchronous algorithm never waits for a step that
another rank does not take), and the trajectory does not depend on the rank count. A last
global batch too small to give every rank a sample joins the one before it.

Unlike ``torch.utils.data.DistributedSampler`` nothing is padded or dropped, and the epoch
advances by itself at each pass (``set_epoch`` still works, e.g. after a resume).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch


class ShardBatches(torch.utils.data.Sampler[list[int]]):
    """This rank's local batches of each epoch: a ``batch_sampler`` for a ``DataLoader``.

    >>> s = ShardBatches(10, batch_size=4, rank=1, size=2, shuffle=False)
    >>> list(s)
    [[1, 3], [5, 7], [9]]
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

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next pass reads (passes after it count up from there)."""
        self.epoch = epoch

    def _bounds(self) -> list[tuple[int, int]]:
        bounds = [(s, min(s + self.batch_size, self.n)) for s in range(0, self.n, self.batch_size)]
        if len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] < self.size:
            bounds[-2:] = [(bounds[-2][0], bounds[-1][1])]  # too small to split: joins the last
        return bounds

    def __len__(self) -> int:
        return len(self._bounds())

    def __iter__(self) -> Iterator[list[int]]:
        epoch = self.epoch
        self.epoch += 1  # the next pass is the next epoch, unless set_epoch says otherwise
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.n)
        else:
            order = np.arange(self.n)
        for start, stop in self._bounds():
            yield order[start:stop][self.rank :: self.size].tolist()
