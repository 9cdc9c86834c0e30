"""Storage URLs: journal files by default, databases by scheme, passwords never shown."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from training.contract import journal_path, open_storage, redact

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def test_journal_paths_and_database_urls_are_told_apart() -> None:
    assert journal_path("detol.journal") == "detol.journal"
    assert journal_path("journal:///tmp/x.journal") == "/tmp/x.journal"
    assert journal_path("sqlite:///x.db") is None
    assert journal_path("postgresql+psycopg2://u:p@h/db") is None


def test_redact_hides_only_the_password() -> None:
    assert redact("postgresql://alice:s3cret@db:5432/x") == "postgresql://alice:***@db:5432/x"
    assert redact("sqlite:///x.db") == "sqlite:///x.db"


def test_journal_storage_is_shared_by_two_handles(tmp_path: Path) -> None:
    path = str(tmp_path / "s.journal")
    study = optuna.create_study(study_name="s", storage=open_storage(path))
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    again = optuna.load_study(study_name="s", storage=open_storage(f"journal://{path}"))
    assert len(again.trials) == 3


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("/no/such/dir/x.journal", "does not exist"),
        ("postgres://u:p@h/db", "use 'postgresql://'"),
        ("redis://localhost", "unsupported storage URL scheme 'redis'"),
        ("sqlite:////no/such/dir/x.db", "cannot use sqlite:////no/such/dir/x.db: directory '/no/such/dir'"),
    ],
)
def test_unusable_storage_is_one_clear_line(url: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        open_storage(url)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_the_command_line_and_the_library_agree_on_the_default_storage() -> None:
    from search.storage._reading import DEFAULT_STORAGE as cli_default
    from training.contract import DEFAULT_STORAGE

    assert cli_default == DEFAULT_STORAGE
