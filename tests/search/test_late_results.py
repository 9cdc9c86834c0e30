"""Split brain at the driver: a trial that something else finished while this driver waited on
it (another driver's orphan recovery took this one for dead while it was frozen or cut off, and
failed and re-queued the trial) gets no result told from here. The late result is refused with a
line that says why, the trial keeps the state and reason the other party gave it, and the study
goes on to its budget."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import optuna
from optuna.trial import TrialState

from tests.cli_helpers import search_command
from training.contract import open_storage

# The objective plays the other driver once: it fails its own (running) trial in the storage,
# then returns a value as if nothing had happened. The marker file makes that happen once.
MODULE = """
import os
import optuna
from optuna.trial import TrialState
from training.contract import open_storage

def objective(params):
    try:
        os.close(os.open("taken-over", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return {"loss": params["x"] ** 2}
    storage = open_storage("s.journal")
    study = optuna.load_study(study_name="late", storage=storage)
    [mine] = [t for t in study.get_trials(states=(TrialState.RUNNING,)) if t.params == params]
    storage.set_trial_user_attr(mine._trial_id, "exit_reason", "driver vm:1 sent no heartbeat")
    storage.set_trial_state_values(mine._trial_id, TrialState.FAIL)
    return {"loss": -1000.0}
"""


def test_a_result_for_a_trial_failed_elsewhere_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(MODULE)
    (tmp_path / "study.toml").write_text(textwrap.dedent("""\
        name = "late"
        objective = "mine:objective"
        metric = "loss"
        direction = "minimize"
        [budget]
        trials = 3
        concurrency = 1
        [strategy]
        name = "random"
        seed = 1
        [space]
        x = { type = "float", low = -1.0, high = 1.0 }
        """))
    proc = subprocess.run([*search_command(), "run", "study.toml", "--storage", "s.journal",
                           "--no-progress"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = optuna.load_study(study_name="late", storage=open_storage(
        str(tmp_path / "s.journal"))).trials
    first = trials[0]
    assert first.state == TrialState.FAIL and first.values is None  # -1000 was never told
    assert first.user_attrs["exit_reason"] == "driver vm:1 sent no heartbeat"
    assert [t.state for t in trials[1:]] == [TrialState.COMPLETE] * 3  # the budget, met
    assert ("trial   0 refused" in proc.stdout
            and "result refused: the trial was already FAIL in the storage (driver vm:1 sent no "
                "heartbeat)" in proc.stdout), proc.stdout
    assert "1 late results refused" in proc.stdout
