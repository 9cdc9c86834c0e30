"""A full disk under the storage ends `search run` with one line and a hint to resume, not a
traceback (found by the crash soak, benchmarks/crash_soak.py); the study is kept."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from tests.cli_helpers import run_search, write_quad_study


@pytest.fixture
def full_disk(tmp_path: Path):
    """A 1 MiB tmpfs at tmp_path/disk, filled to the last byte (root mounts it)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    try:
        with open(disk / "filler", "wb") as f, pytest.raises(OSError) as full:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        assert full.value.errno == errno.ENOSPC, full.value  # full, not some other failure
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.skipif(os.geteuid() != 0,
                    reason="mounting a small filesystem needs root (CI runs as root)")
def test_a_full_disk_under_the_journal_is_one_line_and_a_hint_to_resume(
    tmp_path: Path, full_disk: Path
) -> None:
    study = write_quad_study(tmp_path, trials=2)
    journal = full_disk / "s.journal"

    code, _, stderr = run_search("run", str(study), "--storage", str(journal),
                                 "--no-progress", cwd=tmp_path)

    assert code == 1, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert lines[0].startswith("error: storage: No space left on device"), lines
    assert "run the same command again to resume" in lines[0]
