"""Each rank's share of every epoch: the one sampling rule of the synchronous algorithms, for
the built-in trainer and a user's own loop (``Session.sampler``/``Session.shard``) alike.

The epoch's order is one permutation of the dataset, the same on every rank (seed and epoch);
it is cut into global batches of ``batch_size`` and rank ``r`` takes ``batch[r::size]`` of each.
So every sample is read exactly once per epoch across the ranks, every rank takes the same
number of steps (a synchronous algorithm never waits for a step that another rank does not
take), and the trajectory does not depend on the rank count. A last global batch too small to
give every rank a sample joins the one before it, so no rank ever gets an empty batch.

A pass may read a range of the epoch (:meth:`GlobalBatchSlices.set_range`): the rest of an
epoch after a cursor (seed, epoch, samples consumed), on any number of ranks, reads exactly the
samples the uninterrupted epoch would have read after it, in the same order.

Unlike ``torch.utils.data.DistributedSampler`` nothing is padded or dropped, and the epoch
advances by itself at each pass (``set_epoch`` still works, e.g. after a resume). The
asynchronous algorithms claim batches instead (:class:`training.data.ClaimedBatches`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from torch.utils.data import Sampler


class EpochOrder:
    """The one order of an epoch's samples, the same on every rank: the dataset's own
    (``order(seed, epoch)``: record shards), else a permutation by (seed, epoch), else (no
    ``shuffle``) in order. Kept for the epoch last asked: the parts of an epoch between
    checkpoints each ask again, and record shards start their cache prefetch when asked."""

    def __init__(self, n: int, seed: int, *, shuffle: bool = True,
                 order: Callable[[int, int], np.ndarray] | None = None) -> None:
        self.n, self.seed, self.shuffle, self.order = n, seed, shuffle, order
        self._last: tuple[int, np.ndarray] | None = None

    def __call__(self, epoch: int) -> np.ndarray:
        if self._last is None or self._last[0] != epoch:
            if self.order is not None:
                rows = self.order(self.seed, epoch)
            elif self.shuffle:
                rows = np.random.default_rng([self.seed, epoch]).permutation(self.n)
            else:
                rows = np.arange(self.n)
            self._last = (epoch, rows)
        return self._last[1]


class GlobalBatchSlices(Sampler[list[int]]):
    """This rank's slice of every global batch of each epoch: a ``batch_sampler`` for a
    ``DataLoader``. ``arrays``: yield index arrays (in-memory sets) instead of lists.
    ``order(seed, epoch)``: the epoch's order when the dataset has its own (record shards:
    :meth:`training.data.ShardSet.epoch_order`), else a permutation (``shuffle``) or in order.

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
        order: Callable[[int, int], np.ndarray] | None = None,
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
        self.orders = EpochOrder(n, seed, shuffle=shuffle, order=order)
        self.start, self.stop = 0, n
        self.bounds = self._bounds()

    def _bounds(self) -> list[tuple[int, int]]:
        n, size, b = self.n, self.size, self.batch_size
        bounds = [(s, min(s + b, self.stop)) for s in range(self.start, self.stop, b)]
        if self.stop == n and len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] < size:
            bounds[-2:] = [(bounds[-2][0], bounds[-1][1])]  # too small to split: joins the last
        return bounds

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next pass reads (passes after it count up from there)."""
        self.epoch = epoch

    def set_range(self, start: int, stop: int | None = None) -> None:
        """Read samples ``start:stop`` of the epoch's order (a cursor: samples consumed so far,
        a multiple of ``batch_size``) in the passes from now on."""
        stop = self.n if stop is None else stop
        if not 0 <= start <= stop <= self.n or (start % self.batch_size and start != stop):
            raise ValueError(f"range {start}:{stop} is not a whole number of global batches of "
                             f"an epoch of {self.n}")
        self.start, self.stop = start, stop
        self.bounds = self._bounds()

    @property
    def first_batch(self) -> int:
        """Global batches of the epoch before this range."""
        return self.start // self.batch_size

    def __len__(self) -> int:
        return len(self.bounds)

    def global_batch(self, i: int) -> int:
        """Rows of global batch ``i`` (all ranks together)."""
        start, stop = self.bounds[i]
        return stop - start

    def __iter__(self) -> Iterator[Any]:
        epoch = self.epoch
        self.epoch += 1  # the next pass is the next epoch, unless set_epoch says otherwise
        order = self.orders(epoch)
        for start, stop in self.bounds:
            rows = order[start:stop][self.rank :: self.size]
            yield rows if self.arrays else rows.tolist()
