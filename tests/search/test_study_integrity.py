"""A study name that exists goes on only with a study file that keeps its trials comparable:
a changed dataset, epochs, metric or space is refused up front; a larger budget or another
strategy continues the study and says what changed."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from search import StudyError, load_study_file, open_study
from tests.cli_helpers import run_search, write_quad_study
from training.contract import open_storage


def _search(*args: str, cwd: Path) -> tuple[int, str, str]:
    return run_search(*args, "--no-progress", cwd=cwd, timeout=120)


def test_a_changed_dataset_and_epochs_are_refused_before_anything_runs(tmp_path: Path) -> None:
    journal = str(tmp_path / "s.journal")
    first = tmp_path / "first.toml"
    first.write_text('name = "q"\n[training]\ndataset = "digits"\nepochs = 6\nranks = 1\n')
    study = open_study(load_study_file(first), open_storage(journal))  # made with digits, 6 epochs
    changed = tmp_path / "changed.toml"
    changed.write_text('name = "q"\n[training]\ndataset = "mnist1d"\nepochs = 1\nranks = 1\n')

    code, out, err = _search("run", str(changed), "--storage", journal, cwd=tmp_path)

    assert code == 2, out + err
    assert err.strip() == (
        f"error: name: study 'q' in {journal} holds 0 trials made with another study file "
        '(training.dataset: "digits" -> "mnist1d"; training.epochs: 6 -> 1): new trials would '
        "not be comparable with them. Give the study a new name, or delete the old one first "
        "(search delete q)")
    assert study.get_trials() == []  # nothing ran, nothing was written


def test_a_changed_space_is_refused(tmp_path: Path) -> None:
    journal = str(tmp_path / "s.journal")
    assert _search("run", str(write_quad_study(tmp_path, trials=2)), "--storage", journal,
                   cwd=tmp_path)[0] == 0
    code, out, err = _search("run", str(write_quad_study(tmp_path, trials=4, high=2.0)),
                             "--storage", journal, cwd=tmp_path)
    assert code == 2, out + err
    assert "holds 2 trials made with another study file (space.x.high: 1.0 -> 2.0)" in err
    assert len(optuna.load_study(study_name="quad", storage=open_storage(journal)).trials) == 2


def test_a_larger_budget_and_another_strategy_continue_the_study_and_say_so(
        tmp_path: Path) -> None:
    journal = str(tmp_path / "s.journal")
    assert _search("run", str(write_quad_study(tmp_path, trials=2)), "--storage", journal,
                   cwd=tmp_path)[0] == 0
    code, out, err = _search("run", str(write_quad_study(tmp_path, trials=4, strategy="tpe")),
                             "--storage", journal, cwd=tmp_path)
    assert code == 0, out + err
    assert 'note: strategy.name changed from "random" to "tpe"' in out
    assert "2 of 4 trials finished, 2 to run" in out
    study = optuna.load_study(study_name="quad", storage=open_storage(journal))
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 4
    assert study.user_attrs["detol:study"]["strategy"]["name"] == "tpe"  # what runs from now
    [change] = study.user_attrs["detol:study_changes"]
    assert change["before_trial"] == 2 and change["changes"] == [
        'strategy.name changed from "random" to "tpe"']


@pytest.mark.unit
def test_fields_that_cannot_change_a_trial_do_not_block_a_resume(tmp_path: Path) -> None:
    """A study made by an older detol: its stored form lacks fields added since (at their
    default they change nothing) and holds an older default of a field its algorithm never
    reads. An ASGD study whose send_every default moved is still refused: its trials differ."""
    from search.driver._study import STUDY_ATTR, check_same_study

    journal = str(tmp_path / "s.journal")
    path = tmp_path / "study.toml"
    for algorithm, refused in (("sync", False), ("asgd", True)):
        path.write_text(f'name = "{algorithm}"\n[training]\nalgorithm = "{algorithm}"\n')
        sf = load_study_file(path)
        study = open_study(sf, open_storage(journal))
        old = dict(study.user_attrs[STUDY_ATTR])
        old["training"] = {k: v for k, v in old["training"].items() if k != "slowdown"}
        old["training"]["send_every"] = 1  # the default before it was measured
        study.set_user_attr(STUDY_ATTR, old)
        if refused:
            with pytest.raises(StudyError, match=r"training\.send_every: 1 -> 4") as info:
                check_same_study(study, sf, journal)
            assert "slowdown" not in str(info.value)
        else:
            assert check_same_study(study, sf, journal) == []
