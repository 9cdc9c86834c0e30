"""A journal cut short by a crash (issue 27): the torn tail is mended under the journal's lock
before the next write, a copy of the cut bytes is kept, and damage that is not a tail is refused
with one line and the file left byte-identical. Plain Optuna reads the result."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from tests.cli_helpers import run_search, write_quad_study
from training.contract import open_storage


def _plain(path: Path, name: str = "s") -> optuna.Study:
    """The study read by plain Optuna, as a user's notebook reads it."""
    return optuna.load_study(study_name=name, storage=JournalStorage(JournalFileBackend(str(path))))


def _three_trials(path: Path) -> bytes:
    study = optuna.create_study(study_name="s", storage=JournalStorage(JournalFileBackend(str(path))))
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    return path.read_bytes()


def _torn(path: Path, cut: int = 25) -> bytes:
    """Cut the last ``cut`` bytes, as SIGKILL mid-append leaves it; the bytes left of the torn
    record (what must be kept aside)."""
    whole = _three_trials(path)
    os.truncate(path, len(whole) - cut)
    return whole[whole.rstrip(b"\n").rfind(b"\n") + 1 : len(whole) - cut]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.unit
def test_a_torn_tail_is_cut_kept_aside_and_the_study_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s.journal"
    torn = _torn(path)
    assert len(_plain(path).trials) == 3  # Optuna skips the torn line: trial 2 reads RUNNING
    study = optuna.load_study(study_name="s", storage=open_storage(str(path)))
    with caplog.at_level("WARNING", logger="detol.storage"):
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    kept = list(tmp_path.glob("s.journal.torn-*"))
    assert [p.read_bytes() for p in kept] == [torn]
    assert path.read_bytes().endswith(b"\n")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "torn last record" in lines[0] and str(kept[0]) in lines[0]
    again = _plain(path)  # plain Optuna reads every record, the new ones included
    assert len(again.trials) == 5
    assert [t.state.name for t in again.trials[3:]] == ["COMPLETE", "COMPLETE"]


@pytest.mark.unit
def test_damage_with_good_records_after_it_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "s.journal"
    whole = _three_trials(path)
    middle = whole.find(b"\n", len(whole) // 2) + 2  # inside a record with records after it
    path.write_bytes(whole[:middle] + b"#" + whole[middle:])
    before = _sha(path)
    with pytest.raises(ValueError) as info:
        open_storage(str(path))
    message = str(info.value)
    assert "\n" not in message
    assert "not a torn tail" in message and str(path) in message
    assert _sha(path) == before
    assert not list(tmp_path.glob("*.torn-*"))


def test_search_run_refuses_a_damaged_journal_with_exit_2(tmp_path: Path) -> None:
    study = write_quad_study(tmp_path, trials=2)
    path = tmp_path / "s.journal"
    whole = _three_trials(path)
    cut = whole.find(b"\n") + 1  # a record gone from the middle: the next line is half of one
    path.write_bytes(whole[:cut] + whole[cut + 40 :])
    before = _sha(path)
    code, _, stderr = run_search("run", str(study), "--storage", str(path), "--no-progress",
                                 cwd=tmp_path, timeout=120)
    assert code == 2, stderr
    assert stderr.strip().count("\n") == 0 and "not a torn tail" in stderr
    assert _sha(path) == before


@pytest.mark.unit
def test_the_repair_waits_for_the_journals_lock(tmp_path: Path) -> None:
    """A writer that holds the lock (another driver mid-append) is never raced: nothing is cut
    until it lets go."""
    path = tmp_path / "s.journal"
    _torn(path)
    size = path.stat().st_size
    study = optuna.load_study(study_name="s", storage=open_storage(str(path)))
    lock = Path(f"{path}.lock")
    os.symlink(path, lock)  # Optuna's JournalFileSymlinkLock, held by "another process"
    done = threading.Event()
    writer = threading.Thread(target=lambda: (study.ask(), done.set()), daemon=True)
    writer.start()
    time.sleep(1.0)
    assert path.stat().st_size == size and not done.is_set()
    lock.unlink()
    assert done.wait(30)
    assert len(list(tmp_path.glob("s.journal.torn-*"))) == 1
    assert len(_plain(path).trials) == 4


@pytest.mark.unit
def test_two_writers_on_one_torn_journal_repair_once(tmp_path: Path) -> None:
    path = tmp_path / "s.journal"
    _torn(path)
    studies = [optuna.load_study(study_name="s", storage=open_storage(str(path)))
               for _ in range(2)]
    start = threading.Barrier(2)

    def write(study: optuna.Study) -> None:
        start.wait()
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)

    threads = [threading.Thread(target=write, args=(s,)) for s in studies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(list(tmp_path.glob("s.journal.torn-*"))) == 1
    trials = _plain(path).trials
    assert len(trials) == 9
    assert sum(t.state.name == "COMPLETE" for t in trials) == 8  # the torn one stays RUNNING


def test_the_issues_case_resumes_to_exit_0_with_every_trial_readable(tmp_path: Path) -> None:
    """Issue 27's report: a 3-trial study, the last 25 bytes cut, `search run` resumes."""
    study = write_quad_study(tmp_path, trials=3)
    path = tmp_path / "q.journal"
    code, _, stderr = run_search("run", str(study), "--storage", str(path), "--no-progress",
                                 cwd=tmp_path)
    assert code == 0, stderr
    os.truncate(path, path.stat().st_size - 25)
    code, stdout, stderr = run_search("run", str(study), "--storage", str(path), "--no-progress",
                                      "--trials", "4", cwd=tmp_path)
    assert code == 0, stderr
    said = [line for line in stderr.splitlines() if "torn" in line]
    assert len(said) == 1 and "kept in" in said[0], stderr
    trials = _plain(path, "quad").trials
    assert sum(t.state.name == "COMPLETE" for t in trials) == 4
    assert not [t for t in trials if t.state.name == "RUNNING"]
