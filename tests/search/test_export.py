"""`search export`: a study's trials as CSV or Parquet, read back with pandas."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import optuna
import pandas as pd
import pytest

from tests.cli_helpers import run_cli, search_command
from tests.search.test_report import MULTI, NB201, shared_storage
from training.contract import open_storage

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> str:
    return shared_storage(tmp_path_factory)




def _check_table(df: pd.DataFrame, study: optuna.Study) -> None:
    """One row per trial, in order, with what the driver stored."""
    trials = study.trials
    assert list(df["number"]) == [t.number for t in trials]
    assert list(df["state"]) == [t.state.name for t in trials]
    for row, t in zip(df.to_dict("records"), trials, strict=True):
        assert row["study"] == study.study_name
        assert row["params_lr"] == pytest.approx(t.params["lr"])
        assert row["params_algorithm"] == t.params["algorithm"]
        assert row["genome_summary"] == t.user_attrs["genome_summary"]
        assert row["epochs"] == t.user_attrs["epochs_run"]
        assert row["ranks"] == t.user_attrs["ranks"]
        assert row["rank_seconds"] == pytest.approx(t.user_attrs["wall_time_s"] * row["ranks"])
        assert row["test_accuracy"] == pytest.approx(t.user_attrs["test_accuracy"])
        if t.state.name == "PRUNED":  # Optuna keeps the last reported value as its value
            assert row["val_accuracy"] == pytest.approx(t.intermediate_values[row["epochs"]])
        else:
            assert row["val_accuracy"] == pytest.approx(t.values[0])


@pytest.mark.unit
def test_csv(storage: str, tmp_path: Path) -> None:
    path = tmp_path / "trials.csv"
    code, out, err = run_cli("export", NB201[0], "--storage", storage, "--format", "csv",
                          "-o", str(path))
    assert code == 0, out + err
    study = optuna.load_study(study_name=NB201[0], storage=open_storage(storage))
    assert out == f"wrote {len(study.trials)} trials to {path} (csv)\n"
    df = pd.read_csv(path)
    _check_table(df, study)
    assert {"PRUNED", "COMPLETE"} <= set(df["state"])  # pruned trials are rows too
    assert any(c.startswith("params_genome.") for c in df.columns)


def test_parquet_with_the_console_script(storage: str, tmp_path: Path) -> None:
    """The real `search` process; the format is taken from the suffix."""
    path = tmp_path / "multi.parquet"
    proc = subprocess.run([*search_command(), "export", MULTI, "--storage", storage, "-o",
                           str(path)], capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.endswith("(parquet)\n")
    df = pd.read_parquet(path)
    study = optuna.load_study(study_name=MULTI, storage=open_storage(storage))
    _check_table(df, study)
    assert df["n_params"].tolist() == [t.values[1] for t in study.trials]
    assert str(df["datetime_complete"].dtype).startswith("datetime64")


@pytest.mark.unit
def test_default_name_and_standard_output(storage: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("export", NB201[1], "--storage", storage, "--format", "parquet")
    assert code == 0, out + err
    written = Path(storage).parent / f"{NB201[1]}.parquet"  # beside the storage file
    assert len(pd.read_parquet(written)) == 10
    assert list(tmp_path.iterdir()) == []  # nothing in the working directory
    written.unlink()
    code, out, err = run_cli("export", NB201[1], "--storage", storage, "-o", "-")
    assert code == 0, err
    assert len(pd.read_csv(io.StringIO(out))) == 10
    # No suffix: CSV; an explicit --format names the content of a file with another suffix.
    code, out, err = run_cli("export", NB201[1], "--storage", storage, "-o", "trials")
    assert code == 0 and out.endswith("(csv)\n"), out + err
    assert len(pd.read_csv(tmp_path / "trials")) == 10
    code, out, err = run_cli("export", NB201[1], "--storage", storage, "-o", "t.txt", "-f", "csv")
    assert code == 0, out + err
    assert len(pd.read_csv(tmp_path / "t.txt")) == 10


@pytest.mark.unit
@pytest.mark.parametrize(("args", "message"), [
    (["--format", "xlsx"], "error: format: unknown format 'xlsx' (known: ['csv', 'parquet'])"),
    (["--format", "parquet", "-o", "-"], "error: output: parquet cannot be written to standard "
                                         "output; use -o FILE"),
    (["-o", "{tmp}/missing/t.csv"], "error: output: cannot write {tmp}/missing/t.csv: directory "
                                    "'{tmp}/missing' does not exist"),
    (["-o", "{tmp}"], "error: output: cannot write {tmp}: it is a directory"),
    # A file's name must not lie about what it holds (this wrote CSV as x.xlsx).
    (["-o", "{tmp}/x.xlsx"], "error: output: unknown suffix '.xlsx' in {tmp}/x.xlsx (known "
                             "formats: csv (.csv), parquet (.parquet .pq)); name the file .csv or "
                             ".parquet, or pass --format"),
    (["--format", "parquet", "-o", "{tmp}/t.csv"], "error: output: {tmp}/t.csv is named csv but "
                                                   "--format is parquet"),
])
def test_bad_input_is_one_line_and_exit_2(storage: str, tmp_path: Path, args: list[str],
                                          message: str) -> None:
    argv = [a.format(tmp=tmp_path) for a in args]
    code, out, err = run_cli("export", NB201[0], "--storage", storage, *argv)
    assert code == 2
    assert err == message.format(tmp=tmp_path) + "\n"
    assert not list(tmp_path.iterdir())


@pytest.mark.unit
@pytest.mark.parametrize(("study", "storage_arg", "message"), [
    ("nope", None, "error: study: no study 'nope' in {storage} (found: nb-"),
    ("x", "{tmp}/none.journal", "error: storage: no journal file '{tmp}/none.journal'"),
    ("x", "bogus://x", "error: storage: unsupported storage URL scheme 'bogus'"),
])
def test_unknown_study_or_storage(storage: str, tmp_path: Path, study: str,
                                  storage_arg: str | None, message: str) -> None:
    url = (storage_arg or storage).format(tmp=tmp_path)
    code, out, err = run_cli("export", study, "--storage", url, "-o", str(tmp_path / "t.csv"))
    assert code == 2
    assert err.startswith(message.format(storage=storage, tmp=tmp_path))
    assert len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())
