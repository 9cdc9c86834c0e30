"""Checkpoints are written all or nothing (issue 27): a writer that dies mid-copy leaves the
artifact it replaces intact and no half file under the artifact's name."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from training.storage._artifacts import artifact_store

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


class _Dies(io.RawIOBase):
    """A source that yields some bytes, then fails as a killed writer would stop."""

    def __init__(self, head: bytes) -> None:
        self._head = head

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # noqa: ANN001
        if not self._head:
            raise OSError("killed mid-write")
        n = min(len(buffer), len(self._head))
        buffer[:n] = self._head[:n]
        self._head = self._head[n:]
        return n


def test_a_checkpoint_cut_mid_write_never_replaces_the_good_one(tmp_path: Path) -> None:
    store = artifact_store(str(tmp_path / "store"))
    store.write("ckpt", io.BytesIO(b"good checkpoint"))
    with pytest.raises(OSError):
        store.write("ckpt", io.BufferedReader(_Dies(b"half a ch")))
    with store.open_reader("ckpt") as f:
        assert f.read() == b"good checkpoint"
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["ckpt"]


def test_a_new_checkpoint_appears_whole(tmp_path: Path) -> None:
    store = artifact_store(str(tmp_path / "store"))
    with pytest.raises(OSError):
        store.write("new", io.BufferedReader(_Dies(b"half")))
    assert not list((tmp_path / "store").iterdir())  # nothing under the name, no temporary
    store.write("new", io.BytesIO(b"whole"))
    with store.open_reader("new") as f:
        assert f.read() == b"whole"
