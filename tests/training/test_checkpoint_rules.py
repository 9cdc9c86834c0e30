"""training.state._checkpoint's rules, in-process (issue 33: the full mutant set of the module).

The MPI side is a two-rank stand-in for ``comm`` (gather/scatter with mpi4py's signatures and
root semantics) so rank 0 and rank 1 of one save and one load are seen from one process; the
real collectives run in tests/training/test_checkpoints.py (mpiexec)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from mpi4py import MPI

import training.state._checkpoint as ckpt
from training.state._checkpoint import (
    FORMAT,
    Checkpointer,
    CheckpointError,
    CheckpointMismatch,
    check_compatible,
)
from training.state._reshard import reshard
from training.storage._artifacts import FREE_ON_RESTORE, CheckpointPlan

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

CONFIG = {"algorithm": "asgd", "seed": 5, "hidden": 128, "epochs": 4}


class Comm:
    """One rank of a ``size``-rank communicator; ``others`` are the other ranks' objects."""

    def __init__(self, rank: int, size: int, others: Any = None) -> None:
        self.rank, self.size, self.others, self.roots = rank, size, others, []

    def gather(self, sendobj: Any, root: int = 0) -> list | None:
        self.roots.append(root)
        return [sendobj, *self.others] if self.rank == root else None

    def scatter(self, sendobj: Any, root: int = 0) -> Any:
        self.roots.append(root)
        return sendobj[self.rank] if self.rank == root else self.others


class Store:
    def __init__(self, tmp_path: Path) -> None:
        self.dir, self.uploaded, self.downloaded, self.removed = tmp_path, [], [], []

    def upload(self, path: str, epoch: int) -> str:
        self.uploaded.append((path, epoch, os.path.getsize(path)))
        name = f"a{len(self.uploaded)}"
        shutil.copy(path, self.dir / name)
        return name

    def download(self, artifact_id: str, path: str) -> None:
        self.downloaded.append((artifact_id, path))
        shutil.copy(self.dir / artifact_id, path)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """MPI.Wtime advances by one second per call."""
    now = [0.0]

    def wtime() -> float:
        now[0] += 1.0
        return now[0]

    monkeypatch.setattr(ckpt, "MPI", type("M", (), {"Wtime": staticmethod(wtime)}))
    return now


def _pair(tmp_path: Path, comm: Any, keep: int = 2) -> tuple[Checkpointer, Store]:
    store = Store(tmp_path)
    ck = Checkpointer(CheckpointPlan(store=str(tmp_path), keep=keep), comm, upload=store.upload,
                      download=store.download, remove=store.removed.append)
    return ck, store


def test_format_and_ranks_are_checked_with_the_reason() -> None:
    with pytest.raises(CheckpointMismatch, match=r"^checkpoint format None, this version reads 1$"):
        check_compatible({"ranks": 1, "config": CONFIG}, CONFIG, 1)
    with pytest.raises(CheckpointMismatch, match=r"^checkpoint format 2, this version reads 1$"):
        check_compatible({"format": 2, "ranks": 1, "config": CONFIG}, CONFIG, 1)
    own = {"format": FORMAT, "ranks": 2, "config": CONFIG}
    with pytest.raises(CheckpointMismatch) as e:
        check_compatible(own, CONFIG, 3)
    assert str(e.value) == (
        "the checkpoint was written by 2 ranks; this job has 3 (each rank's state is restored "
        "on the same rank: an own loop's checkpoint does not change width)")
    check_compatible(own, CONFIG, 2)
    check_compatible({**own, "reshard": True}, CONFIG, 3)
    with pytest.raises(CheckpointMismatch, match="written by 2 ranks"):
        check_compatible({**own, "reshard": False}, CONFIG, 3)


def test_every_differing_key_counts_on_either_side_and_four_are_named() -> None:
    saved = {"format": FORMAT, "ranks": 1, "config": CONFIG}
    check_compatible(saved, dict(CONFIG), 1)
    with pytest.raises(CheckpointMismatch, match=r"\(extra: None != 1\)$"):
        check_compatible(saved, {**CONFIG, "extra": 1}, 1)  # only in the reader's config
    with pytest.raises(CheckpointMismatch, match=r"\(hidden: 128 != None\)$"):
        check_compatible(saved, {k: v for k, v in CONFIG.items() if k != "hidden"}, 1)
    five = {**CONFIG, "a": 1, "b": 1, "c": 1, "d": 1, "e": 1}
    with pytest.raises(CheckpointMismatch) as e:
        check_compatible({**saved, "config": five}, {**five, **dict.fromkeys("abcde", 2)}, 1)
    assert str(e.value) == ("the checkpoint was written by another configuration "
                            "(a: 1 != 2, b: 1 != 2, c: 1 != 2, d: 1 != 2)")
    # a free key may differ; it is free only where the writer said so too
    assert "epochs" in FREE_ON_RESTORE
    check_compatible(saved, {**CONFIG, "epochs": 9}, 1)
    with pytest.raises(CheckpointMismatch, match=r"\(epochs: 4 != 9\)"):
        check_compatible({**saved, "free_on_restore": []}, {**CONFIG, "epochs": 9}, 1)


