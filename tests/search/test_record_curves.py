"""benchmarks/record_curves.py records a study's learning curves through search run itself
(the user's plug-ins: the diabetes regression's model, data and loss on 2 MPI ranks), chunk by
chunk, resumable, and refuses to mix another study or epoch count into a table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from search.simulated._curves import load_table

ROOT = Path(__file__).resolve().parents[2]
RECORD = [sys.executable, str(ROOT / "benchmarks" / "record_curves.py"),
          str(ROOT / "studies" / "diabetes-regression.toml")]

pytestmark = pytest.mark.mpi


def _record(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RECORD, str(out), "--configs", "3", "--epochs", "2", "--chunk", "2",
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


# 30-40 s of benchmark tooling (three `search run`s): in the slow tier (default run time); the
# recording study is checked by default below, and the replay of the shipped tables by
# test_curves_replay.py.
@pytest.mark.slow
def test_a_table_is_recorded_chunk_by_chunk_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "diabetes.jsonl.gz"
    first = _record(out, "--chunks", "1")  # stopped after one chunk, as a session that ended
    assert first.returncode == 0, first.stderr
    assert load_table.__wrapped__(str(out)).configs == 2
    second = _record(out)
    assert second.returncode == 0, second.stderr
    assert "chunk 1: 1 trials (2 of 3 recorded)" in second.stdout
    table = load_table.__wrapped__(str(out))
    assert (table.name, table.metric, table.direction, table.epochs) == (
        "diabetes-regression", "val_mae", "minimize", 2)
    assert [c["seed"] for c in table.chunks] == [0, 1] and table.configs == 3
    assert set(table.distributions) == {"lr", "width", "delta"}
    assert table.states == ["complete"] * 3  # none pruned: every epoch recorded
    for params, curve, epoch_s in zip(table.params, table.curves, table.epoch_s, strict=True):
        assert 1e-3 <= params["lr"] <= 0.1 and 8 <= params["width"] <= 128
        assert len(curve) == 2 and all(v > 0 for v in curve)
        assert len(epoch_s) == 2 and all(0 < s < 30 for s in epoch_s)
    assert not (tmp_path / "diabetes.jsonl.gz.work").exists()  # nothing left behind
    refused = _record(out, "--epochs", "3")
    assert refused.returncode == 2 and "recorded with another study file" in refused.stderr
    assert load_table.__wrapped__(str(out)).configs == 3


@pytest.mark.unit
def test_the_recording_study_is_the_users_space_and_training_unpruned_at_random() -> None:
    import tomllib

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from record_curves import recording_study, toml_text

    from search import parse_study

    source = tomllib.loads((ROOT / "studies" / "diabetes-regression.toml").read_text())
    data = recording_study(source, chunk=3, trials=7, seed=5, epochs=4, concurrency=1)
    sf = parse_study(tomllib.loads(toml_text(data)))  # what the chunk's study file says
    assert sf.pruner.name == "none"  # a study without [pruner] would get median pruning
    assert (sf.strategy.name, sf.strategy.seed, sf.budget.trials) == ("random", 5, 7)
    assert sf.budget.max_failures > 7  # every trial may diverge: each is a row of the table
    assert sf.training.epochs == 4 and sf.training.model == "diabetes.model:build"
    assert sf.name == "diabetes-regression-curves-3" and set(sf.space) == {"lr", "width", "delta"}
    assert sf.launcher.warm and sf.launcher.env == {"PYTHONPATH": "examples/diabetes"}
