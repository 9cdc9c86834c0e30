"""The research-code study files as they ship, from the repository root:
studies/hf-vit-digits.toml (transformers' ViT, random weights, on dict samples, its own loss,
AdamW with warmup, bf16, 2 MPI ranks; its best weights exported) and studies/shapes.toml (dict
samples with the target under "y", a (logits, features) model, the user's optimizer and
schedule), studies/transformer-prune.toml (a user's transformer encoder pruned while it
trains)."""

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


@pytest.mark.slow  # 40 s; the pruning path runs by default in tests/training/test_unit_pruning.py
def test_the_transformer_study_prunes_its_encoder_while_it_trains(tmp_path: Path) -> None:
    text = (REPO / "studies" / "transformer-prune.toml").read_text()
    swaps = {"trials = 6": "trials = 1", "epochs = 12": "epochs = 4",
             "prune_target = { type = \"float\", low = 0.0, high = 0.6 }":
             "prune_target = { type = \"float\", low = 0.5, high = 0.6 }"}
    for old, new in swaps.items():
        assert old in text, f"studies/transformer-prune.toml no longer has {old!r}"
        text = text.replace(old, new)
    study = tmp_path / "t.toml"
    study.write_text(text.replace('PYTHONPATH = "examples/transformer"',
                                  f'PYTHONPATH = "{REPO / "examples" / "transformer"}"'))
    journal = str(tmp_path / "t.journal")
    proc = subprocess.run([*search_command(), "run", str(study), "--storage", journal,
                           "--no-progress"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (trial,) = optuna.load_study(study_name="transformer-prune",
                                 storage=open_storage(journal)).get_trials()
    assert trial.state is TrialState.COMPLETE, trial.user_attrs.get("exit_reason")
    rows = trial.user_attrs["history"]
    params, flops = [r["n_params"] for r in rows], [r["flops"] for r in rows]
    assert params[0] > params[1] > params[2] == params[3]  # cut at the starts of epochs 2 and 3
    assert params[3] < 0.35 * params[0] and flops[3] < 0.5 * flops[0]
    assert trial.values[0] > 0.3  # 10 classes; it learns on after the cuts