def test_save_writes_one_file_of_every_rank_and_keeps_the_newest(
    tmp_path: Path, clock: list[float]
) -> None:
    comm = Comm(0, 2, [{"w": torch.ones(2)}])
    ck, store = _pair(tmp_path, comm, keep=2)
    assert (ck.seconds, ck.bytes, ck.reshard_seconds, ck.written) == (0.0, 0, 0.0, [])
    ids = [ck.save({"epoch": e, "ranks": 2, "config": CONFIG}, {"w": torch.zeros(2)})
           for e in (1, 2, 3)]
    assert ids == ["a1", "a2", "a3"] and comm.roots == [0, 0, 0]
    assert ck.written == ["a2", "a3"] and store.removed == ["a1"]
    path, epoch, size = store.uploaded[-1]
    assert (Path(path).name, epoch, ck.bytes) == ("checkpoint-epoch3.pt", 3, size)
    assert Path(path).parent.name.startswith("detol-ckpt-") and not Path(path).exists()
    assert ck.seconds == 3.0  # one second per save, summed
    data = torch.load(tmp_path / "a3", weights_only=True)
    assert data["epoch"] == 3 and data["format"] == FORMAT
    assert data["free_on_restore"] == list(FREE_ON_RESTORE)
    assert [s["w"].tolist() for s in data["rank_states"]] == [[0.0, 0.0], [1.0, 1.0]]


def test_keep_zero_still_keeps_the_newest(tmp_path: Path) -> None:
    ck, store = _pair(tmp_path, MPI.COMM_SELF, keep=0)
    for e in (1, 2):
        ck.save({"epoch": e, "ranks": 1, "config": CONFIG}, {})
    assert ck.written == ["a2"] and store.removed == ["a1"]
    plain = Checkpointer(CheckpointPlan(store=str(tmp_path), keep=1), MPI.COMM_SELF,
                         upload=Store(tmp_path).upload)  # no remove function: ids still rotate
    for e in (1, 2):
        plain.save({"epoch": e, "ranks": 1, "config": CONFIG}, {})
    assert plain.written == ["a2"]


def test_only_rank_0_writes_and_it_needs_the_store_functions(tmp_path: Path) -> None:
    ck, store = _pair(tmp_path, Comm(1, 2))
    assert ck.save({"epoch": 1, "ranks": 2, "config": CONFIG}, {}) is None
    assert store.uploaded == [] and ck.written == []
    bare = Checkpointer(CheckpointPlan(store=str(tmp_path)), MPI.COMM_SELF)
    with pytest.raises(RuntimeError) as e:
        bare.save({"epoch": 1, "ranks": 1, "config": CONFIG}, {})
    assert str(e.value) == "rank 0 needs an upload function to write checkpoints"
    with pytest.raises(RuntimeError) as e:
        bare.load("a1", CONFIG)
    assert str(e.value) == "rank 0 needs a download function to restore checkpoints"


def test_load_hands_each_rank_its_state_and_reshards_another_width(
    tmp_path: Path, clock: list[float]
) -> None:
    writer, store = _pair(tmp_path, MPI.COMM_SELF)
    state = {"model": {"w": torch.full((3,), 2.0)}, "steps": 7,
             "torch_rng": torch.Generator().manual_seed(1).get_state()}
    artifact = writer.save({"epoch": 3, "ranks": 1, "config": CONFIG, "reshard": True}, state)
    assert writer.reshard_seconds == 0.0
    comm = Comm(0, 2)
    reader = Checkpointer(CheckpointPlan(store=str(tmp_path)), comm, download=store.download)
    header, mine = reader.load(artifact, CONFIG)
    assert store.downloaded[-1][0] == artifact and comm.roots == [0]
    path = Path(store.downloaded[-1][1])
    assert path.name == "checkpoint.pt" and path.parent.name.startswith("detol-ckpt-")
    assert header["epoch"] == 3 and "rank_states" not in header
    want = reshard([state], 2, algorithm="asgd", seed=5, epoch=3)
    assert torch.equal(mine["model"]["w"], want[0]["model"]["w"])
    assert reader.reshard_seconds == 1.0
    # rank 1 of the same load gets what rank 0 scattered to it
    rank1 = Checkpointer(CheckpointPlan(store=str(tmp_path)), Comm(1, 2, (header, want[1])))
    assert rank1.load(artifact, CONFIG)[1] is want[1] and store.downloaded[-1][1] == str(path)


def test_reshard_takes_the_seed_and_epoch_the_checkpoint_was_written_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple] = []

    def spy(states: list, q: int, *, algorithm: str, seed: int, epoch: int) -> list:
        seen.append((len(states), q, algorithm, seed, epoch))
        return reshard(states, q, algorithm=algorithm, seed=seed, epoch=epoch)

    monkeypatch.setattr(ckpt, "reshard", spy)
    writer, store = _pair(tmp_path, MPI.COMM_SELF)
    noseed = {k: v for k, v in CONFIG.items() if k != "seed"}
    for config in (CONFIG, noseed):
        artifact = writer.save({"epoch": 3, "ranks": 1, "config": config, "reshard": True},
                               {"steps": 1})
        Checkpointer(writer.plan, Comm(0, 2), download=store.download).load(artifact, config)
    assert seen == [(1, 2, "asgd", 5, 3), (1, 2, "asgd", 0, 3)]


