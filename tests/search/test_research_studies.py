"""The research-code study files as they ship, from the repository root:
studies/hf-vit-digits.toml (transformers' ViT, random weights, on dict samples, its own loss,
AdamW with warmup, bf16, 2 MPI ranks; its best weights exported) and studies/shapes.toml (dict
samples with the target under "y", a (logits, features) model, the user's optimizer and
schedule)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import optuna
import pytest
import torch
from optuna.trial import TrialState

from tests.cli_helpers import search_command
from training.contract import open_storage

pytestmark = pytest.mark.mpi

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # 32 s; the trainer's path for it runs by default in test_research_code.py
def test_the_hugging_face_study_trains_and_exports_its_best_weights(tmp_path: Path) -> None:
    journal = str(tmp_path / "hf.journal")
    proc = subprocess.run([*search_command(), "run", "studies/hf-vit-digits.toml", "--storage",
                           journal, "--no-progress", "--trials", "1"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (trial,) = optuna.load_study(study_name="hf-vit-digits",
                                 storage=open_storage(journal)).get_trials()
    assert trial.state is TrialState.COMPLETE, trial.user_attrs.get("exit_reason")
    attrs = trial.user_attrs
    assert attrs["ranks"] == 2 and attrs["epochs_run"] == 6
    assert trial.value > 0.5  # 10 classes; 0.83 to 0.87 seen
    assert attrs["flops"] > 0  # patches, Linear layers and attention, per sample
    out = tmp_path / "best.pt"
    shown = subprocess.run([*search_command(), "best", "hf-vit-digits", "--storage", journal,
                            "--export-weights", str(out)], cwd=REPO, capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    saved = torch.load(out, weights_only=False)
    assert saved["params"]["depth"] == 2 and saved["params"]["width"] == trial.params["width"]
    assert any(k.startswith("vit.layers.1.") for k in saved["state_dict"])  # depth 2


def test_the_shapes_study_trains_a_tuple_output_model_on_dict_samples(tmp_path: Path) -> None:
    journal = str(tmp_path / "shapes.journal")
    proc = subprocess.run([*search_command(), "run", "studies/shapes.toml", "--storage", journal,
                           "--no-progress", "--trials", "1"], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (trial,) = optuna.load_study(study_name="shapes", storage=open_storage(journal)).get_trials()
    assert trial.state is TrialState.COMPLETE, trial.user_attrs.get("exit_reason")
    assert trial.value > 0.6 and trial.user_attrs["flops"] > 0  # 0.87 to 0.91 seen
