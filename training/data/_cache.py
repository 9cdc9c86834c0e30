"""A node-local cache of shards, shared by every trial and warm pool on the node.

``NodeCache(dir, limit_bytes).fetch(source, entry)`` returns the local copy of a shard, making
it first if needed. Copies are named by content (the shard's SHA-256 and file name), so two
trials of one dataset share one copy, and a repacked dataset never reads a stale one.

- One copier per shard per node: the copy is made under an exclusive ``flock`` on the shard's
  lock file; the others wait for it, then find the copy. A lock dies with its process, so a
  killed copier leaves nothing held (its partial file is removed by the next one).
- No partial shard is ever read: the copy is written to a temporary name, its SHA-256 compared
  with the index, and renamed into place (rename is atomic on one filesystem).
- Bounded: before a copy, the least recently used copies are removed until the new one fits
  (each read touches its copy's mtime). A reader that still maps a removed copy keeps reading
  it (Linux frees the space when the last map goes); one that finds it gone fetches it again.
- A full disk is one line (:class:`CacheFull`), the partial file removed.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from training.data._shards import ShardError

LOCKS = ".locks"


class CacheFull(ShardError):
    """The cache's disk cannot take a shard."""


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # waits for the holder (or its death)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class NodeCache:
    def __init__(self, directory: str | Path, limit_bytes: int) -> None:
        self.dir = Path(directory)
        self.limit = int(limit_bytes)
        self.copied = 0  # shards this process copied in
        self.copied_bytes = 0
        self.copy_s = 0.0
        self.waited_s = 0.0

    def name(self, entry: dict[str, Any]) -> str:
        return f"{entry['sha256'][:20]}-{Path(entry['file']).name}"

    def fetch(self, source: Path, entry: dict[str, Any]) -> Path:
        """The local copy of shard ``entry`` (at ``source``), copied in if absent."""
        local = self.dir / self.name(entry)
        if local.exists():
            _touch(local)
            return local
        locks = self.dir / LOCKS
        locks.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        with _locked(locks / self.name(entry)):
            self.waited_s += time.perf_counter() - t
            if local.exists():  # another process copied it while this one waited
                _touch(local)
                return local
            for stale in self.dir.glob(f".{self.name(entry)}.*.tmp"):
                stale.unlink(missing_ok=True)  # a copier killed mid-copy (its lock is gone)
            self._make_room(int(entry["bytes"]))
            self._copy(source, local, entry)
        return local

    def _copy(self, source: Path, local: Path, entry: dict[str, Any]) -> None:
        t = time.perf_counter()
        tmp = self.dir / f".{local.name}.{os.getpid()}.tmp"
        h = hashlib.sha256()
        try:
            with open(source, "rb") as src, open(tmp, "wb") as dst:
                while block := src.read(1 << 22):
                    h.update(block)
                    dst.write(block)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise CacheFull(f"data cache {self.dir}: disk full while copying {source} "
                                f"({entry['bytes']} bytes); lower [training] data_cache_gb or "
                                "free space there") from None
            raise ShardError(f"{source}: cannot copy into the data cache {self.dir}: "
                             f"{exc.strerror or exc}") from None
        if h.hexdigest() != entry["sha256"]:
            tmp.unlink(missing_ok=True)
            raise ShardError(f"{source}: its SHA-256 is not the one in the index (changed or "
                             "damaged after packing: pack again)")
        os.replace(tmp, local)
        self.copied += 1
        self.copied_bytes += int(entry["bytes"])
        self.copy_s += time.perf_counter() - t

    def copies(self) -> list[Path]:
        return [p for p in self.dir.iterdir() if p.is_file() and not p.name.startswith(".")]

    def _make_room(self, need: int) -> None:
        """Remove least recently used copies until ``need`` more bytes fit under the limit."""
        if need > self.limit:
            raise CacheFull(f"data cache {self.dir}: a shard of {need} bytes is larger than the "
                            f"cache's limit of {self.limit} bytes ([training] data_cache_gb)")
        with _locked(self.dir / LOCKS / ".evict"):
            files = []
            for p in self.copies():
                try:
                    st = p.stat()
                except FileNotFoundError:
                    continue
                files.append((st.st_mtime, st.st_size, p))
            used = sum(size for _, size, _ in files)
            for _, size, p in sorted(files):
                if used + need <= self.limit:
                    break
                p.unlink(missing_ok=True)
                used -= size


def _touch(path: Path) -> None:
    with suppress(FileNotFoundError):
        os.utime(path)
