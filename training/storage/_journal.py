"""A journal file that survives its writer's crash (issue 27).

Optuna's ``JournalFileBackend`` appends one JSON record a line, under a lock file. A writer killed
mid-append (SIGKILL, node failure, full disk) leaves a *torn tail*: the last line has no newline.
Optuna's reader skips such a line, but its writer appends right after it, so the torn bytes and the
next record become one bad line in the middle, and from then on every read raises.

:class:`SafeJournalFileBackend` mends the tail before it writes, under the journal's own lock (so
two writers never both repair or append past torn bytes): the cut bytes are kept beside the file as
``FILE.torn-<UTC time>``, the file is truncated to the end of its last complete record, and one line
says so. Damage that is not a tail (a bad line with a good line after it) is refused with
:class:`JournalDamaged` (one line) and the file is left byte-identical.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal._file import get_lock_file

log = logging.getLogger("detol.storage")


class JournalDamaged(ValueError):
    """A journal whose damage is not a torn tail: nothing was changed."""


def _good(line: bytes) -> bool:
    if not line.endswith(b"\n"):
        return False
    try:
        record = json.loads(line)
        return isinstance(record, dict) and "op_code" in record
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        return False


def scan(path: str, start: int = 0, first_line: int = 1) -> tuple[int, int]:
    """``(end of the last good record, size)`` of the journal at ``path``, read from byte
    ``start``, the start of line ``first_line``. Raises :class:`JournalDamaged` for a bad line
    with a good line after it."""
    end = start
    bad: int | None = None
    with open(path, "rb") as f:
        f.seek(start)
        for number, line in enumerate(f, start=first_line):
            if not _good(line):
                bad = number if bad is None else bad
            elif bad is not None:
                raise JournalDamaged(
                    f"journal {path!r} is damaged at line {bad} (byte {end}) and has good "
                    f"records after it (line {number}): not a torn tail, so it is left as it "
                    "is; restore a copy or cut the bad lines out by hand"
                )
            else:
                end += len(line)
        size = f.tell()
    return end, size


class SafeJournalFileBackend(JournalFileBackend):
    """``JournalFileBackend`` that mends a torn tail (under the lock) before each write."""

    def __init__(self, file_path: str) -> None:
        super().__init__(file_path)
        self._mended = False  # a full check of what this process has not read, once
        self.repairs: list[str] = []  # the kept copies, for tests and messages

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        text = "\n".join(json.dumps(one, separators=(",", ":")) for one in logs) + "\n"
        with get_lock_file(self._lock):  # no other writer (that uses the lock) runs now
            self._mend()
            with open(self._file_path, "ab") as f:
                f.write(text.encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())

    def mend(self) -> None:
        """Cut a torn tail off the file, under the journal's lock."""
        with get_lock_file(self._lock):
            self._mend()

    def _mend(self) -> None:
        """Cut a torn tail off the file. Call with the lock held."""
        size = os.path.getsize(self._file_path)
        if self._mended and size and _last_byte(self._file_path, size) == b"\n":
            return  # the common case: one byte read, no parse
        # Records this process already read are good: check only what comes after them.
        line, start = max(self._log_number_offset.items())
        line, start = (line, start) if start <= size else (0, 0)
        end, size = scan(self._file_path, start, line + 1)
        self._mended = True
        if end == size:
            return
        kept = self._keep(end, size)
        with open(self._file_path, "r+b") as f:
            f.truncate(end)
            f.flush()
            os.fsync(f.fileno())
        self.repairs.append(kept)
        log.warning("journal %s: torn last record cut off at byte %d (%d bytes kept in %s)",
                    self._file_path, end, size - end, kept)

    def _keep(self, end: int, size: int) -> str:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        kept = f"{self._file_path}.torn-{stamp}"
        n = 1
        while os.path.exists(kept):
            n += 1
            kept = f"{self._file_path}.torn-{stamp}-{n}"
        with open(self._file_path, "rb") as src:
            src.seek(end)
            data = src.read(size - end)
        tmp = f"{kept}.tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, kept)
        return kept


def _last_byte(path: str, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(size - 1)
        return f.read(1)
