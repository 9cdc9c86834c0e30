"""Bad input to `search`: exit code 2, one line on stderr starting "error:" that names the field or
thing, and no study written to the storage. None of these start an MPI job or a Dask cluster.

Most cases call the Typer app in-process (fast); a few run the installed console script for real.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

from tests.cli_helpers import run_cli, search_command
from training.contract import open_storage

# Environment variables that would make rich colour its output even into a pipe.
_COLOUR_VARS = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")

WriteStudy = Callable[..., Path]

# Each case takes well under a few seconds; if validation breaks, a case would run a real study.
pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Run in tmp_path, so a storage falling back to the default lands there and is caught."""
    monkeypatch.chdir(tmp_path)
    for var in _COLOUR_VARS:
        monkeypatch.delenv(var, raising=False)
    yield
    assert not (tmp_path / "detol.journal").exists(), "the default storage was created"






def _cli_subprocess(*args: str, cwd: Path) -> tuple[int, str, str]:
    """The installed `search` console script in a real process: (exit code, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if k not in _COLOUR_VARS}
    proc = subprocess.run([*search_command(), *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def _run(study: Path | str, storage: str, *extra: str) -> tuple[int, str, str]:
    return run_cli("run", str(study), "--storage", storage, "--no-progress", *extra)


def _error_line(code: int, stdout: str, stderr: str) -> str:
    """Checks exit code 2 and exactly one stderr line starting 'error:'; returns that line."""
    assert code == 2, f"exit code {code}\nstdout: {stdout}\nstderr: {stderr}"
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one stderr line, got:\n{stderr}"
    assert lines[0].startswith("error:"), lines[0]
    assert "Traceback" not in stdout + stderr
    return lines[0]


def _error_lines(code: int, stdout: str, stderr: str) -> list[str]:
    """Checks exit code 2 and that every stderr line starts 'error:'; returns the lines."""
    assert code == 2, f"exit code {code}\nstdout: {stdout}\nstderr: {stderr}"
    lines = stderr.strip().splitlines()
    assert lines and all(line.startswith("error:") for line in lines), stderr
    assert "Traceback" not in stdout + stderr
    return lines


def _assert_no_study(storage: str) -> None:
    """The journal file was never written, or holds no study."""
    path = Path(storage)
    if path.exists():
        assert optuna.get_all_study_names(open_storage(storage)) == []


@pytest.fixture
def journal(tmp_path: Path) -> str:
    return str(tmp_path / "s.journal")


@pytest.mark.unit
def test_minimal_study_text_is_valid(write_study: WriteStudy) -> None:
    """Guards the cases below: each is this valid study plus exactly one mistake."""
    from search.studyfile._study_file import load_study_file

    sf = load_study_file(write_study())
    assert (sf.name, sf.training.dataset, sf.training.ranks) == ("t", "digits", 1)


# --- 1. missing study file ------------------------------------------------------------------


def test_missing_study_file_real_process(tmp_path: Path, journal: str) -> None:
    missing = tmp_path / "nowhere.toml"
    line = _error_line(*_cli_subprocess("run", str(missing), "--storage", journal,
                                        "--no-progress", cwd=tmp_path))
    assert str(missing) in line
    assert "not found" in line
    _assert_no_study(journal)


@pytest.mark.unit
def test_missing_study_file(tmp_path: Path, journal: str) -> None:
    line = _error_line(*_run(tmp_path / "nowhere.toml", journal))
    assert "nowhere.toml" in line and "not found" in line
    assert not Path(journal).exists()


# --- 2. malformed TOML ----------------------------------------------------------------------


@pytest.mark.unit
def test_malformed_toml(write_study: WriteStudy, journal: str) -> None:
    path = write_study('name = "t"\n[training\ndataset = "digits"\n', name="broken.toml")
    line = _error_line(*_run(path, journal))
    assert "broken.toml" in line
    assert "TOML" in line and "line 2" in line
    assert not Path(journal).exists()


# --- 3. unknown keys ------------------------------------------------------------------------


def test_unknown_top_level_key_real_process(
    write_study: WriteStudy, journal: str, tmp_path: Path
) -> None:
    path = write_study(top="trails = 5")
    line = _error_line(*_cli_subprocess("run", str(path), "--storage", journal, "--no-progress",
                                        cwd=tmp_path))
    assert "study.toml: trails: unknown key" in line
    _assert_no_study(journal)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("kwargs", "where"),
    [
        ({"top": "trails = 5"}, "trails"),
        ({"training": {"epocs": "3"}}, "training.epocs"),
        ({"tail": "[budget]\ntrails = 5"}, "budget.trails"),
    ],
    ids=["top-level", "training", "budget"],
)
def test_unknown_key(write_study: WriteStudy, journal: str, kwargs: dict, where: str) -> None:
    line = _error_line(*_run(write_study(**kwargs), journal))
    assert f"study.toml: {where}: unknown key" in line
    _assert_no_study(journal)


# --- 4. bad ranges --------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("dimension", "expected"),
    [
        ('lr = { type = "float", low = 0.5, high = 0.1 }', "low (0.5) must be <= high (0.1)"),
        ('hidden = { type = "int", low = 64, high = 16 }', "low (64) must be <= high (16)"),
        ('lr = { type = "float", low = 0.0, high = 0.1, log = true }', "log scale needs low > 0"),
        ('lr = { type = "float", low = -1.0, high = 0.1, log = true }', "log scale needs low > 0"),
    ],
    ids=["float-low>high", "int-low>high", "log-low=0", "log-low<0"],
)
def test_bad_range(write_study: WriteStudy, journal: str, dimension: str, expected: str) -> None:
    line = _error_line(*_run(write_study(tail=f"[space]\n{dimension}"), journal))
    name = dimension.split()[0]
    assert f"space.{name}" in line
    assert expected in line
    _assert_no_study(journal)


# --- 5. unknown dataset / strategy / pruner -------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("kwargs", "where", "known"),
    [
        ({"training": {"dataset": '"cifar-1000"'}}, "training.dataset", "digits"),
        ({"top": 'strategy = "annealing"'}, "strategy.name", "tpe"),
        ({"tail": '[strategy]\nname = "annealing"'}, "strategy.name", "tpe"),
        ({"top": 'pruner = "hyperband9"'}, "pruner.name", "median"),
        ({"tail": '[pruner]\nname = "hyperband9"'}, "pruner.name", "median"),
    ],
    ids=["dataset", "strategy-shorthand", "strategy-table", "pruner-shorthand", "pruner-table"],
)
def test_unknown_name(
    write_study: WriteStudy, journal: str, kwargs: dict, where: str, known: str
) -> None:
    line = _error_line(*_run(write_study(**kwargs), journal))
    assert f"study.toml: {where}:" in line
    assert "unknown" in line
    assert known in line  # lists what would have been accepted
    _assert_no_study(journal)


# --- 6. unreachable storage -----------------------------------------------------------------


@pytest.mark.unit
def test_sqlite_in_missing_directory(write_study: WriteStudy, tmp_path: Path) -> None:
    assert not Path("/nonexistent-dir").exists()
    line = _error_line(*_run(write_study(), "sqlite:////nonexistent-dir/x.db"))
    assert line.startswith("error: storage:")
    assert "sqlite:////nonexistent-dir/x.db" in line
    assert not Path("/nonexistent-dir").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.toml"]


@pytest.mark.unit
def test_journal_in_missing_directory(write_study: WriteStudy, tmp_path: Path) -> None:
    storage = str(tmp_path / "no" / "such" / "dir" / "s.journal")
    line = _error_line(*_run(write_study(), storage))
    assert line.startswith("error: storage:")
    assert "does not exist" in line
    assert not (tmp_path / "no").exists()


@pytest.mark.unit
def test_unreachable_postgres_hides_the_password(write_study: WriteStudy, tmp_path: Path) -> None:
    code, stdout, stderr = _run(write_study(), "postgresql://u:secret@127.0.0.1:1/db")
    line = _error_line(code, stdout, stderr)
    assert line.startswith("error: storage:")
    assert "127.0.0.1:1" in line
    assert "secret" not in stdout + stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.toml"]


# --- 7. scheduler that does not answer ------------------------------------------------------


@pytest.mark.unit
def test_scheduler_that_does_not_answer(write_study: WriteStudy, journal: str) -> None:
    path = write_study(tail="[cluster]\nconnect_timeout = 2")
    started = time.monotonic()
    line = _error_line(*_run(path, journal, "--scheduler", "tcp://127.0.0.1:1"))
    elapsed = time.monotonic() - started
    assert line.startswith("error: cluster.address:")
    assert "tcp://127.0.0.1:1" in line
    assert elapsed < 8, f"took {elapsed:.1f} s: [cluster] connect_timeout = 2 was not used"
    _assert_no_study(journal)


@pytest.mark.unit
@pytest.mark.parametrize("storage", ["s.journal", "sqlite:///s.db"])
def test_refused_scheduler_fails_at_once_and_leaves_no_storage_file(
        write_study: WriteStudy, tmp_path: Path, storage: str) -> None:
    # Nothing listens on port 1: a refused connection, not one that needs the timeout to pass.
    started = time.monotonic()
    line = _error_line(*_run(write_study(), storage, "--scheduler", "tcp://127.0.0.1:1"))
    elapsed = time.monotonic() - started
    assert line == "error: cluster.address: no Dask scheduler at tcp://127.0.0.1:1: connection refused"
    assert elapsed < 3, f"took {elapsed:.1f} s for a refused connection"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.toml"]  # no s.journal / s.db


# --- 8. ranks = 0 ---------------------------------------------------------------------------


@pytest.mark.unit
def test_zero_ranks(write_study: WriteStudy, journal: str) -> None:
    line = _error_line(*_run(write_study(training={"ranks": "0"}), journal))
    assert "study.toml: training.ranks:" in line
    assert "1" in line.split("training.ranks:", 1)[1]  # says the least it accepts
    _assert_no_study(journal)


# --- 9. launcher not installed --------------------------------------------------------------


@pytest.mark.unit
def test_launcher_not_installed(write_study: WriteStudy, journal: str) -> None:
    path = write_study(tail='[launcher]\ncommand = "no-such-mpiexec -n {ranks}"')
    line = _error_line(*_run(path, journal))
    assert line.startswith("error: launcher.command:")
    assert "'no-such-mpiexec' not found" in line
    _assert_no_study(journal)


@pytest.mark.unit
def test_error_text_is_printed_verbatim(write_study: WriteStudy, journal: str) -> None:
    path = write_study(tail='[launcher]\ncommand = "no-such-mpiexec -n {ranks}"')
    line = _error_line(*_run(path, journal))
    assert "set [launcher] command" in line


# --- 10. space dimension for a name that cannot be searched ---------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("name", ["seed", "epochs", "no_such_param"])
def test_unsearchable_space_dimension(write_study: WriteStudy, journal: str, name: str) -> None:
    path = write_study(tail=f'[space]\n{name} = {{ type = "int", low = 1, high = 3 }}')
    line = _error_line(*_run(path, journal))
    assert f"study.toml: space.{name}: not a searchable" in line
    assert "(known: lr, batch_size, momentum" in line  # lists the searchable names, plainly
    _assert_no_study(journal)


# --- 11. multi-objective with a pruner ------------------------------------------------------


@pytest.mark.unit
def test_multi_objective_with_pruner(write_study: WriteStudy, journal: str) -> None:
    path = write_study(top='metric = ["val_accuracy", "n_params"]\npruner = "median"')
    line = _error_line(*_run(path, journal))
    assert "study.toml: pruner:" in line
    assert "multi-objective" in line and '"dominated"' in line and '"none"' in line
    _assert_no_study(journal)


# --- 12. several mistakes: all of them, one line each -----------------------------------------


def test_every_mistake_is_one_line_real_process(
    write_study: WriteStudy, journal: str, tmp_path: Path
) -> None:
    path = write_study(training={"activation": '"relux"'},
                       tail='[space]\nlr = { type = "float", low = 0.5, high = 0.1 }')
    lines = _error_lines(*_cli_subprocess("run", str(path), "--storage", journal,
                                          "--no-progress", cwd=tmp_path))
    assert lines == [
        f"error: {path}: training.activation: 'relux' is not one of: relu, tanh, gelu, silu",
        f"error: {path}: space.lr: low (0.5) must be <= high (0.1)",
    ]
    _assert_no_study(journal)


@pytest.mark.unit
def test_impossible_combination_and_misplaced_parameter_are_both_reported(
    write_study: WriteStudy, journal: str
) -> None:
    path = write_study(tail='[space]\nalgorithm = { type = "categorical", choices = ["sync", '
                            '"asgd"] }\nranks = { type = "int", low = 1, high = 4 }\n'
                            'send_every = { type = "int", low = 1, high = 8 }')
    lines = _error_lines(*_run(path, journal))
    assert len(lines) == 2
    assert lines[0].startswith("error: ") and "study.toml: space.algorithm: trials can sample " \
        "algorithm 'asgd' with ranks = 1" in lines[0]
    assert lines[0].endswith("when = { ranks = [2, 3, 4] }")
    assert "study.toml: space.send_every: only 'asgd' uses send_every" in lines[1]
    _assert_no_study(journal)


# --- status / best on a study that is not there ---------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("command", ["status", "best"])
def test_missing_study_names_it_and_lists_the_found(journal: str, command: str) -> None:
    optuna.create_study(study_name="other", storage=open_storage(journal))
    line = _error_line(*run_cli(command, "missing", "--storage", journal))
    assert "'missing'" in line
    assert line.endswith("(found: other)")  # plain words, not a Python list
    assert optuna.get_all_study_names(open_storage(journal)) == ["other"]


def test_status_missing_study_real_process(journal: str, tmp_path: Path) -> None:
    optuna.create_study(study_name="other", storage=open_storage(journal))
    line = _error_line(*_cli_subprocess("status", "missing", "--storage", journal, cwd=tmp_path))
    assert "'missing'" in line and "found: other" in line


@pytest.mark.unit
@pytest.mark.parametrize(
    ("tail", "where", "expected"),
    [
        ('[checkpoints]\nstore = "ftp://host/x"', "checkpoints.store", "expected a directory"),
        ('[checkpoints]\nstore = "s3://bucket/prefix"', "checkpoints.store", "take no prefix"),
        ("[checkpoints]\nevery = -1", "checkpoints.every", "greater than or equal to 0"),
        ('[pruner]\nname = "median"\npromote = true', "pruner.promote",
         "not an option of the 'median' pruner"),
    ],
    ids=["store-scheme", "store-prefix", "every-negative", "promote-median"],
)
def test_bad_checkpoints_or_promotion(write_study: WriteStudy, journal: str, tail: str,
                                      where: str, expected: str) -> None:
    line = _error_line(*_run(write_study(tail=tail), journal))
    assert f"{where}:" in line and expected in line, line
    _assert_no_study(journal)


@pytest.mark.unit
def test_promotion_needs_trials_that_train(tmp_path: Path, journal: str) -> None:
    study = tmp_path / "f.toml"
    study.write_text('name = "f"\nobjective = "math:sqrt"\nmetric = "y"\n'
                     'direction = "maximize"\n[pruner]\nname = "asha"\npromote = true\n'
                     '[space]\nx = { type = "float", low = 0, high = 1 }\n')
    line = _error_line(*_run(study, journal))
    assert "pruner.promote: needs trials that train" in line, line
    _assert_no_study(journal)
