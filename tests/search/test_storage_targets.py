"""A storage URL that names something other than what it says gets one line naming the field
and what was found, exit 2, and nothing written: a directory, a FIFO, a file of another format,
a directory that refuses files, a filesystem that does not answer."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.cli_helpers import run_cli
from training.storage import _storage, check_storage_file

pytestmark = pytest.mark.unit

STUDY = Path(__file__).resolve().parents[2] / "studies" / "quickstart.toml"


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "notes.txt").write_text("my notes\n")
    (tmp_path / "s.db").write_text("not sqlite\n")
    return tmp_path


@pytest.mark.parametrize(("url", "line"), [
    ("adir", "error: storage: 'adir' is a directory, not a journal file"),
    ("fifo", "error: storage: 'fifo' is a FIFO, not a journal file"),
    ("notes.txt", "error: storage: 'notes.txt' is not an Optuna journal: its first line is not a "
                  "journal record (another file's name? an SQLite file needs 'sqlite:///')"),
    ("sqlite:///adir", "error: storage: sqlite:///adir: 'adir' is a directory, not an SQLite "
                       "file"),
    ("sqlite:///s.db", "error: storage: sqlite:///s.db: 's.db' is not an SQLite database "
                       "(another file's name?)"),
    ("/proc/x.journal", "error: storage: cannot create files in '/proc': No such file or "
                        "directory"),
    ("missing/s.journal", "error: storage: directory "),
])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_storage_that_is_not_what_it_says_is_refused_up_front(
        place: Path, url: str, line: str, command: str) -> None:
    before = sorted(p.name for p in place.iterdir())
    code, out, err = run_cli(command, str(STUDY), "--storage", url)
    assert code == 2, out + err
    assert err.strip().startswith(line) and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in place.iterdir()) == before  # nothing written
    assert (place / "notes.txt").read_text() == "my notes\n"


def test_a_journal_and_an_empty_file_are_accepted(tmp_path: Path) -> None:
    assert check_storage_file(str(tmp_path / "new.journal"), "journal") is False
    (tmp_path / "empty.journal").touch()
    assert check_storage_file(str(tmp_path / "empty.journal"), "journal") is True
    torn = tmp_path / "torn.journal"
    torn.write_bytes(b'{"op_code": 0, "worker_id": "x", "study_na')  # a crash mid-first-write
    assert check_storage_file(str(torn), "journal") is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.journal", "torn.journal"]


def test_a_filesystem_that_does_not_answer_is_refused_within_the_bound() -> None:
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"^'/nfs/s.journal': its filesystem did not answer in "
                                         r"0.2 s \(an unreachable network filesystem\?\)$"):
        _storage._answer_within("'/nfs/s.journal'", lambda: time.sleep(5), timeout=0.2)
    assert time.monotonic() - started < 2
