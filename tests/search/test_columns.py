"""Only the columns that are true of a study's objective (issue 13, item 6).

A NAS-Bench-201 table study and a function study, each made by the real `search run` (Dask
LocalCluster, journal storage): neither has ranks, an algorithm or rank-seconds; the table's
cost is its simulated training time, not the microseconds a lookup takes; times are printed to
a sensible precision; a table study's report does not ask for per-epoch values it cannot have.
"""

from __future__ import annotations

import html
import re
import subprocess
import textwrap
from pathlib import Path

import optuna
import pandas as pd
import pytest

from search.analysis._figures import compare_figure
from tests.cli_helpers import run_cli, search_command
from training.contract import open_storage

pytestmark = pytest.mark.timeout(240)

MODULE = """
def objective(params, report):
    for step in range(3):
        report(step, (params["x"] - 0.3) ** 2 + 1.0 / (step + 1))
    return (params["x"] - 0.3) ** 2 + 0.1 * params["y"]
"""
NB201_STUDY = """
objective = "nb201:cifar10"
[budget]
trials = 12
concurrency = 3
[strategy]
name = "{strategy}"
seed = {seed}
[pruner]
name = "none"
[space.genome]
family = "cell"
"""
FUNCTION_STUDY = """
name = "fn"
objective = "mine:objective"
metric = "loss"
direction = "minimize"
[budget]
trials = 8
[strategy]
name = "random"
seed = 1
[pruner]
name = "none"
[space]
x = { type = "float", low = 0, high = 1 }
y = { type = "float", low = 0, high = 1 }
"""
TABLE, TABLE2, FUNCTION = "nb-random", "nb-tpe", "fn"
MPI_ONLY = {"ranks", "algorithm", "rank_seconds", "epochs", "samples_per_s", "test_accuracy"}
SECONDS = re.compile(r"^(<0\.01|\d\.\d\d|\d\d\.\d|\d{1,3}(,\d{3})*)$")  # format_seconds


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Two NB201 studies and a function study in one journal, each made by `search run`."""
    where = tmp_path_factory.mktemp("objectives")
    (where / "mine.py").write_text(textwrap.dedent(MODULE))
    studies = {
        TABLE: f'name = "{TABLE}"' + NB201_STUDY.format(strategy="random", seed=0),
        TABLE2: f'name = "{TABLE2}"' + NB201_STUDY.format(strategy="tpe", seed=1),
        FUNCTION: FUNCTION_STUDY,
    }
    for name, text in studies.items():
        (where / f"{name}.toml").write_text(textwrap.dedent(text))
        done = subprocess.run([*search_command(), "run", f"{name}.toml", "--storage", "s.journal",
                               "--no-progress"], cwd=where, capture_output=True, text=True,
                              timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
    return str(where / "s.journal")


def _study(storage: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=open_storage(storage))


def test_export_has_only_the_objectives_columns(storage: str, tmp_path: Path) -> None:
    for name in (TABLE, FUNCTION):
        code, out, err = run_cli("export", name, "--storage", storage, "-o",
                                 str(tmp_path / f"{name}.csv"))
        assert code == 0, out + err
    table = pd.read_csv(tmp_path / f"{TABLE}.csv")
    study = _study(storage, TABLE)
    assert not MPI_ONLY & set(table.columns), sorted(table.columns)
    assert "wall_time_s" not in table.columns  # the lookup's microseconds are no cost
    assert table["sim_time_s"].tolist() == pytest.approx(
        [t.user_attrs["sim_time_s"] for t in study.trials])
    assert table["sim_time_s"].min() > 100  # NB201's 200-epoch training times, in seconds
    assert {"genome_summary", "n_params", "nb201_mean_val_accuracy", "sim_clock_s"} <= set(
        table.columns)

    function = pd.read_csv(tmp_path / f"{FUNCTION}.csv")
    assert not MPI_ONLY & set(function.columns), sorted(function.columns)
    assert not {"sim_time_s", "genome_summary", "genome_key"} & set(function.columns)
    assert function["steps"].tolist() == [3] * 8
    assert function["wall_time_s"].tolist() == pytest.approx(
        [t.user_attrs["wall_time_s"] for t in _study(storage, FUNCTION).trials])


def _best_table(page: str) -> list[list[str]]:
    table = re.search(r"<h2>Best trials</h2>.*?<table class=\"best\">(.*?)</table>", page, re.S)
    assert table is not None
    return [[html.unescape(c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", table.group(1))]


def test_report_of_a_table_study(storage: str, tmp_path: Path) -> None:
    page = tmp_path / "nb.html"
    code, out, err = run_cli("report", TABLE, "--storage", storage, "-o", str(page),
                             "--no-compare")
    assert code == 0, out + err
    assert "per-epoch" not in out and "Learning curves" not in out  # nothing it cannot have
    text = page.read_text()
    assert 'data-panel="curves"' not in text
    rows = _best_table(text)
    assert rows[0] == ["number", "val_accuracy", "genome_summary", "n_params", "sim_time_s"]
    study = _study(storage, TABLE)
    best = study.best_trial
    assert rows[1][0] == str(best.number)
    assert rows[1][4] == f"{best.user_attrs['sim_time_s']:,.0f}"  # e.g. 2,233, not 2233.4417
    assert "of simulated training (table lookups, not trained)" in text
    assert "epochs trained" not in text


def test_report_of_a_function_study(storage: str, tmp_path: Path) -> None:
    page = tmp_path / "fn.html"
    code, out, err = run_cli("report", FUNCTION, "--storage", storage, "-o", str(page),
                             "--no-compare")
    assert code == 0, out + err
    rows = _best_table(page.read_text())
    assert rows[0] == ["number", "loss", "x", "y", "steps", "wall_time_s"]
    for row in rows[1:]:
        assert row[4] == "3"
        assert SECONDS.match(row[5]), row  # "0.01" or "<0.01", never "0.0001807"
    assert "in the objective function" in page.read_text()


def test_best_and_status_tables(storage: str) -> None:
    code, out, err = run_cli("best", TABLE, "--storage", storage, "-n", "3")
    assert code == 0, err
    header = next(line for line in out.splitlines() if line.strip().startswith("trial"))
    assert "sim time s" in header
    assert "time s" not in header.replace("sim time s", "")  # no lookup wall time
    best = _study(storage, TABLE).best_trial
    assert f"{best.user_attrs['sim_time_s']:,.0f}" in out

    code, out, err = run_cli("best", FUNCTION, "--storage", storage, "-n", "8")
    assert code == 0, err
    times = [line.split()[-1] for line in out.splitlines() if re.match(r"^\s*\d+\s", line)]
    assert len(times) == 8 and all(SECONDS.match(t) for t in times), times

    code, out, err = run_cli("status", TABLE, "--storage", storage)
    assert code == 0, err
    assert "epochs trained" not in out
    assert re.search(r"simulated training\s+│\s+[\d,]+ s \([\d.]+ h\) \(table lookups\)", out), out


def test_table_studies_compare_by_simulated_training_time(storage: str) -> None:
    studies = [_study(storage, TABLE), _study(storage, TABLE2)]
    fig = compare_figure(studies)
    assert fig.layout.xaxis2.title.text == "simulated training seconds"
    by_compute = {tr.hovertemplate.split(" (")[0]: tr for tr in fig.data if tr.xaxis == "x2"}
    for study in studies:
        spent = sum(t.user_attrs["sim_time_s"] for t in study.trials)
        assert max(by_compute[study.study_name].x) == pytest.approx(spent)


def test_studies_of_one_strategy_each_get_their_own_legend_entry(storage: str) -> None:
    # A second random study (a copy under another name): two lines of one colour, two entries.
    memory = optuna.storages.InMemoryStorage()
    optuna.copy_study(from_study_name=TABLE, from_storage=open_storage(storage),
                      to_storage=memory, to_study_name="nb-random-2")
    again = optuna.load_study(study_name="nb-random-2", storage=memory)
    fig = compare_figure([_study(storage, TABLE), again, _study(storage, TABLE2)])
    entries = [tr.name for tr in fig.data if tr.showlegend]
    assert entries == ["random: nb-random", "random: nb-random-2", "tpe"]
    random_lines = [tr.line for tr in fig.data if tr.showlegend and tr.name.startswith("random")]
    assert random_lines[0].color == random_lines[1].color
    assert random_lines[0].dash != random_lines[1].dash


@pytest.mark.unit
def test_an_own_loop_study_is_labelled_by_its_loop_not_the_unused_dataset() -> None:
    from search.analysis._figures import comparable

    def made(name: str, config: dict) -> optuna.Study:
        study = optuna.create_study(study_name=name)
        study.set_user_attr("detol:study", {"metric": "val_accuracy", **config})
        return study

    own = made("own", {"objective": "mpi:mine.loop:train", "training": {"dataset": "digits"}})
    builtin = made("builtin", {"training": {"dataset": "digits"}})
    _, skipped = comparable(builtin, [own])
    assert skipped == ["own (dataset mpi:mine.loop:train)"]
