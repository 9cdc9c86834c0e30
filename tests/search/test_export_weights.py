"""The best trial's weights kept and exported (``[training] keep_weights``, ``search best
--export-weights``): the exported weights are the trial's final ones (they score its
val_accuracy again), and a study that keeps none is told so in one line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import optuna
import pytest
import torch

from tests.cli_helpers import search_command
from training import load_dataset
from training.contract import open_storage
from training.models import build_mlp

STUDY = """
name = "w"
metric = "val_accuracy"
pruner = "none"
[budget]
trials = 2
[strategy]
name = "random"
seed = 0
[training]
dataset = "digits"
epochs = 2
ranks = 1
hidden = 16
keep_weights = {keep}
[space]
lr = {{ type = "float", low = 0.01, high = 0.2, log = true }}
"""


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*search_command(), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=240)


@pytest.mark.mpi
def test_the_exported_weights_score_the_best_trial_s_accuracy_again(tmp_path: Path) -> None:
    (tmp_path / "w.toml").write_text(STUDY.format(keep="true"))
    done = _cli(tmp_path, "run", "w.toml", "--storage", "s.journal", "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    shown = _cli(tmp_path, "best", "w", "--storage", "s.journal", "--export-weights", "best.pt")
    assert shown.returncode == 0, shown.stderr
    study = optuna.load_study(study_name="w", storage=open_storage(str(tmp_path / "s.journal")))
    best = study.best_trial
    assert f"wrote trial {best.number}'s weights" in shown.stdout
    for t in study.trials:  # every trial kept its own
        assert Path(t.user_attrs["weights_path"]) == (
            tmp_path / "detol-weights" / "w" / f"trial-{t.number}.pt")
    saved = torch.load(tmp_path / "best.pt", weights_only=False)
    assert saved["searched"] == best.params and saved["trial"] == best.number
    # What the trial's model builder got: the searched lr and the fixed hidden width among them.
    assert saved["params"]["lr"] == best.params["lr"] and saved["params"]["hidden"] == 16
    model = build_mlp(64, 10, hidden=16, layers=2, activation="relu", dropout=0.0)
    model.load_state_dict(saved["state_dict"])
    data = load_dataset("digits", 0.2)
    with torch.no_grad():
        guess = model(torch.as_tensor(data.x_val)).argmax(dim=1)
    accuracy = int((guess == torch.as_tensor(data.y_val)).sum()) / len(data.y_val)
    assert accuracy == pytest.approx(best.value, abs=1e-9)


def test_a_study_that_keeps_no_weights_says_how_to(tmp_path: Path) -> None:
    (tmp_path / "w.toml").write_text(STUDY.format(keep="false").replace("trials = 2",
                                                                         "trials = 1"))
    done = _cli(tmp_path, "run", "w.toml", "--storage", "s.journal", "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    shown = _cli(tmp_path, "best", "w", "--storage", "s.journal", "--export-weights", "best.pt")
    assert shown.returncode == 2
    assert shown.stderr.strip() == ("error: export-weights: trial 0 is the best, but its study "
                                    "does not keep weights: set [training] keep_weights = true")
    assert not (tmp_path / "best.pt").exists() and not (tmp_path / "detol-weights").exists()
