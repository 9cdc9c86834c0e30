"""Record shards without MPI: the packer (resumable, refuses a half-written or foreign
destination), the reader (rows in their order, the one epoch order), the node-local cache
(one copy shared by processes, never a partial shard, LRU, a damaged shard refused)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from training.data._cache import CacheFull, NodeCache
from training.data._datasets import DATASETS
from training.data._pack import PROGRESS, pack
from training.data._shards import INDEX, ShardError, ShardSet, check_shards, read_index

pytestmark = pytest.mark.unit  # starts no process or server


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("p") / "digits"
    pack("digits", dest, shard_mb=0.02)
    return dest


def test_the_pack_holds_every_sample_of_the_source_once_with_its_label(packed: Path) -> None:
    ds = DATASETS["digits"](0.1)
    train = ShardSet(packed, "train")
    assert len(train) == len(ds.x_train) and len(train.shards) > 10
    x, y = train.rows(np.arange(len(train)))
    # the packer shuffled the train split: the "source" column says where each row came from
    table = pa.ipc.open_file(str(packed / train.shards[0]["file"])).read_all()
    src = table.column("source").to_numpy()
    np.testing.assert_array_equal(x[: len(src)], ds.x_train[src])
    np.testing.assert_array_equal(y[: len(src)], ds.y_train[src])
    assert table.column("id").to_pylist() == list(range(len(src)))
    whole = np.concatenate([pa.ipc.open_file(str(packed / s["file"])).read_all()
                            .column("source").to_numpy() for s in train.shards])
    assert sorted(whole) == list(range(len(ds.x_train)))  # each source row once


def test_rows_come_back_in_the_order_asked_across_shards(packed: Path) -> None:
    train = ShardSet(packed, "train")
    rows = np.asarray([700, 3, 150, 3, 1000, 40, 10, 70])  # 40, 10, 70: one shard
    x, y = train.__getitems__(rows)
    for i, r in enumerate(rows):
        one_x, one_y = train[int(r)]
        assert np.array_equal(x[i].numpy(), one_x.numpy()) and int(y[i]) == int(one_y)
    with pytest.raises(IndexError, match="rows outside"):
        train.rows([len(train)])


def test_the_epoch_order_is_every_row_once_a_window_of_shards_at_a_time(packed: Path) -> None:
    train = ShardSet(packed, "train")
    order = train.epoch_order(seed=3, epoch=2, window=4)
    assert sorted(order) == list(range(len(train)))
    assert np.array_equal(order, train.epoch_order(3, 2, 4))  # the same on every rank
    assert not np.array_equal(order, train.epoch_order(3, 3, 4))  # each epoch its own
    shards = train.shard_order(3, 2)
    which = np.searchsorted(train.starts, order, side="right") - 1
    first = sum(train.shards[s]["samples"] for s in shards[:4])
    assert set(which[:first]) == set(shards[:4])  # the first window: its 4 shards only


def test_packing_resumes_after_a_crash_and_refuses_what_it_did_not_write(
        tmp_path: Path) -> None:
    dest = tmp_path / "d"
    calls = []

    def crash(done: int, total: int) -> None:
        calls.append(done)
        if len(calls) == 3:
            raise KeyboardInterrupt  # killed after its third shard

    with pytest.raises(KeyboardInterrupt):
        pack("digits", dest, shard_mb=0.05, progress=crash)
    assert not (dest / INDEX).exists() and (dest / PROGRESS).exists()
    with pytest.raises(ShardError, match="has no index.json"):
        read_index(dest)
    with pytest.raises(ShardError, match="other settings"):
        pack("digits", dest, shard_mb=0.1)
    mtime = (dest / "train" / "00000.arrow").stat().st_mtime_ns
    seen: list[int] = []
    index = pack("digits", dest, shard_mb=0.05, progress=lambda d, t: seen.append(d))
    assert seen[0] > calls[0]  # the shards written before the crash were kept ...
    assert (dest / "train" / "00000.arrow").stat().st_mtime_ns == mtime  # ... not rewritten
    assert not (dest / PROGRESS).exists() and not list(dest.rglob("*.tmp"))
    again = tmp_path / "fresh"
    assert pack("digits", again, shard_mb=0.05)["splits"] == index["splits"]  # same bytes
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ShardError, match="not a packed dataset"):
        pack("digits", foreign)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


def test_an_image_folder_packs_as_bytes_read_back_as_tensor_floats(tmp_path: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    pixels = {}
    for c in ("a", "b"):
        (tmp_path / "img" / "train" / c).mkdir(parents=True)
        for i in range(6):
            a = rng.integers(0, 256, (5, 4), dtype=np.uint8)
            Image.fromarray(a).save(tmp_path / "img" / "train" / c / f"{i}.png")
            pixels[(c, i)] = a
    index = pack(str(tmp_path / "img"), tmp_path / "s", val_fraction=0.25)
    assert index["x"] == {"dtype": "uint8", "shape": [1, 5, 4], "scale": 1 / 255}
    assert index["n_classes"] == 2 and index["splits"]["val"]["samples"] == 3
    train = ShardSet(tmp_path / "s", "train")
    x, y = train.__getitems__(np.arange(len(train)))
    assert x.dtype.is_floating_point and float(x.max()) <= 1.0
    found = {tuple((xi[0].numpy() * 255).round().astype(np.uint8).ravel()) for xi in x}
    assert found <= {tuple(a.ravel()) for a in pixels.values()} and len(found) == 9
    # --normalize: (x / 255 - mean) / std as the samples are read, the stored bytes the same
    pack(str(tmp_path / "img"), tmp_path / "n", val_fraction=0.25, normalize="0.5/0.25")
    normed = ShardSet(tmp_path / "n", "train").__getitems__(np.arange(len(train)))[0]
    assert torch.allclose(normed, (x - 0.5) / 0.25, atol=1e-6)
    with pytest.raises(ShardError, match="2 values, the samples have 1 channels"):
        pack(str(tmp_path / "img"), tmp_path / "bad", normalize="0.5,0.5/0.2,0.2")
    assert not (tmp_path / "bad").exists()


def test_the_cache_never_hands_out_a_partial_or_damaged_shard(
        packed: Path, tmp_path: Path) -> None:
    entry = read_index(packed)["splits"]["train"]["shards"][0]
    cache = NodeCache(tmp_path / "c", 1 << 30)
    name = cache.name(entry)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / f".{name}.999.tmp").write_bytes(b"half")  # a killed copier's file
    local = cache.fetch(packed / entry["file"], entry)
    assert local.read_bytes() == (packed / entry["file"]).read_bytes()
    assert not list((tmp_path / "c").glob("*.tmp"))
    bad = tmp_path / "bad.arrow"
    bad.write_bytes((packed / entry["file"]).read_bytes()[:-10] + b"0123456789")
    other = NodeCache(tmp_path / "c2", 1 << 30)
    with pytest.raises(ShardError, match="SHA-256"):
        other.fetch(bad, entry)
    assert other.copies() == []  # nothing left to be read


def test_a_full_cache_evicts_the_least_recently_used_and_a_too_small_one_says_so(
        packed: Path, tmp_path: Path) -> None:
    shards = read_index(packed)["splits"]["train"]["shards"]
    size = max(s["bytes"] for s in shards)
    cache = NodeCache(tmp_path / "c", 3 * size)
    paths = [cache.fetch(packed / s["file"], s) for s in shards[:3]]
    os.utime(paths[1], (1, 1))  # the least recently used
    cache.fetch(packed / shards[3]["file"], shards[3])
    assert not paths[1].exists() and paths[0].exists() and paths[2].exists()
    assert sum(p.stat().st_size for p in cache.copies()) <= 3 * size
    with pytest.raises(CacheFull, match="larger than the cache's limit"):
        NodeCache(tmp_path / "tiny", 10).fetch(packed / shards[0]["file"], shards[0])


def test_a_changed_shard_is_refused_before_training(packed: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(packed, copy)
    check_shards(copy)
    with open(copy / "train" / "00001.arrow", "ab") as f:
        f.write(b"x")
    with pytest.raises(ShardError, match="00001.arrow has .* bytes, the index says"):
        check_shards(copy)


def test_search_data_pack_and_validate_name_a_bad_shards_directory_in_one_line(
        packed: Path, tmp_path: Path) -> None:
    from tests.cli_helpers import run_cli

    code, out, _ = run_cli("data", "pack", "digits", str(tmp_path / "d"), "--limit", "100",
                           "--shard-mb", "0.01")
    assert code == 0 and 'dataset = "shards:' in out
    index = read_index(tmp_path / "d")
    assert index["splits"]["train"]["samples"] == 100
    assert run_cli("data", "verify", str(tmp_path / "d"))[0] == 0
    with open(tmp_path / "d" / index["splits"]["train"]["shards"][0]["file"], "r+b") as f:
        f.seek(200)
        f.write(b"\xff")  # same size, other bytes
    code, _, err = run_cli("data", "verify", str(tmp_path / "d"))
    assert code == 1 and "differ from their checksum" in err
    code, _, err = run_cli("data", "pack", "nosuch", str(tmp_path / "e"))
    assert code == 2 and "not a built-in dataset" in err and not (tmp_path / "e").exists()
    study = tmp_path / "s.toml"
    study.write_text(f'name = "s"\n[training]\ndataset = "shards:{tmp_path / "none"}"\n')
    code, _, err = run_cli("validate", str(study))
    assert code == 2 and "training.dataset" in err and "does not exist" in err
    assert len(err.strip().splitlines()) == 1


def test_an_epoch_order_with_a_cache_copies_the_epochs_shards_ahead_in_that_order(
        packed: Path, tmp_path: Path) -> None:
    shards = read_index(packed)["splits"]["train"]["shards"]
    size = sum(s["bytes"] for s in shards)
    train = ShardSet(packed, "train", cache=NodeCache(tmp_path / "c", 4 * size))
    train.epoch_order(seed=0, epoch=1, window=4)
    assert train.prefetcher is not None
    train.prefetcher.join(60)
    assert len(train.cache.copies()) == len(shards) and train.cache.copied == len(shards)
    assert train.reads == 0  # copied, not yet read
    half = ShardSet(packed, "train", cache=NodeCache(tmp_path / "h", size))  # budget: half
    order = [int(s) for s in half.shard_order(0, 1)]
    half.epoch_order(seed=0, epoch=1, window=4)
    half.prefetcher.join(60)
    names = {p.name for p in half.cache.copies()}
    got = [s for s in order if half.cache.name(shards[s]) in names]
    assert got == order[: len(got)] and 0 < len(got) < len(shards)  # the first ones, in order



def test_an_index_of_another_format_or_version_is_refused(packed: Path, tmp_path: Path) -> None:
    import shutil

    for key, value in (("format", "webdataset"), ("version", 2)):
        copy = tmp_path / key
        shutil.copytree(packed, copy)
        index = json.loads((copy / INDEX).read_text())
        (copy / INDEX).write_text(json.dumps({**index, key: value}))
        with pytest.raises(ShardError, match="expected 'detol-shards' version 1"):
            read_index(copy)


def test_a_copy_evicted_between_fetch_and_open_is_fetched_again(
        packed: Path, tmp_path: Path) -> None:
    train = ShardSet(packed, "train", cache=NodeCache(tmp_path / "c", 1 << 30))
    fetch, calls = train.cache.fetch, []

    def evicting(source: Path, entry: dict) -> Path:
        local = fetch(source, entry)
        calls.append(local)
        if len(calls) == 1:
            local.unlink()  # another process's eviction, just after this one's fetch
        return local

    train.cache.fetch = evicting
    x, _ = train.rows([0])
    assert len(calls) == 2 and x.shape[0] == 1


def test_a_set_whose_cache_is_prefetching_still_pickles_for_loader_workers(
        packed: Path, tmp_path: Path) -> None:
    import pickle

    train = ShardSet(packed, "train", cache=NodeCache(tmp_path / "c", 1 << 30))
    train.epoch_order(0, 1, 4)  # starts the prefetch thread (not picklable)
    train.rows([0])
    clone = pickle.loads(pickle.dumps(train))
    assert clone.prefetcher is None and clone._open == {}
    assert np.array_equal(clone.rows([5, 1])[1], train.rows([5, 1])[1])
