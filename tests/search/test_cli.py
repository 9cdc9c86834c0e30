"""Command-line conventions, run as a user runs them (the installed `search` script in a real
process): --version, -h, fast help, DETOL_STORAGE, validate, delete, where files are written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.cli_helpers import run_search, write_quad_study
from training.contract import open_storage


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A directory with quad.py and study.toml, and a storage in data/ holding 2 trials."""
    home = tmp_path_factory.mktemp("cli")
    write_quad_study(home)
    (home / "data").mkdir()
    journal = str(home / "data" / "s.journal")
    code, out, err = run_search("run", "study.toml", "--storage", journal, "--no-progress",
                             cwd=home)
    assert code == 0, out + err
    return home, journal


def test_version_and_short_help(tmp_path: Path) -> None:
    from importlib.metadata import version

    assert run_search("--version", cwd=tmp_path)[:2] == (0, f"detol {version('detol')}\n")
    code, out, _ = run_search("run", "-h", cwd=tmp_path)
    assert code == 0 and "Usage: search run [OPTIONS] {STUDY_FILE}" in out  # typer braces required
    code, out, _ = run_search("best", "-h", cwd=tmp_path)
    assert code == 0 and "--number" in out  # every short option has its long form


def test_help_loads_neither_optuna_nor_dask() -> None:
    probe = ("import sys; import search.cli; "
             "print(sorted(m for m in ('optuna', 'dask', 'distributed', 'torch', 'pandas') "
             "if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"


def test_detol_storage_is_the_default_storage(made: tuple[Path, str], tmp_path: Path) -> None:
    _, journal = made
    code, out, err = run_search("status", "quad", cwd=tmp_path, env={"DETOL_STORAGE": journal})
    assert code == 0, err
    assert "complete" in out and journal in out
    assert not (tmp_path / "detol.journal").exists()


def test_validate_checks_everything_and_writes_nothing(made: tuple[Path, str],
                                                      tmp_path: Path) -> None:
    home, journal = made
    fresh = str(tmp_path / "new.journal")
    code, out, err = run_search("validate", str(home / "study.toml"), "--storage", fresh, cwd=home)
    assert code == 0, out + err
    assert out.strip() == (f"ok: quad: creates study 'quad' in {fresh}; calls of quad:objective "
                           "on Dask workers; cluster local")
    assert not Path(fresh).exists()
    code, out, err = run_search("validate", str(home / "study.toml"), "--storage", journal,
                             "--trials", "5", cwd=home)
    assert code == 0, out + err
    assert f"resumes study 'quad' in {journal} (2 of 5 trials finished)" in out
    # A launcher that is not there is found without running anything.
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "b"\n[training]\nranks = 1\n[launcher]\ncommand = "nompi -n {ranks}"\n')
    code, out, err = run_search("validate", str(bad), "--storage", fresh, cwd=tmp_path)
    assert code == 2 and err.startswith("error: launcher.command: launcher program 'nompi'")
    assert not Path(fresh).exists()


def test_report_and_export_go_beside_the_storage_not_into_the_working_directory(
        made: tuple[Path, str], tmp_path: Path) -> None:
    _, journal = made
    code, out, err = run_search("report", "quad", "--storage", journal, cwd=tmp_path)
    assert code == 0, out + err
    code, out, err = run_search("export", "quad", "--storage", journal, cwd=tmp_path)
    assert code == 0, out + err
    data = Path(journal).parent
    assert (data / "quad-report.html").is_file() and (data / "quad.csv").is_file()
    assert list(tmp_path.iterdir()) == []


def test_delete_asks_first_and_refuses_without_a_terminal(made: tuple[Path, str],
                                                          tmp_path: Path) -> None:
    home, _ = made
    journal = str(tmp_path / "d.journal")
    assert run_search("run", "study.toml", "--storage", journal, "--no-progress", cwd=home)[0] == 0
    code, out, err = run_search("delete", "quad", "--storage", journal, cwd=tmp_path, stdin="")
    assert code == 2
    assert err.strip() == ("error: yes: deleting study 'quad' needs a terminal to confirm, "
                           "or --yes")
    assert optuna.get_all_study_names(open_storage(journal)) == ["quad"]
    code, out, err = run_search("delete", "quad", "--storage", journal, "--yes", cwd=tmp_path)
    assert code == 0, err
    assert out.strip() == f"deleted study quad (2 trials) from {journal}"
    assert optuna.get_all_study_names(open_storage(journal)) == []
