"""A promoted trial shows its whole lineage's epochs and time (issue 28, item 4): in `search
best` and the end of `search run` (best_table), the report and the export; `search status`
counts a failed continuation as nothing promoted."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState
from rich.console import Console

from search.analysis._figures import trials_frame
from search.analysis._report import _best_table
from search.analysis._tables import best_table, status_table
from search.pruners._promotion import LINEAGE_ATTR, PAUSED_ATTR, RESUME_OF_ATTR

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def _study() -> optuna.Study:
    """An unpruned trial (4 epochs) and a lineage paused at epoch 2, continued to epoch 4."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", study_name="lin")
    whole = study.ask()
    for key, value in {"epochs_run": 4, "wall_time_s": 0.4, "rank_seconds": 0.4,
                       "detol:lineage_epochs": 4, "detol:lineage_rank_seconds": 0.4,
                       "detol:lineage_wall_time_s": 0.4}.items():
        whole.set_user_attr(key, value)
    study.tell(whole, 0.90)
    parent = study.ask()
    for key, value in {"epochs_run": 2, "wall_time_s": 0.23, "rank_seconds": 0.23,
                       PAUSED_ATTR: 2, "detol:lineage_epochs": 2,
                       "detol:lineage_rank_seconds": 0.23,
                       "detol:lineage_wall_time_s": 0.23}.items():
        parent.set_user_attr(key, value)
    study.tell(parent, state=TrialState.PRUNED)
    failed = study.ask()  # a continuation that could not restore
    failed.set_user_attr(RESUME_OF_ATTR, parent.number)
    failed.set_user_attr(LINEAGE_ATTR, parent.number)
    study.tell(failed, state=TrialState.FAIL)
    cont = study.ask()
    for key, value in {"epochs_run": 2, "wall_time_s": 0.21, "rank_seconds": 0.21,
                       RESUME_OF_ATTR: parent.number, LINEAGE_ATTR: parent.number,
                       "detol:lineage_epochs": 4, "detol:lineage_rank_seconds": 0.44,
                       "detol:lineage_wall_time_s": 0.44}.items():
        cont.set_user_attr(key, value)
    study.tell(cont, 0.95)
    return study


def _text(table: object) -> str:
    console = Console(width=120, record=True)
    console.print(table)
    return console.export_text()


def test_best_shows_the_whole_lineage_of_a_promoted_trial() -> None:
    text = _text(best_table(_study()))
    row = next(line for line in text.splitlines() if line.strip().startswith("3 "))
    cells = row.split()
    assert cells[:2] == ["3", "0.95"]
    assert "4" in cells[2:] and "2" not in cells[2:]  # lineage epochs, not the segment's 2
    assert "440ms" in row.replace(" ", "") or "0.44" in row, row


def test_status_does_not_count_a_failed_continuation_as_promoted() -> None:
    text = _text(status_table(_study(), "memory"))
    line = next(line for line in text.splitlines() if "paused" in line)
    assert "promoted: 1 continuations" in line, line


def test_report_and_export_carry_lineage_totals() -> None:
    study = _study()
    df = trials_frame(study).set_index("number")
    assert df.loc[3, "epochs"] == 2 and df.loc[3, "lineage_epochs"] == 4
    assert df.loc[3, "lineage_wall_time_s"] == 0.44
    assert df.loc[3, "lineage_rank_seconds"] == 0.44
    html = _best_table(study)
    row = html.split("<tr>")[2]  # the best trial: 3
    assert row.startswith("<td>3</td>") and "<td>4</td>" in row and "<td>2</td>" not in row
