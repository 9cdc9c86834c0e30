"""Offline datasets: scikit-learn digits, locally generated mnist1d, and user ``module:function``.

A loader returns a :class:`Dataset` of numpy arrays. Every rank builds the same fixed split from
the same seed, so the validation and test sets never move between trials.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Dataset:
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int

    @property
    def input_dim(self) -> int:
        return int(np.prod(self.x_train.shape[1:]))


def _split(x: np.ndarray, y: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, ...]:
    order = np.random.default_rng(seed).permutation(len(x))
    n_hold = max(1, round(len(x) * fraction))
    hold, keep = order[:n_hold], order[n_hold:]
    return x[keep], y[keep], x[hold], y[hold]


def _standardise(ds: Dataset) -> Dataset:
    mean = ds.x_train.mean(axis=0)
    std = ds.x_train.std(axis=0) + 1e-6
    f = lambda a: ((a - mean) / std).astype(np.float32)  # noqa: E731
    return Dataset(
        f(ds.x_train), ds.y_train, f(ds.x_val), ds.y_val, f(ds.x_test), ds.y_test, ds.n_classes
    )


def _cache_dir() -> Path:
    root = os.environ.get("DETOL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "detol"
    )
    return Path(root)


def _cached(name: str, make: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Arrays from ``make()``, kept as ``.npz`` in the cache directory after the first call.

    Every rank of every trial loads its data; a cached file skips generating mnist1d (~2 s)
    and importing scikit-learn (~1.5 s) in each rank.
    """
    path = _cache_dir() / f"{name}.npz"
    if path.exists():
        with np.load(path) as f:
            return {k: f[k] for k in f.files}
    arrays = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Atomic: ranks that build it at the same time each replace the file with identical bytes.
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz")
    with os.fdopen(fd, "wb") as f:
        np.savez(f, **arrays)
    os.replace(tmp, path)
    return arrays


def _digits_make() -> dict[str, np.ndarray]:
    from sklearn.datasets import load_digits as sk_digits

    bunch = sk_digits()
    return {"x": bunch.data.astype(np.float32), "y": bunch.target.astype(np.int64)}


def load_digits(val_fraction: float) -> Dataset:
    """scikit-learn's 1,797 8x8 digits (ships with scikit-learn): 20% test, then a validation split."""
    a = _cached("digits-v1", _digits_make)
    x_rest, y_rest, x_test, y_test = _split(a["x"], a["y"], 0.2, seed=0)
    x_tr, y_tr, x_val, y_val = _split(x_rest, y_rest, val_fraction, seed=1)
    return _standardise(Dataset(x_tr, y_tr, x_val, y_val, x_test, y_test, 10))


def _mnist1d_make() -> dict[str, np.ndarray]:
    """mnist1d generated locally with its default arguments (deterministic). Never downloads."""
    from mnist1d.data import get_dataset_args, make_dataset

    data = make_dataset(get_dataset_args())
    return {k: np.asarray(data[k]) for k in ("x", "y", "x_test", "y_test")}


def load_mnist1d(val_fraction: float) -> Dataset:
    """mnist1d (Greydanus 2020): 4,000 train / 1,000 test signals of length 40, 10 classes."""
    a = _cached("mnist1d-v1", _mnist1d_make)
    x = a["x"].astype(np.float32)
    y = a["y"].astype(np.int64)
    x_tr, y_tr, x_val, y_val = _split(x, y, val_fraction, seed=1)
    test = a["x_test"].astype(np.float32), a["y_test"].astype(np.int64)
    return _standardise(Dataset(x_tr, y_tr, x_val, y_val, *test, 10))


DATASETS: dict[str, Callable[[float], Dataset]] = {
    "digits": load_digits,
    "mnist1d": load_mnist1d,
}


def check_dataset_name(name: str) -> None:
    """Raise ValueError unless ``name`` is a registered dataset or a ``module:function`` path."""
    if name in DATASETS:
        return
    if ":" in name:
        module, _, func = name.partition(":")
        if module and func.isidentifier():
            return
    raise ValueError(f"unknown dataset {name!r} (known: {sorted(DATASETS)}, or 'module:function')")


def load_dataset(name: str, val_fraction: float) -> Dataset:
    """Load a registered dataset, or call a user's ``module:function`` returning a Dataset."""
    check_dataset_name(name)
    if name in DATASETS:
        return DATASETS[name](val_fraction)
    module, _, func = name.partition(":")
    loader = getattr(importlib.import_module(module), func)
    ds = loader(val_fraction)
    if not isinstance(ds, Dataset):
        raise TypeError(f"dataset {name!r} returned {type(ds).__name__}, expected training.Dataset")
    return ds
