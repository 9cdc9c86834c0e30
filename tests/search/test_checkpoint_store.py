"""A study's checkpoint store is fixed once and read back from the study (issue 28, item 2):
a resume from another directory (PostgreSQL's default store is the working directory) or
another host finds its parents' checkpoints; another store in the study file is refused."""

from __future__ import annotations

import textwrap
from pathlib import Path

import optuna
import pytest

from search._errors import StudyError
from search.driver._driver import Driver
from search.driver._study import open_study
from search.storage._checkpoint_store import STORE_ATTR
from search.studyfile._study_file import load_study_file

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

URL = "postgresql://me@db.example/optuna"  # never opened: only names the storage


def _study_file(directory: Path, store: str | None = None) -> Path:
    path = directory / "study.toml"
    line = f'store = "{store}"' if store else ""
    path.write_text(textwrap.dedent(f"""\
        name = "promo"
        [budget]
        trials = 4
        [pruner]
        name = "asha"
        promote = true
        [checkpoints]
        {line}
        [training]
        dataset = "digits"
        epochs = 4
        ranks = 1
        [space]
        lr = {{ type = "float", low = 1e-3, high = 0.3, log = true }}
        """))
    return path


def test_a_resume_from_another_directory_reads_the_recorded_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = optuna.storages.InMemoryStorage()
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    sf = load_study_file(_study_file(tmp_path))
    study = open_study(sf, storage, url=URL)
    assert study.user_attrs[STORE_ATTR] == str(first / "detol-artifacts")
    monkeypatch.chdir(second)  # the same study resumed elsewhere (or on another host)
    study = open_study(sf, storage, url=URL)
    driver = Driver(sf, study, client=None, storage_url=URL)  # type: ignore[arg-type]
    assert driver.checkpoints is not None
    assert driver.checkpoints["store"] == str(first / "detol-artifacts")


def test_another_store_in_the_study_file_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    storage = optuna.storages.InMemoryStorage()
    study = open_study(load_study_file(_study_file(tmp_path, "ckpt-a")), storage, url=URL)
    before = dict(study.user_attrs)
    moved = load_study_file(_study_file(tmp_path, "ckpt-b"))
    with pytest.raises(StudyError) as info:
        open_study(moved, storage, url=URL)
    message = str(info.value)
    assert message.startswith("checkpoints.store: ") and "\n" not in message
    assert str(tmp_path / "ckpt-a") in message and str(tmp_path / "ckpt-b") in message
    assert optuna.load_study(study_name="promo", storage=storage).user_attrs == before
    # The recorded store itself, or none at all, is fine.
    open_study(load_study_file(_study_file(tmp_path, str(tmp_path / "ckpt-a"))), storage, url=URL)
    open_study(load_study_file(_study_file(tmp_path)), storage, url=URL)
