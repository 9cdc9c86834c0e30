"""studies/resnet18-fashion.toml end to end: `search run` -> 2 MPI ranks -> the user's
torchvision ResNet-18 on a PNG tree read through loader workers (a tiny tree, one epoch)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.cli_helpers import search_command
from training.contract import open_storage

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "fashion_png"


def _swapped(name: str, swaps: dict[str, str]) -> str:
    """The shipped study file ``studies/NAME.toml`` with ``swaps`` made (each must be there)."""
    text = (REPO / "studies" / f"{name}.toml").read_text()
    for old, new in swaps.items():
        assert old in text, f"studies/{name}.toml no longer has {old!r}"
        text = text.replace(old, new)
    return text


def _study(tree: Path) -> str:
    """The shipped study file, cut to one trial of one epoch on ``tree``."""
    return _swapped("resnet18-fashion", {
        "trials = 2": "trials = 1",
        "epochs = 2": "epochs = 1",
        'PYTHONPATH = "examples/fashion_png"': f'PYTHONPATH = "{EXAMPLE}"',
        'FASHION_PNG = "data/fashion-png-quick"': f'FASHION_PNG = "{tree}"',
    })


def _one_trial(text: str, name: str, tmp_path: Path) -> optuna.trial.FrozenTrial:
    """``search run`` of the study file ``text`` (one trial): that trial, complete."""
    study_file = tmp_path / f"{name}.toml"
    study_file.write_text(text)
    journal = str(tmp_path / f"{name}.journal")
    proc = subprocess.run([*search_command(), "run", str(study_file), "--storage", journal,
                           "--no-progress"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (trial,) = optuna.load_study(study_name=name, storage=open_storage(journal)).get_trials()
    assert trial.state is TrialState.COMPLETE, trial.user_attrs.get("exit_reason")
    return trial


def test_resnet18_study_runs_on_a_png_tree(tmp_path: Path) -> None:
    if importlib.util.find_spec("torchvision") is None:
        pytest.fail("torchvision is missing: the ResNet-18 example needs pip install -e '.[vision]'")
    tree = tmp_path / "png"
    subprocess.run([sys.executable, str(EXAMPLE / "write_pngs.py"), "--out", str(tree),
                    "--limit", "40"], check=True, capture_output=True, timeout=120)
    trial = _one_trial(_study(tree), "resnet18-fashion", tmp_path)
    attrs = trial.user_attrs
    assert attrs["ranks"] == 2 and attrs["algorithm"] == "sync" and attrs["epochs_run"] == 1
    assert 0.0 <= trial.value <= 1.0 and attrs["samples_per_s"] > 0
    assert attrs["n_params"] > 11_000_000  # torchvision's ResNet-18, not a stand-in


def test_resnet18_prune_study_cuts_the_residual_stages_of_torchvisions_model(
        tmp_path: Path) -> None:
    tree = tmp_path / "png"
    subprocess.run([sys.executable, str(EXAMPLE / "write_pngs.py"), "--out", str(tree),
                    "--limit", "40"], check=True, capture_output=True, timeout=120)
    text = _swapped("resnet18-prune", {
        "trials = 2": "trials = 1", "epochs = 4": "epochs = 1",
        "prune = { target = 0.5, start_epoch = 2, end_epoch = 3, steps = 2, sparsity = 1e-4 }":
        "prune = { target = 0.5, start_epoch = 1, end_epoch = 1, steps = 1 }",
        'PYTHONPATH = "examples/fashion_png"': f'PYTHONPATH = "{EXAMPLE}"',
        'FASHION_PNG = "data/fashion-png-quick"': f'FASHION_PNG = "{tree}"',
    })
    trial = _one_trial(text, "resnet18-prune", tmp_path)
    # 30 % to 70 % of every group's channels cut before the first batch: 11.2 M parameters
    # become at most about half (the classifier's 10 outputs and the stem's input stay).
    assert trial.user_attrs["n_params"] < 0.55 * 11_170_000


def test_resnet18_shards_study_streams_packed_shards_through_one_node_cache(
        tmp_path: Path) -> None:
    # studies/resnet18-shards.toml: the PNG tree packed by `search data pack`, read by both
    # ranks through one node cache, a checkpoint within the epoch linked with its cursor.
    tree, shards, cache = tmp_path / "png", tmp_path / "shards", tmp_path / "cache"
    subprocess.run([sys.executable, str(EXAMPLE / "write_pngs.py"), "--out", str(tree),
                    "--limit", "200"], check=True, capture_output=True, timeout=120)
    subprocess.run([*search_command(), "data", "pack", str(tree), str(shards), "--shard-mb",
                    "0.01", "--normalize", "0.286/0.353"], check=True, capture_output=True,
                   timeout=120)
    text = _swapped("resnet18-shards", {
        "trials = 2": "trials = 1", "epochs = 2": "epochs = 1",
        "every_steps = 4": "every_steps = 2",  # 160 training images: 5 batches of 32
        'PYTHONPATH = "examples/fashion_png"': f'PYTHONPATH = "{EXAMPLE}"',
        'dataset = "shards:data/fashion-shards-quick"': f'dataset = "shards:{shards}"',
        'data_cache = "data/node-cache"': f'data_cache = "{cache}"',
    })
    trial = _one_trial(text, "resnet18-shards", tmp_path)
    assert trial.user_attrs["n_params"] > 11_000_000 and trial.user_attrs["epochs_run"] == 1
    checkpoint = trial.user_attrs["detol:checkpoint"]  # the newest: within epoch 1
    assert checkpoint["epoch"] == 0 and checkpoint["cursor"]["epoch"] == 1
    assert checkpoint["cursor"]["consumed"] % 32 == 0 and checkpoint["cursor"]["consumed"] > 0
    index = json.loads((shards / "index.json").read_text())
    n_shards = sum(len(s["shards"]) for s in index["splits"].values())
    copies = [p for p in cache.iterdir() if p.is_file() and not p.name.startswith(".")]
    assert len(copies) == n_shards  # every split read through the cache, one copy each