def test_a_bad_checkpoint_is_one_error_on_every_rank(tmp_path: Path) -> None:
    writer, store = _pair(tmp_path, MPI.COMM_SELF)
    artifact = writer.save({"epoch": 2, "ranks": 1, "config": CONFIG, "reshard": True},
                           {"w": torch.zeros(1)})
    comm = Comm(0, 2)
    reader = Checkpointer(writer.plan, comm, download=store.download)
    with pytest.raises(CheckpointError) as e:
        reader.load(artifact, {**CONFIG, "hidden": 64})
    assert str(e.value) == (f"cannot resume from checkpoint {artifact}: the checkpoint was "
                            "written by another configuration (hidden: 128 != 64)")
    torch.save({"format": FORMAT, "pickled": Path("x")}, tmp_path / "evil")
    with pytest.raises(CheckpointError, match="cannot resume from checkpoint evil: .*[Ww]eights"):
        reader.load("evil", CONFIG)  # only tensors and plain data are read back


def test_a_pool_keeps_each_save_in_memory_and_restores_copies_of_it(
    tmp_path: Path, clock: list[float]
) -> None:
    """A warm pool's rank 0 (training.jobs._regroup's shelf): a save is kept in memory too, linked on
    the trial, and a continuation restores it with no file read back, as copies, on any width."""
    shelf: dict[str, dict[str, Any]] = {}
    linked: list[tuple[str, dict[str, Any]]] = []
    store = Store(tmp_path)
    comm = Comm(0, 2, [{"w": torch.ones(2), "algorithm": {"rng": 1}}])
    ck = Checkpointer(CheckpointPlan(store=str(tmp_path), keep=2), comm, upload=store.upload,
                      download=store.download, memory=shelf,
                      link=lambda aid, header: linked.append((aid, header)))
    assert (ck.restored_from, ck.restore_seconds) == ("", 0.0)
    live = {"w": torch.zeros(2), "algorithm": {"rng": 0}}
    header = {"epoch": 2, "ranks": 2, "config": CONFIG, "reshard": True}
    aid = ck.save(header, live)
    assert linked == [(aid, header)]
    assert [s["w"].tolist() for s in shelf[aid]["rank_states"]] == [[0.0, 0.0], [1.0, 1.0]]
    live["w"] += 5.0  # the trainer trains on: the kept state is a copy
    assert shelf[aid]["rank_states"][0]["w"].tolist() == [0.0, 0.0]
    clock[0] = 10.0
    got_header, mine = ck.load(aid, CONFIG)
    assert ck.restored_from == "memory" and store.downloaded == []  # no file read back
    assert ck.restore_seconds == 1.0  # one tick of the clock: the load's own time
    assert got_header["epoch"] == 2 and mine["w"].tolist() == [0.0, 0.0]
    mine["w"] += 1.0  # the restored state is a copy too: the shelf keeps its own
    assert shelf[aid]["rank_states"][0]["w"].tolist() == [0.0, 0.0]
    # the same checkpoint on one rank: resharded from the kept states (the algorithm's own)
    one = Checkpointer(CheckpointPlan(store=str(tmp_path)), Comm(0, 1, []), memory=shelf,
                       download=store.download)
    _, merged = one.load(aid, CONFIG)
    assert one.restored_from == "memory" and merged["w"].tolist() == [0.5, 0.5]
    # an id the shelf does not hold is read from the store
    other = Checkpointer(CheckpointPlan(store=str(tmp_path)), Comm(0, 2, [None]),
                         download=store.download, memory={})
    _, from_file = other.load(aid, CONFIG)
    assert other.restored_from == "store" and store.downloaded[-1][0] == aid
    assert from_file["w"].tolist() == [0.0, 0.0]


def test_a_file_restores_on_the_cpu_as_plain_tensors(tmp_path: Path, clock: list[float]) -> None:
    store = Store(tmp_path)
    ck = Checkpointer(CheckpointPlan(store=str(tmp_path)), Comm(0, 1, []), upload=store.upload,
                      download=store.download)
    aid = ck.save({"epoch": 1, "ranks": 1, "config": CONFIG}, {"w": torch.arange(3.0)})
    loads: list[dict[str, Any]] = []
    real = torch.load

    def spy(*args: Any, **kwargs: Any) -> Any:
        loads.append(kwargs)
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ckpt.torch, "load", spy)
        _, mine = ck.load(aid, CONFIG)
    assert ck.restored_from == "store" and mine["w"].tolist() == [0.0, 1.0, 2.0]
    # a GPU run's checkpoint resumes on a machine without one; and no pickled code runs
    assert loads == [{"map_location": "cpu", "weights_only": True}]
