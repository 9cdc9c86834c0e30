"""How a trial's data is read (training/data/_loaders.py), in one process: arrays held in memory
and fetched a batch at a time, a user's torch datasets and what a model builder is told about
them, the asynchronous algorithms' claimed batches, evaluation shards, and the loader each gets.
Loader worker processes under MPI run in tests/training/test_loader_workers.py (mpiexec)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import training.data._loaders as loaders
from training._config import TrainConfig
from training.data._datasets import Dataset
from training.data._loaders import (
    ClaimedBatches,
    InMemory,
    InMemoryLoader,
    Shard,
    TrainData,
    collate,
    from_arrays,
    load_train_data,
    make_loader,
)
from training.plugins import PluginError, TorchDatasets

pytestmark = pytest.mark.unit

CPU = torch.device("cpu")


def _arrays(n_test: int = 3, y: Any = None) -> Dataset:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(10, 2, 3)).astype(np.float32)
    labels = np.arange(10) % 4 if y is None else y
    return Dataset(x_train=x[:6], y_train=labels[:6], x_val=x[6:8], y_val=labels[6:8],
                   x_test=x[8:8 + n_test], y_test=labels[8:8 + n_test], n_classes=4)


def test_in_memory_fetches_one_row_or_a_whole_batch() -> None:
    data = InMemory(np.arange(12.0).reshape(6, 2), np.arange(6))
    assert len(data) == 6
    x, y = data[2]
    assert x.tolist() == [4.0, 5.0] and int(y) == 2
    xs, ys = data.__getitems__([5, 0])
    assert xs.tolist() == [[10.0, 11.0], [0.0, 1.0]] and ys.tolist() == [5, 0]
    xs, ys = data.__getitems__(np.array([1, 3]))
    assert ys.tolist() == [1, 3]
    moved = data.to(CPU)
    assert isinstance(moved, InMemory) and torch.equal(moved.x, data.x)


def test_an_in_memory_loader_yields_the_samplers_batches() -> None:
    data = InMemory(np.arange(6.0), np.arange(6))
    batches = list(InMemoryLoader(data, [np.array([4, 5]), np.array([0])]))  # type: ignore[arg-type]
    assert [b[1].tolist() for b in batches] == [[4, 5], [0]]


def test_collation_stacks_samples_and_an_empty_batch_is_none() -> None:
    assert collate([]) is None
    x, y = collate([(torch.zeros(2), 1), (torch.ones(2), 0)])
    assert x.shape == (2, 2) and y.tolist() == [1, 0]


def test_arrays_for_classification_and_what_the_model_builder_is_told() -> None:
    data = from_arrays(_arrays(), "classification")
    assert data.in_memory and data.train.y.dtype == torch.int64
    assert (data.info.input_shape, data.info.n_classes, data.info.n_targets) == ((2, 3), 4, None)
    assert (data.info.task, data.info.n_train) == ("classification", 6)
    assert len(data.val) == 2 and data.test is not None and len(data.test) == 2
    assert from_arrays(_arrays(n_test=0), "classification").test is None


def test_arrays_for_regression_count_their_targets() -> None:
    one = from_arrays(_arrays(y=np.linspace(0, 1, 10)), "regression")
    assert one.train.y.dtype == torch.float32
    assert (one.info.n_classes, one.info.n_targets) == (None, 1)
    two = from_arrays(_arrays(y=np.zeros((10, 2, 3))), "regression")
    assert two.info.n_targets == 6


class _Folder(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, n: int, classes: list[str] | None = None, y: Any = 0) -> None:
        self.n, self.y = n, y
        if classes is not None:
            self.classes = classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, Any]:
        return torch.zeros(3, 4, 5), self.y


def test_torch_datasets_are_read_lazily_and_described_from_their_first_sample() -> None:
    folder = TorchDatasets(_Folder(7, classes=["a", "b", "c"]), _Folder(2))
    data = loaders._from_torch(folder, TrainConfig(task="classification"))  # noqa: SLF001
    assert not data.in_memory and data.train is folder.train and data.test is None
    assert (data.info.input_shape, data.info.n_classes, data.info.n_train) == ((3, 4, 5), 3, 7)
    given = TorchDatasets(_Folder(7), _Folder(2), n_classes=5, input_shape=(60,))
    info = loaders._from_torch(given, TrainConfig(task="classification")).info  # noqa: SLF001
    assert (info.input_shape, info.n_classes) == ((60,), 5)
    with pytest.raises(PluginError, match="^training.dataset: cannot tell the number of "
                       "classes: pass TorchDatasets"):
        loaders._from_torch(TorchDatasets(_Folder(7), _Folder(2)), TrainConfig(task="classification"))  # noqa: SLF001


def test_a_torch_regression_set_counts_its_targets() -> None:
    sized = TorchDatasets(_Folder(4, y=torch.zeros(2, 2)), _Folder(1))
    info = loaders._from_torch(sized, TrainConfig(task="regression")).info  # noqa: SLF001
    assert (info.n_targets, info.n_classes, info.task) == (4, None, "regression")
    named = TorchDatasets(_Folder(4, y=torch.zeros(2)), _Folder(1), n_targets=3)
    assert loaders._from_torch(named, TrainConfig(task="regression")).info.n_targets == 3  # noqa: SLF001


def test_a_built_in_set_or_a_plug_ins_datasets_become_the_trials_data(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    digits = load_train_data(TrainConfig(dataset="digits"))
    assert digits.in_memory and digits.info.input_shape == (1, 8, 8)
    (tmp_path / "my_sets.py").write_text(
        "import numpy as np\n"
        "from training import Dataset, TorchDatasets\n"
        "def arrays(f):\n"
        "    x = np.zeros((4, 3), np.float32); y = np.arange(4) % 2\n"
        "    return Dataset(x, y, x, y, x[:0], y[:0], 2)\n"
        "def lazy(f):\n"
        "    return TorchDatasets([(np.zeros(3, np.float32), 1)], [(np.zeros(3, np.float32), 0)],"
        " n_classes=2)\n"
        "def wrong(f):\n"
        "    return [1, 2]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(loaders, "FORKSERVER_PRELOAD", ["torch"])
    assert load_train_data(TrainConfig(dataset="my_sets:arrays")).info.n_train == 4
    assert not load_train_data(TrainConfig(dataset="my_sets:lazy")).in_memory
    assert loaders.FORKSERVER_PRELOAD == ["torch", "my_sets"]  # once, for the loader workers
    with pytest.raises(PluginError) as info:
        load_train_data(TrainConfig(dataset="my_sets:wrong"))
    assert str(info.value) == ("training.dataset: wrong() returned list, expected "
                               "training.Dataset or training.TorchDatasets")


class _Claims:
    """Hands out batch indices as BatchClaims would, this rank taking those in ``mine``."""

    def __init__(self, size: int, mine: list[int]) -> None:
        self.comm = type("C", (), {"size": size})()
        self.mine = list(mine)
        self.asked: list[int] = []

    def claim(self, batches: int) -> int | None:
        self.asked.append(batches)
        return self.mine.pop(0) if self.mine else None


def test_claimed_batches_are_local_slices_of_the_epochs_permutation() -> None:
    claims = _Claims(size=3, mine=[0, 2, 3])
    s = ClaimedBatches(10, batch_size=8, seed=4, claims=claims)  # type: ignore[arg-type]
    assert (s.local, s.batches, len(s)) == (3, 4, 4)  # ceil(8 / 3) rows, ceil(10 / 3) batches
    s.set_epoch(2)
    order = np.random.default_rng([4, 2]).permutation(10)
    assert list(s) == [order[0:3].tolist(), order[6:9].tolist(), order[9:10].tolist()]
    assert claims.asked == [4, 4, 4, 4]
    arrays = ClaimedBatches(10, batch_size=2, seed=4, claims=_Claims(4, [1]),  # type: ignore[arg-type]
                            arrays=True)
    assert arrays.local == 1 and isinstance(next(iter(arrays)), np.ndarray)


def test_evaluation_shards_are_strided_rows_in_batches() -> None:
    s = Shard(10, batch_size=2, rank=1, size=3)
    assert list(s) == [[1, 4], [7]] and len(s) == 2
    assert list(Shard(3, batch_size=0, rank=0, size=1)) == [[0], [1], [2]]


def test_each_dataset_gets_its_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    memory = InMemory(np.zeros((4, 2)), np.zeros(4))
    assert isinstance(make_loader(memory, Shard(4, batch_size=2, rank=0, size=1), workers=3,
                                  device=CPU), InMemoryLoader)
    lazy = _Folder(4)
    plain = make_loader(lazy, Shard(4, batch_size=2, rank=0, size=1), workers=0, device=CPU)
    assert isinstance(plain, DataLoader) and plain.num_workers == 0
    assert plain.collate_fn is collate and plain.pin_memory is False
    assert [b[0].shape[0] for b in plain] == [2, 2]
    # make_loader sets it for the process: the test's own value is put back afterwards, so the
    # MPI jobs later tests start do initialise MPI.
    monkeypatch.setenv("MPI4PY_RC_INITIALIZE", "as before")
    pooled = make_loader(lazy, Shard(4, batch_size=2, rank=0, size=1), workers=2, device=CPU)
    assert pooled.num_workers == 2 and pooled.persistent_workers is True  # not started yet
    assert pooled.multiprocessing_context.get_start_method() == "forkserver"
    assert os.environ["MPI4PY_RC_INITIALIZE"] == "false"  # a worker must not start MPI


def test_train_data_knows_whether_it_is_held_in_memory() -> None:
    info = from_arrays(_arrays(), "classification").info
    assert TrainData(info, _Folder(1), _Folder(1), None).in_memory is False


def test_in_memory_batches_follow_the_data_to_its_device() -> None:
    meta = torch.device("meta")
    data = InMemory(np.arange(8.0).reshape(4, 2), np.arange(4)).to(meta)
    assert data.x.device == meta and data.y.device == meta
    xs, ys = data.__getitems__([3, 1])
    assert xs.shape == (2, 2) and ys.shape == (2,) and xs.device == meta


def test_two_dimensional_targets_count_as_their_columns() -> None:
    data = from_arrays(_arrays(y=np.zeros((10, 2))), "regression")
    assert data.info.n_targets == 2


def test_the_splits_stay_apart() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(12, 5)).astype(np.float32)
    y = np.arange(12) % 3
    ds = Dataset(x_train=x[:6], y_train=y[:6], x_val=x[6:9], y_val=y[6:9], x_test=x[9:],
                 y_test=y[9:], n_classes=3)
    data = from_arrays(ds, "classification")
    assert (len(data.train), len(data.val), len(data.test)) == (6, 3, 3)
    assert torch.equal(data.val.x, torch.as_tensor(x[6:9]))
    assert torch.equal(data.test.x, torch.as_tensor(x[9:]))
    assert data.info.input_shape == (5,)
    folder = TorchDatasets(_Folder(5), _Folder(2), _Folder(3), n_classes=2)
    lazy = loaders._from_torch(folder, TrainConfig(task="classification"))  # noqa: SLF001
    assert lazy.val is folder.val and lazy.test is folder.test


def test_the_study_task_and_validation_share_reach_the_data(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    (tmp_path / "task_sets.py").write_text(
        "import numpy as np\n"
        "from training import Dataset, TorchDatasets\n"
        "SEEN = []\n"
        "def arrays(f):\n"
        "    SEEN.append(f)\n"
        "    x = np.zeros((4, 3), np.float32); y = np.linspace(0, 1, 4)\n"
        "    return Dataset(x, y, x, y, x[:0], y[:0], 0)\n"
        "def lazy(f):\n"
        "    return TorchDatasets([(np.zeros(3, np.float32), np.zeros(2, np.float32))],"
        " [(np.zeros(3, np.float32), np.zeros(2, np.float32))])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(loaders, "FORKSERVER_PRELOAD", ["torch"])
    got = load_train_data(TrainConfig(dataset="task_sets:arrays", task="regression",
                                      val_fraction=0.3))
    import task_sets  # type: ignore[import-not-found]

    assert task_sets.SEEN == [0.3] and got.info.task == "regression"
    assert got.train.y.dtype == torch.float32 and got.info.n_targets == 1
    lazy = load_train_data(TrainConfig(dataset="task_sets:lazy", task="regression"))
    assert lazy.info.task == "regression" and lazy.info.n_targets == 2
    digits = load_train_data(TrainConfig(dataset="digits", task="regression"))
    assert digits.info.task == "regression" and digits.train.y.dtype == torch.float32
    with pytest.raises(PluginError) as info:
        load_train_data(TrainConfig(dataset="task_sets:nothing"))
    assert str(info.value) == ("training.dataset: module 'task_sets' has no function "
                               "'nothing'")


def test_claims_read_the_first_epochs_order_until_told_another() -> None:
    s = ClaimedBatches(6, batch_size=4, seed=2, claims=_Claims(2, [0]))  # type: ignore[arg-type]
    order = np.random.default_rng([2, 1]).permutation(6)
    assert list(s) == [order[0:2].tolist()]


def test_an_in_memory_loader_reads_its_own_set_by_the_sampler() -> None:
    memory = InMemory(np.arange(8.0).reshape(4, 2), np.arange(4))
    loader = make_loader(memory, Shard(4, batch_size=2, rank=1, size=2), workers=0, device=CPU)
    assert [ys.tolist() for _, ys in loader] == [[1, 3]]


def test_one_loader_worker_is_kept_for_the_whole_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPI4PY_RC_INITIALIZE", "as before")  # make_loader sets it (see above)
    pooled = make_loader(_Folder(4), Shard(4, batch_size=2, rank=0, size=1), workers=1,
                         device=CPU)
    assert pooled.num_workers == 1 and pooled.persistent_workers is True
    assert pooled.multiprocessing_context.get_start_method() == "forkserver"
