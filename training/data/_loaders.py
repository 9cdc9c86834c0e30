"""Data is read, not copied: every split is a map-style dataset read through a ``DataLoader``,
and each rank reads only its share of every epoch.

- sync (and batch): :class:`training.data.GlobalBatchSlices` (the one sampling rule, with own
  loops) yields this rank's slice ``batch[rank::size]`` of each global batch of the epoch's
  permutation ``default_rng([seed, epoch])``;
- asgd, localsgd, simuparallel on several ranks: :class:`ClaimedBatches` yields the local
  batches this rank claims (:mod:`training.data._claims`), so a fast rank reads more;
- validation and test: a strided shard ``range(rank, n, size)``; metrics are summed weighted by
  samples and reduced over ranks, so P ranks report what one rank would.

The built-in datasets (and a user's ``training.Dataset`` of arrays) are :class:`InMemory`: two
tensors indexed a whole batch at a time (``__getitems__``), no per-sample work.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Iterator, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler, default_collate

from training._config import TrainConfig
from training.data._cache import NodeCache
from training.data._datasets import DATASETS, Dataset
from training.data._sampling import EpochOrder
from training.data._shards import SPLITS, ShardError, ShardSet, check_shards, shards_path
from training.plugins import DataInfo, PluginError, TorchDatasets, resolve

if TYPE_CHECKING:  # not at run time: loader workers import this module and must not start MPI
    from training.data._claims import BatchClaims

# Loader workers start from a fork server: a fresh Python (no MPI state, unlike a fork of the
# rank, which MPI libraries do not support) that has imported torch once; each worker is a
# cheap fork of it. See docs/user-models.md ("Loader workers").
WORKER_CONTEXT = "forkserver"
# What the fork server imports once, before it forks workers: torch, this module, and the
# dataset plug-ins' modules (load_train_data adds them), so a worker imports neither torch nor
# the user's libraries again, and the plug-in's own imports run first, in its order.
FORKSERVER_PRELOAD: list[str] = ["torch", "training.data._loaders"]


class InMemory(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Arrays held in memory, as a map-style dataset that also fetches whole batches."""

    def __init__(self, x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor) -> None:
        self.x = torch.as_tensor(x)
        self.y = torch.as_tensor(y)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]

    def __getitems__(self, rows: Any) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.from_numpy(rows) if isinstance(rows, np.ndarray) else torch.as_tensor(
            rows, dtype=torch.long)
        if self.x.device.type != "cpu":
            index = index.to(self.x.device)
        return self.x[index], self.y[index]

    def to(self, device: torch.device) -> InMemory:
        return InMemory(self.x.to(device), self.y.to(device))


class InMemoryLoader:
    """A dataset's batches read whole (in memory, or record shards): ``__getitems__`` of each
    index array of ``sampler``. What a ``DataLoader`` without workers does, less its per-batch
    machinery (profiler scope, fetcher, collation), which measurably slows the small models the
    built-in sets train."""

    def __init__(self, dataset: Any, sampler: Sampler[Any]) -> None:
        self.dataset = dataset
        self.sampler = sampler

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        fetch = self.dataset.__getitems__
        for rows in self.sampler:
            yield fetch(rows)


def collate(samples: list[Any]) -> Any:
    """torch's default collation; an empty batch is None (the samplers give none since the
    one sampling rule: a short last global batch joins the one before it)."""
    return default_collate(samples) if samples else None


def _as_is(batch: Any) -> Any:
    """A batch a dataset read whole (record shards): nothing to collate."""
    return batch


def rows_batch(dataset: Any, rows: list[int]) -> Any:
    """Rows of ``dataset`` as one batch, collated as the loaders collate (in-memory sets and
    record shards: one read)."""
    if isinstance(dataset, InMemory | ShardSet):
        return dataset.__getitems__(rows)
    return collate([dataset[i] for i in rows])


