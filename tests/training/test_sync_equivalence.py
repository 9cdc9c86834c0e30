"""Synchronous data parallelism: P ranks on a global batch follow 1 rank's trajectory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from training.launch import launcher_argv
from training.models._mlp import build_mlp

pytestmark = pytest.mark.mpi


def _train(tmp: Path, ranks: int, config: dict, learned: float = 0.6) -> dict[str, torch.Tensor]:
    """Trains and returns the final weights; fails unless the model really learned."""
    spec = {
        "config": {**config, "ranks": ranks},
        "weights_path": str(tmp / f"w{ranks}.pt"),
        "result_path": str(tmp / f"r{ranks}.json"),
    }
    (tmp / f"spec{ranks}.json").write_text(json.dumps(spec))
    argv = launcher_argv("mpiexec -n {ranks}", ranks)
    argv += [sys.executable, "-m", "training.jobs.worker", str(tmp / f"spec{ranks}.json")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp / f"r{ranks}.json").read_text())
    assert result["state"] == "complete"
    assert result["ranks"] == ranks
    # Identical weights prove little if nothing trained (a zeroed gradient also agrees).
    assert result["values"]["val_accuracy"] > learned, result["values"]  # chance is 0.1
    return torch.load(spec["weights_path"])


def _initial_weights(config: dict) -> dict[str, torch.Tensor]:
    """The weights every run starts from (the trainer seeds torch, then builds the MLP)."""
    torch.manual_seed(config["seed"])
    model = build_mlp(64, 10, hidden=config["hidden"], layers=2, activation="relu", dropout=0.0)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize(
    "optimizer",
    [
        # 1 KB buckets: the gradients are spread over many buckets, started during backward.
        {"optimizer": "sgd", "momentum": 0.9, "weight_decay": 1e-4, "bucket_kb": 1},
        {"optimizer": "adam", "lr": 0.003},
    ],
    ids=["sgd-momentum-wd-small-buckets", "adam-one-bucket"],
)
def test_two_ranks_match_one_rank_on_the_global_batch(tmp_path: Path, optimizer: dict) -> None:
    # 63 does not divide by 2 and the epoch's last batch is short: uneven slices are covered too.
    config = {"dataset": "digits", "epochs": 2, "batch_size": 63, "hidden": 32, "seed": 3,
              **optimizer}
    one = _train(tmp_path, 1, config)
    two = _train(tmp_path, 2, config)
    start = _initial_weights(config)
    assert one.keys() == two.keys() == start.keys()
    moved = max(float((one[k] - start[k]).abs().max()) for k in start)
    assert moved > 0.05, moved  # training changed the weights, well beyond the tolerance
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-4, atol=1e-5, msg=name)


def test_different_seeds_give_different_weights(tmp_path: Path) -> None:
    """The comparison above can fail: a changed seed changes the trained weights."""
    base = {"dataset": "digits", "epochs": 1, "batch_size": 64, "hidden": 16}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = _train(tmp_path / "a", 1, {**base, "seed": 1}, learned=0.2)
    b = _train(tmp_path / "b", 1, {**base, "seed": 2}, learned=0.2)
    assert not torch.allclose(a["1.weight"], b["1.weight"])
