"""A job whose trial was finished by someone else (the driver failed and re-queued it while the
job's node was frozen or cut off) has its late reports refused by the storage, and stops with a
line that says why, for journal files and SQL databases alike."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from training.session import CONTINUE, VECTOR_ATTR, OptunaReporter, StaleTrial
from training.storage import open_storage

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
@pytest.mark.parametrize("objectives", [["val_accuracy"], ["val_accuracy", "flops"]])
def test_reports_into_a_trial_failed_elsewhere_are_refused(tmp_path: Path, kind: str,
                                                           objectives: list[str]) -> None:
    url = str(tmp_path / "s.journal") if kind == "journal" else f"sqlite:///{tmp_path}/s.db"
    study = optuna.create_study(study_name="s", storage=open_storage(url),
                                directions=["maximize"] * len(objectives))
    trial = study.ask()
    reporter = OptunaReporter(study_name="s", storage_url=url, trial_id=trial._trial_id,
                              pruner=None, objectives=objectives)
    row = {"val_accuracy": 0.5, "flops": 10.0}
    assert reporter.decide(1, row) is CONTINUE  # running: the report lands
    # The driver (another process) gives up on the job and fails the trial.
    study.tell(trial, state=TrialState.FAIL)
    with pytest.raises(StaleTrial) as caught:
        reporter.decide(2, row)
    assert str(caught.value).startswith(
        f"trial {trial.number} is already FAIL in the storage (the driver gave up on this job")
    assert "the report of epoch 2 is refused and this job stops" in str(caught.value)
    stored = optuna.load_study(study_name="s", storage=open_storage(url)).trials[0]
    assert stored.state == TrialState.FAIL
    # Epoch 1's report stays, epoch 2's never landed.
    if len(objectives) == 1:
        assert stored.intermediate_values == {1: 0.5}
    else:
        assert [k for k in stored.user_attrs if k.startswith(VECTOR_ATTR)] == [f"{VECTOR_ATTR}1"]