@dataclass
class TrainData:
    """The trial's splits as map-style datasets and what a model builder is told about them."""

    info: DataInfo
    train: Any
    val: Any
    test: Any | None

    @property
    def in_memory(self) -> bool:
        return isinstance(self.train, InMemory)

    @property
    def whole_batches(self) -> bool:
        """Whether the train set reads a batch at once from an index array (in memory, shards)."""
        return isinstance(self.train, InMemory | ShardSet)

    def epoch_order(self, window: int) -> Any:
        """The train set's own epoch order ``(seed, epoch) -> rows``, None for a permutation."""
        if isinstance(self.train, ShardSet):
            return lambda seed, epoch: self.train.epoch_order(seed, epoch, window)
        return None


def _outputs_of(y: np.ndarray | torch.Tensor) -> int:
    return 1 if y.ndim <= 1 else int(np.prod(y.shape[1:]))


def from_arrays(ds: Dataset, task: str) -> TrainData:
    ytype = np.float32 if task == "regression" else np.int64
    split = [InMemory(x, np.asarray(y).astype(ytype, copy=False)) for x, y in (
        (ds.x_train, ds.y_train), (ds.x_val, ds.y_val), (ds.x_test, ds.y_test))]
    info = DataInfo(
        input_shape=tuple(int(s) for s in ds.x_train.shape[1:]),
        n_classes=int(ds.n_classes) if task == "classification" else None,
        n_targets=_outputs_of(ds.y_train) if task == "regression" else None,
        task=task,
        n_train=len(ds.x_train),
    )
    return TrainData(info, split[0], split[1], split[2] if len(ds.x_test) else None)


def _from_torch(ds: TorchDatasets, config: TrainConfig) -> TrainData:
    from training.data._batches import BatchShape

    task = config.task
    # A (x, y) pair or a dict (training.data._batches): its inputs and target.
    x0, y0 = BatchShape(target=config.target, inputs=config.inputs).split(ds.train[0])
    if isinstance(x0, dict):  # several inputs (model(**keys)): the first one's shape
        x0 = next(iter(x0.values()))
    shape = ds.input_shape or tuple(int(s) for s in torch.as_tensor(x0).shape)
    n_classes = n_targets = None
    if task == "classification":
        n_classes = ds.n_classes
        if n_classes is None and hasattr(ds.train, "classes"):
            n_classes = len(ds.train.classes)
        if n_classes is None:
            raise PluginError("training.dataset", "cannot tell the number of classes: pass "
                              "TorchDatasets(..., n_classes=N) or give the train set .classes")
    else:
        n_targets = ds.n_targets or int(torch.as_tensor(y0).numel())
    info = DataInfo(input_shape=shape, n_classes=n_classes, n_targets=n_targets, task=task,
                    n_train=len(ds.train))
    return TrainData(info, ds.train, ds.val, ds.test)


def _from_shards(root: str, config: TrainConfig) -> TrainData:
    """A packed dataset's splits (training/data/_shards.py), read through the node's cache when
    ``data_cache`` is set."""
    index = check_shards(root)
    cache = None
    if config.data_cache:
        cache = NodeCache(config.data_cache, int(config.data_cache_gb * 2**30))
    sets = {split: ShardSet(root, split, index=index, cache=cache) for split in SPLITS
            if index["splits"].get(split, {}).get("samples")}
    if "val" not in sets:
        raise ShardError(f"shards:{root}: no val split (pack it with --val-fraction > 0)")
    if index["task"] != config.task:
        raise ShardError(f"shards:{root}: packed for task {index['task']!r}, the trial's "
                         f"training.task is {config.task!r}")
    y = index["y"]["shape"]
    info = DataInfo(
        input_shape=tuple(index["x"]["shape"]),
        n_classes=index["n_classes"] if config.task == "classification" else None,
        n_targets=(int(np.prod(y)) if y else 1) if config.task == "regression" else None,
        task=config.task, n_train=len(sets["train"]))
    return TrainData(info, sets["train"], sets["val"], sets.get("test"))


