"""``search data pack SOURCE DEST``: a user's data as record shards (training/data/_shards.py).

SOURCE is a built-in dataset name, an ``ImageFolder`` tree (``DIR/train/<class>/*.png`` and
optionally ``DIR/test/...``, or the class folders directly under ``DIR``; the validation split
is carved from train with ``val_fraction``), or a ``module:function`` dataset plug-in (arrays
or torch datasets). The train split is shuffled once with ``seed`` before it is cut into
shards, so a shard is a random sample of the classes even when the source is sorted by class.

Crash-safe and resumable: every shard is written to a temporary name and renamed; the shards
done so far are listed in ``DEST/.packing.json`` (written by rename after each shard), and a
run with the same source and settings skips them; ``DEST/index.json`` is written last. A
destination that holds anything else is refused before anything is written.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.data._shards import (
    FORMAT,
    INDEX,
    VERSION,
    Column,
    ShardError,
    column_array,
    sha256_file,
)

PROGRESS = ".packing.json"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")


@dataclass
class SplitSource:
    """One split of a source: ``n`` samples; ``get(rows)`` their (x, y) as numpy arrays."""

    n: int
    get: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass
class Source:
    splits: dict[str, SplitSource]
    x: Column
    y: Column
    n_classes: int | None
    task: str


def _write_json(path: Path, data: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def _arrays_source(x: dict[str, np.ndarray], y: dict[str, np.ndarray], n_classes: int | None,
                   task: str) -> Source:
    splits = {k: SplitSource(len(x[k]), lambda rows, k=k: (x[k][rows], y[k][rows]))
              for k in x if len(x[k])}
    x0, y0 = x["train"], y["train"]
    return Source(splits, Column(str(x0.dtype), tuple(x0.shape[1:])),
                  Column(str(y0.dtype), tuple(y0.shape[1:])), n_classes, task)


def _from_dataset(ds: Any, task: str) -> Source:
    ytype = np.float32 if task == "regression" else np.int64
    xs = {"train": ds.x_train, "val": ds.x_val, "test": ds.x_test}
    ys = {k: np.asarray(v).astype(ytype, copy=False)
          for k, v in {"train": ds.y_train, "val": ds.y_val, "test": ds.y_test}.items()}
    return _arrays_source({k: np.asarray(v) for k, v in xs.items()}, ys,
                          int(ds.n_classes) if task == "classification" else None, task)


def _from_torch(ds: Any, task: str) -> Source:
    """A TorchDatasets' (x, y) samples, converted one at a time."""
    def get_of(split: Any) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
        def get(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            pairs = [split[int(i)] for i in rows]
            return (np.stack([np.asarray(x) for x, _ in pairs]),
                    np.stack([np.asarray(y) for _, y in pairs]))
        return get

    splits = {k: SplitSource(len(v), get_of(v)) for k, v in
              {"train": ds.train, "val": ds.val, "test": ds.test}.items() if v is not None}
    x0, y0 = splits["train"].get(np.arange(1))
    n_classes = ds.n_classes or (len(ds.train.classes) if hasattr(ds.train, "classes") else None)
    if task == "classification" and n_classes is None:
        raise ShardError("the dataset plug-in's TorchDatasets names no n_classes")
    return Source(splits, Column(str(x0.dtype), tuple(x0.shape[1:])),
                  Column(str(y0.dtype), tuple(y0.shape[1:])), n_classes, task)


def _image_tree(root: Path) -> tuple[list[str], list[tuple[Path, int]]]:
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    files = [(f, c) for c, name in enumerate(classes) for f in sorted((root / name).iterdir())
             if f.suffix.lower() in IMAGE_SUFFIXES]
    return classes, files


def _from_image_folder(root: Path, val_fraction: float) -> Source:
    try:
        from PIL import Image
    except ImportError:
        raise ShardError(f"{root}: packing image files needs Pillow (pip install pillow, or "
                         "pip install -e '.[vision]')") from None

    tree = {"train": root / "train", "test": root / "test"} if (root / "train").is_dir() else {
        "train": root}
    found = {k: _image_tree(v) for k, v in tree.items() if v.is_dir()}
    classes, train = found["train"]
    if not train:
        raise ShardError(f"{root}: no images in class folders (ImageFolder layout: "
                         "DIR/<class>/*.png or DIR/train/<class>/*.png)")
    order = np.random.default_rng(0).permutation(len(train))
    n_val = round(len(train) * val_fraction)
    lists = {"train": [train[i] for i in order[n_val:]], "val": [train[i] for i in order[:n_val]]}
    if "test" in found:
        lists["test"] = found["test"][1]

    def decode(path: Path) -> np.ndarray:
        with Image.open(path) as image:
            a = np.asarray(image.convert("L" if image.mode in ("1", "L", "P", "I;16") else "RGB"))
        return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)  # (C, H, W), as ToTensor

    shape = decode(train[0][0]).shape

    def get_of(items: list[tuple[Path, int]]) -> Callable[[np.ndarray], tuple[np.ndarray, ...]]:
        def get(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            xs = [decode(items[int(i)][0]) for i in rows]
            for i, x in zip(rows, xs, strict=True):
                if x.shape != shape:
                    raise ShardError(f"{items[int(i)][0]}: {x.shape[1:]} pixels, the first image "
                                     f"has {shape[1:]}: images of one size only (resize them)")
            return np.stack(xs), np.asarray([items[int(i)][1] for i in rows], dtype=np.int64)
        return get

    splits = {k: SplitSource(len(v), get_of(v)) for k, v in lists.items() if v}
    return Source(splits, Column("uint8", shape, 1 / 255), Column("int64", ()), len(classes),
                  "classification")


def open_source(source: str, *, val_fraction: float, task: str = "classification") -> Source:
    """What ``search data pack`` reads: a built-in name, an image folder, or module:function."""
    from training.data._datasets import DATASETS

    if source in DATASETS:
        return _from_dataset(DATASETS[source](val_fraction), task)
    if Path(source).is_dir():
        return _from_image_folder(Path(source), val_fraction)
    if ":" in source:
        from training.data._datasets import Dataset
        from training.plugins import TorchDatasets, resolve

        got = resolve("source", source)(val_fraction)
        if isinstance(got, Dataset):
            return _from_dataset(got, task)
        if isinstance(got, TorchDatasets):
            return _from_torch(got, task)
        raise ShardError(f"{source}: returned {type(got).__name__}, expected training.Dataset "
                         "or training.TorchDatasets")
    raise ShardError(f"source {source!r}: not a built-in dataset ({', '.join(sorted(DATASETS))}),"
                     " a directory of images, or a module:function")


def _check_dest(dest: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """The shards a previous run with the same settings finished; refuses anything else."""
    if not dest.exists():
        return {}
    if (dest / INDEX).exists():
        index = json.loads((dest / INDEX).read_text())
        if index.get("settings") == settings:
            return {"done": True}
        raise ShardError(f"{dest}: already holds a packed dataset (of {index.get('settings')}); "
                         "remove it or choose another destination")
    progress = dest / PROGRESS
    if progress.exists():
        state = json.loads(progress.read_text())
        if state.get("settings") != settings:
            raise ShardError(f"{dest}: a packing with other settings was not finished "
                             f"({state.get('settings')}); remove it or pack with those")
        return state
    if any(dest.iterdir()):
        raise ShardError(f"{dest}: exists and is not a packed dataset; choose an empty or new "
                         "directory")
    return {}


def _samples_per_shard(source: Source, shard_mb: float) -> int:
    per = int(np.prod(source.x.shape, dtype=np.int64)) * np.dtype(source.x.dtype).itemsize + int(
        np.prod(source.y.shape, dtype=np.int64)) * np.dtype(source.y.dtype).itemsize + 16
    return max(1, int(shard_mb * 2**20 // per))


def parse_normalize(text: str) -> tuple[list[float], list[float]]:
    """``"MEAN/STD"`` with one value or one per channel each: ``0.286/0.353``,
    ``0.485,0.456,0.406/0.229,0.224,0.225``."""
    try:
        mean, std = ([float(v) for v in part.split(",")] for part in text.split("/"))
    except ValueError:
        raise ShardError(f"--normalize {text!r}: expected MEAN/STD, comma lists per channel "
                         "(e.g. 0.286/0.353)") from None
    if len(mean) != len(std) or not all(v > 0 for v in std):
        raise ShardError(f"--normalize {text!r}: as many means as standard deviations, each "
                         "deviation > 0")
    return mean, std


def pack(source_name: str, dest: str | Path, *, shard_mb: float = 32.0, limit: int | None = None,
         seed: int = 0, val_fraction: float = 0.1, task: str = "classification",
         normalize: str | None = None,
         progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Pack ``source_name`` into ``dest``; returns the index. Resumes an unfinished packing of
    the same settings; ``progress(samples_done, samples_total)`` after every shard.
    ``normalize``: ``"MEAN/STD"`` applied when the samples are read (the stored bytes stay)."""
    import pyarrow as pa

    dest = Path(dest)
    settings = {"source": source_name, "shard_mb": shard_mb, "limit": limit, "seed": seed,
                "val_fraction": val_fraction, "task": task}
    if normalize is not None:
        settings["normalize"] = normalize
    norm = parse_normalize(normalize) if normalize is not None else None
    state = _check_dest(dest, settings)
    if state.get("done"):
        return json.loads((dest / INDEX).read_text())
    source = open_source(source_name, val_fraction=val_fraction, task=task)
    if norm is not None:
        channels = source.x.shape[0] if source.x.shape else 1
        if len(norm[0]) not in (1, channels):
            raise ShardError(f"--normalize {normalize!r}: {len(norm[0])} values, the samples "
                             f"have {channels} channels (shape {source.x.shape})")
        source.x = Column(source.x.dtype, source.x.shape, source.x.scale, tuple(norm[0]),
                          tuple(norm[1]))
    per = _samples_per_shard(source, shard_mb)
    orders = {}
    for split, s in source.splits.items():
        order = np.random.default_rng([seed, 7]).permutation(s.n) if split == "train" else (
            np.arange(s.n))
        orders[split] = order[: limit] if limit else order
    total = sum(len(o) for o in orders.values())
    dest.mkdir(parents=True, exist_ok=True)
    finished: dict[str, list[dict[str, Any]]] = state.get("shards", {})
    schema = pa.schema([("id", pa.int64()), ("x", source.x.arrow_type()),
                        ("y", source.y.arrow_type()), ("source", pa.int64())])
    done = sum(e["samples"] for entries in finished.values() for e in entries)
    for split, order in orders.items():
        (dest / split).mkdir(exist_ok=True)
        entries = finished.setdefault(split, [])
        for k, start in enumerate(range(0, len(order), per)):
            if k < len(entries):
                continue  # written by an earlier run of the same packing
            rows = order[start : start + per]
            x, y = source.splits[split].get(rows)
            table = pa.table([pa.array(np.arange(start, start + len(rows))),
                              column_array(x, source.x), column_array(y, source.y),
                              pa.array(rows.astype(np.int64))], schema=schema)
            name = f"{split}/{k:05d}.arrow"
            fd, tmp = tempfile.mkstemp(dir=dest / split, prefix=f".{k:05d}.", suffix=".tmp")
            os.close(fd)
            try:
                with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
                    writer.write_table(table)
                entry = {"file": name, "samples": len(rows), "bytes": os.path.getsize(tmp),
                         "sha256": sha256_file(tmp)}
                os.replace(tmp, dest / name)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            entries.append(entry)
            _write_json(dest / PROGRESS, {"settings": settings, "shards": finished})
            done += len(rows)
            if progress is not None:
                progress(done, total)
    index = {"format": FORMAT, "version": VERSION, "settings": settings,
             "x": source.x.as_json(), "y": source.y.as_json(), "n_classes": source.n_classes,
             "task": source.task,
             "splits": {k: {"samples": sum(e["samples"] for e in v), "shards": v}
                        for k, v in finished.items()}}
    _write_json(dest / INDEX, index)
    (dest / PROGRESS).unlink(missing_ok=True)
    return index
