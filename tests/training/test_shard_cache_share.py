"""The node-local cache with other processes: four that read every shard at once make one copy
of each (the others wait on its lock and find it); `search validate`'s fresh-process check
reads a pack without filling the cache."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from training.data._cache import NodeCache
from training.data._pack import pack
from training.data._shards import ShardSet, read_index


@pytest.fixture
def packed(tmp_path: Path) -> Path:
    dest = tmp_path / "digits"
    pack("digits", dest, shard_mb=0.02)
    return dest


def _fetch_all(cache_dir: str, root: str, out: str) -> None:
    train = ShardSet(root, "train", cache=NodeCache(cache_dir, 1 << 30))
    train.rows(np.arange(len(train)))
    Path(out).write_text(json.dumps({"copied": train.cache.copied}))


def test_processes_on_a_node_share_one_copy_of_each_shard(packed: Path, tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_fetch_all, args=(str(tmp_path / "c"), str(packed),
                                                  str(tmp_path / f"{i}.json")))
             for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    shards = read_index(packed)["splits"]["train"]["shards"]
    copies = NodeCache(tmp_path / "c", 1 << 30).copies()
    assert len(copies) == len(shards)  # one copy each, though 4 processes read them all
    copied = sum(json.loads((tmp_path / f"{i}.json").read_text())["copied"] for i in range(4))
    assert copied == len(shards)


def test_search_validate_reads_a_pack_without_filling_the_node_cache(
        packed: Path, tmp_path: Path) -> None:
    from tests.cli_helpers import run_cli

    study = tmp_path / "s.toml"  # pruning: validate builds the model on the data (fresh process)
    study.write_text(f'name = "s"\n[training]\ndataset = "shards:{packed}"\n'
                     f'data_cache = "{tmp_path / "cache"}"\nprune = {{ target = 0.5 }}\n')
    code, out, err = run_cli("validate", str(study), "--storage", str(tmp_path / "j.journal"))
    assert code == 0, err
    assert "training.prune: cuts" in out + err  # the check read the pack and ran the model
    assert not (tmp_path / "cache").exists()  # validate writes nothing