def load_train_data(config: TrainConfig) -> TrainData:
    """The trial's data: a built-in set, record shards (``shards:PATH``), or the ``dataset``
    plug-in's arrays or torch datasets."""
    root = shards_path(config.dataset)
    if root is not None:
        return _from_shards(root, config)
    if config.dataset in DATASETS:
        return from_arrays(DATASETS[config.dataset](config.val_fraction), config.task)
    module, _, func = config.dataset.partition(":")
    got = resolve("training.dataset", config.dataset)(config.val_fraction)
    if module not in FORKSERVER_PRELOAD:
        FORKSERVER_PRELOAD.append(module)
    if isinstance(got, Dataset):
        return from_arrays(got, config.task)
    if isinstance(got, TorchDatasets):
        return _from_torch(got, config)
    raise PluginError("training.dataset", f"{func}() returned {type(got).__name__}, expected "
                      "training.Dataset or training.TorchDatasets")


class ClaimedBatches(Sampler[list[int]]):
    """The local batches of the epoch's order that this rank claims, until none are left.
    Claims are made as the loader asks for indices (ahead of training with workers). A pass
    reads samples ``start:stop`` of the epoch (:meth:`set_range`), every one of them once."""

    def __init__(self, n: int, *, batch_size: int, seed: int, claims: BatchClaims,
                 arrays: bool = False, order: Any = None) -> None:
        self.n, self.seed, self.claims, self.arrays = n, seed, claims, arrays
        self.local = max(1, -(-batch_size // claims.comm.size))  # rows per claimed batch
        self.orders = EpochOrder(n, seed, order=order)
        self.epoch = 1
        self.set_range(0, n)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def set_range(self, start: int, stop: int | None = None) -> None:
        self.start, self.stop = start, self.n if stop is None else stop
        self.batches = -(-(self.stop - self.start) // self.local)

    def __len__(self) -> int:
        return self.batches  # an upper bound: this rank takes some of them

    def __iter__(self) -> Iterator[list[int]]:
        order = self.orders(self.epoch)
        while (i := self.claims.claim(self.batches)) is not None:
            first = self.start + i * self.local
            rows = order[first : min(first + self.local, self.stop)]
            yield rows if self.arrays else rows.tolist()  # type: ignore[misc]


class Shard(Sampler[list[int]]):
    """Evaluation: rows ``range(rank, n, size)`` in batches of ``batch_size``."""

    def __init__(self, n: int, *, batch_size: int, rank: int, size: int) -> None:
        self.rows = list(range(rank, n, size))
        self.batch_size = max(1, batch_size)

    def __len__(self) -> int:
        return math.ceil(len(self.rows) / self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        for start in range(0, len(self.rows), self.batch_size):
            yield self.rows[start : start + self.batch_size]


def make_loader(
    dataset: Sized, sampler: Sampler[list[int]], *, workers: int, device: torch.device
) -> DataLoader | InMemoryLoader:  # type: ignore[type-arg]
    """The batches of ``sampler``'s index lists. In-memory sets: whole-batch indexing, no
    workers; other sets: a DataLoader with ``workers`` processes (kept for the whole trial),
    pinned memory on CUDA."""
    whole = isinstance(dataset, ShardSet)
    if isinstance(dataset, InMemory) or (whole and workers == 0):
        return InMemoryLoader(dataset, sampler)
    context = None
    if workers > 0:
        # A worker still runs the rank's __main__ again (multiprocessing's preparation:
        # training.jobs.worker imports mpi4py), and mpi4py's import would run MPI_Init with the
        # rank's PMI variables: "PMI_Init returned -1", the worker dies. It never uses MPI.
        os.environ["MPI4PY_RC_INITIALIZE"] = "false"
        context = multiprocessing.get_context(WORKER_CONTEXT)
        # The server (one per rank, started once) imports these; each worker forks from it.
        context.set_forkserver_preload(FORKSERVER_PRELOAD)
    return DataLoader(
        dataset,
        batch_sampler=sampler,
        collate_fn=_as_is if whole else collate,
        num_workers=workers,
        persistent_workers=workers > 0,
        multiprocessing_context=context,
        pin_memory=device.type == "cuda",
    )
