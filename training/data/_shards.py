"""Record shards: a dataset packed as Arrow IPC files, read in sequence, in one global order.

Layout of a packed dataset ``DEST`` (docs/data.md):

- ``DEST/index.json``: written last (by rename), so its presence means the pack is complete:
  the format and version, each split's sample count and shards (file, samples, bytes, SHA-256),
  the sample's ``x`` and ``y`` (dtype, shape, the scale that turns stored integers into floats),
  the number of classes and the task;
- ``DEST/<split>/<nnnnn>.arrow``: Arrow IPC files (the format pyarrow, polars, DuckDB and
  Hugging Face ``datasets`` read and memory-map) of columns ``id`` (the sample's index in its
  split), ``x`` and ``y`` (Arrow's canonical ``fixed_shape_tensor`` for arrays, a plain column
  for scalars) and ``source`` (its index in what was packed).

The one order of an epoch (:meth:`ShardSet.epoch_order`): the shards are permuted by (seed,
epoch), taken ``window`` at a time, and the samples of each window are permuted. It depends on
nothing else (not the rank count), so a cursor (seed, epoch, samples consumed) names the rest
of an epoch's stream on any number of ranks. A reader holds at most ``window`` shards of an
epoch open at once; from shared storage each shard is read whole, in sequence (the node-local
cache, training/data/_cache.py, copies it once per node).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "detol-shards"
VERSION = 1
INDEX = "index.json"
PREFIX = "shards:"
MAX_OPEN = 16  # shards one process keeps mapped
SPLITS = ("train", "val", "test")


class ShardError(ValueError):
    """A packed dataset is missing, incomplete, or not what its index says (one line)."""


def shards_path(name: str) -> str | None:
    """The directory of a ``shards:PATH`` dataset name, else None."""
    return name[len(PREFIX):] if name.startswith(PREFIX) else None


def read_index(root: str | Path) -> dict[str, Any]:
    """The index of the packed dataset at ``root``; ShardError naming what is wrong."""
    path = Path(root) / INDEX
    if not path.is_file():
        what = "does not exist" if not Path(root).exists() else (
            f"has no {INDEX}: not a packed dataset, or its packing did not finish "
            "(run `search data pack` again to finish it)")
        raise ShardError(f"shards:{root}: {what}")
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ShardError(f"{path}: unreadable ({exc})") from None
    if index.get("format") != FORMAT or index.get("version") != VERSION:
        raise ShardError(f"{path}: format {index.get('format')!r} version "
                         f"{index.get('version')!r}, expected {FORMAT!r} version {VERSION}")
    if not index["splits"].get("train", {}).get("samples"):
        raise ShardError(f"{path}: the train split is empty")
    return index


def check_shards(root: str | Path) -> dict[str, Any]:
    """The index, after checking that every shard it names is there with its size (the
    checksums are compared when a shard is copied to a node's cache)."""
    index = read_index(root)
    for split, info in index["splits"].items():
        for shard in info["shards"]:
            path = Path(root) / shard["file"]
            try:
                size = path.stat().st_size
            except OSError:
                raise ShardError(f"shards:{root}: {shard['file']} of split {split} is "
                                 "missing") from None
            if size != shard["bytes"]:
                raise ShardError(f"shards:{root}: {shard['file']} has {size} bytes, the index "
                                 f"says {shard['bytes']} (changed after packing: pack again)")
    return index


def sha256_file(path: str | Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class Column:
    """How one field of a sample is stored: dtype, per-sample shape, ``scale`` (stored integers
    times scale is the float the model reads; None: as stored) and ``mean``/``std`` per channel
    (the first axis; then the model reads ``(x * scale - mean) / std``, as torchvision's
    ``Normalize``)."""

    dtype: str
    shape: tuple[int, ...]
    scale: float | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    @classmethod
    def of(cls, data: dict[str, Any]) -> Column:
        norm = {k: tuple(data[k]) for k in ("mean", "std") if data.get(k) is not None}
        return cls(data["dtype"], tuple(data["shape"]), data.get("scale"), **norm)

    def as_json(self) -> dict[str, Any]:
        out = {"dtype": self.dtype, "shape": list(self.shape), "scale": self.scale}
        if self.mean is not None:
            out.update(mean=list(self.mean), std=list(self.std or ()))
        return out

    def arrow_type(self) -> Any:
        import pyarrow as pa

        value = pa.from_numpy_dtype(np.dtype(self.dtype))
        return pa.fixed_shape_tensor(value, list(self.shape)) if self.shape else value


def column_array(values: np.ndarray, column: Column) -> Any:
    """``values`` (n, *shape) as the Arrow array of ``column``."""
    import pyarrow as pa

    values = np.ascontiguousarray(values, dtype=column.dtype)
    if not column.shape:
        return pa.array(values)
    return pa.FixedShapeTensorArray.from_numpy_ndarray(values)


def column_values(array: Any, column: Column) -> np.ndarray:
    """The numpy view (no copy) of an Arrow column read back: (n, *shape)."""
    if hasattr(array, "combine_chunks"):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    if not column.shape:
        return array.to_numpy(zero_copy_only=True)
    flat = array.storage.flatten().to_numpy(zero_copy_only=True)
    return flat.reshape((len(array), *column.shape))


class ShardSet:
    """One split of a packed dataset as a map-style torch dataset that reads whole batches:
    ``set[rows]`` (or ``__getitems__``) is ``(x, y)`` tensors of those rows, in their order.

    Shards are memory-mapped when first touched, through ``cache`` (a node-local copy) when
    given. Pickled into a loader worker it carries only its index (no open files, no tensors).
    """

    def __init__(self, root: str | Path, split: str, *, index: dict[str, Any] | None = None,
                 cache: Any = None) -> None:
        self.root = Path(root)
        self.split = split
        self.index = index or read_index(root)
        info = self.index["splits"].get(split)
        if not info or not info["samples"]:
            raise ShardError(f"shards:{root}: no {split} split")
        self.shards: list[dict[str, Any]] = list(info["shards"])
        counts = np.asarray([s["samples"] for s in self.shards], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(counts)])
        self.n = int(self.starts[-1])
        self.x = Column.of(self.index["x"])
        self.y = Column.of(self.index["y"])
        self.cache = cache
        # Shards mapped now, oldest first: at most MAX_OPEN (an evicted cache file's space is
        # freed once no process maps it).
        self._open: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.reads = 0  # shards this process opened
        self._norm: tuple[Any, Any] | None = None  # mean and std as tensors, made once
        self.prefetcher: threading.Thread | None = None

    def __len__(self) -> int:
        return self.n

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_open": {}, "_norm": None, "prefetcher": None}

    # -- the one order --------------------------------------------------------------------
    def shard_order(self, seed: int, epoch: int) -> np.ndarray:
        return np.random.default_rng([seed, epoch, 0]).permutation(len(self.shards))

    def epoch_order(self, seed: int, epoch: int, window: int) -> np.ndarray:
        """Every sample of the split once: shards permuted by (seed, epoch), ``window`` of
        them at a time, each window's samples permuted. With a node cache, a thread starts
        copying the epoch's shards into it in that order (ahead of the readers)."""
        shards = self.shard_order(seed, epoch)
        if self.cache is not None:
            self.prefetch([int(s) for s in shards])
        rng = np.random.default_rng([seed, epoch, 1])
        parts = []
        for w in range(0, len(shards), max(1, window)):
            rows = np.concatenate([np.arange(self.starts[s], self.starts[s + 1])
                                   for s in shards[w : w + window]])
            parts.append(rng.permutation(rows))
        return np.concatenate(parts)

    def prefetch(self, shards: list[int]) -> threading.Thread:
        """Copy ``shards`` into the node cache in this order, in a daemon thread, up to half
        the cache's limit (so that it never evicts what is being read); readers that get there
        first copy on demand (one copy either way: the cache's per-shard lock)."""
        budget = self.cache.limit // 2

        def run() -> None:
            spent = 0
            for s in shards:
                spent += int(self.shards[s]["bytes"])
                if spent > budget:
                    return
                try:
                    self.local_path(s)
                except Exception:  # noqa: BLE001 - the reader meets the error itself, in order
                    return

        thread = threading.Thread(target=run, name="detol-shard-prefetch", daemon=True)
        thread.start()
        self.prefetcher = thread
        return thread

    # -- reading --------------------------------------------------------------------------
    def local_path(self, shard: int) -> Path:
        """Where shard ``shard`` is read from: the node's cached copy, or the pack itself."""
        entry = self.shards[shard]
        source = self.root / entry["file"]
        return source if self.cache is None else self.cache.fetch(source, entry)

    def _arrays(self, shard: int) -> tuple[np.ndarray, np.ndarray]:
        got = self._open.get(shard)
        if got is None:
            import pyarrow as pa

            for attempt in (0, 1):
                path = self.local_path(shard)
                try:
                    table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
                    break
                except FileNotFoundError:  # evicted from the cache between fetch and open
                    if attempt:
                        raise
            got = (column_values(table.column("x"), self.x),
                   column_values(table.column("y"), self.y))
            self._open[shard] = got
            self.reads += 1
            while len(self._open) > MAX_OPEN:
                self._open.pop(next(iter(self._open)))
        return got

    def rows(self, rows: Any) -> tuple[np.ndarray, np.ndarray]:
        """The stored values of ``rows`` (numpy), in their order."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(rows) and (rows.min() < 0 or rows.max() >= self.n):
            raise IndexError(f"rows outside 0..{self.n - 1} of shards:{self.root} {self.split}")
        which = np.searchsorted(self.starts, rows, side="right") - 1
        x = np.empty((len(rows), *self.x.shape), dtype=self.x.dtype)
        y = np.empty((len(rows), *self.y.shape), dtype=self.y.dtype)
        for shard in np.unique(which):
            mine = np.flatnonzero(which == shard)
            xs, ys = self._arrays(int(shard))
            local = rows[mine] - self.starts[shard]
            x[mine], y[mine] = xs[local], ys[local]
        return x, y

    def __getitems__(self, rows: Any) -> tuple[Any, Any]:
        import torch

        x, y = self.rows(rows)
        tx = torch.from_numpy(x)
        if self.x.scale is not None:
            tx = tx.to(torch.float32).mul_(self.x.scale)
        if self.x.mean is not None:
            tx = tx.to(torch.float32)
            if self._norm is None:
                view = (-1,) + (1,) * (len(self.x.shape) - 1)
                self._norm = (torch.tensor(self.x.mean).view(view),
                              torch.tensor(self.x.std).view(view))
            tx = tx.sub_(self._norm[0]).div_(self._norm[1])
        return tx, torch.from_numpy(y)

    def __getitem__(self, i: Any) -> tuple[Any, Any]:
        if isinstance(i, list | np.ndarray):
            return self.__getitems__(i)
        x, y = self.__getitems__([int(i)])
        return x[0], y[0]

    def close(self) -> None:
        self._open.clear()
