"""A user's own loop (``train(session)``) as a trial: real mpiexec, real Optuna storage.

The loops are in tests/mpi_jobs/_own_loops.py; each rank writes what it saw into ``out``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.mpi_helpers import expected_device
from training.contract import open_storage
from training.launch import run_trial

pytestmark = pytest.mark.mpi

JOBS = str(Path(__file__).resolve().parents[1] / "mpi_jobs")


def _spec(loop: str, out: Path, *, epochs: int = 2, ranks: int = 2,
          objectives: tuple[str, ...] = ("loss",), agree: float = 3.0,
          **more: Any) -> dict[str, Any]:
    params = {"out": str(out), **more.pop("params", {})}
    return {
        "config": {"ranks": ranks, "epochs": epochs, "agree_timeout_s": agree},
        "objectives": list(objectives),
        "own_loop": {"function": f"_own_loops:{loop}", "params": params, "sys_path": [JOBS]},
        "timeout_s": 120,
        **more,
    }


def _read(out: Path, name: str, ranks: int = 2) -> list[Any]:
    return [json.loads((out / f"{name}.rank{r}.json").read_text()) for r in range(ranks)]


def _study(tmp_path: Path, pruner: optuna.pruners.BasePruner | None = None) -> tuple[str, Any]:
    url = str(tmp_path / "s.journal")
    study = optuna.create_study(study_name="own", storage=open_storage(url),
                                pruner=pruner or optuna.pruners.NopPruner())
    return url, study


def test_own_loop_completes_on_two_ranks_and_reads_each_sample_once_per_epoch(
    tmp_path: Path,
) -> None:
    n, batch = 37, 8  # 37 = 4 full global batches + 5: uneven slices, a short last batch
    result = run_trial(_spec("record", tmp_path, epochs=2, params={"n": n, "batch": batch}))
    assert result["state"] == "complete", result.get("exit_reason")
    assert result["ranks"] == 2 and result["epochs_run"] == 2
    assert result["device"] == expected_device()
    assert [row["epoch"] for row in result["history"]] == [1.0, 2.0]
    assert result["values"]["acc"] == pytest.approx(0.5)  # the last report is the trial's value
    assert result["values"]["loss"] > 0
    per_rank = _read(tmp_path, "record")
    for epoch in range(2):
        parts = [set(r[epoch]["indices"]) for r in per_rank]
        read = sum(len(r[epoch]["indices"]) for r in per_rank)
        assert read == n and set().union(*parts) == set(range(n))  # each sample exactly once
        assert not parts[0] & parts[1]
        assert per_rank[0][epoch]["steps"] == per_rank[1][epoch]["steps"]  # no lone sync step
        # session.reduce of (sum, count): 19 and 18 samples, the mean of all 37 exactly
        assert [r[epoch]["mean_index"] for r in per_rank] == [(n - 1) / 2] * 2
    # the epoch advances by itself: another order in epoch 2
    assert per_rank[0][0]["indices"] != per_rank[0][1]["indices"]


def test_pruner_decision_is_the_same_on_every_rank(tmp_path: Path) -> None:
    # rank 0 reports 1, 2, 3...; rank 1 reports 1 more (its own values do not count)
    url, study = _study(tmp_path, optuna.pruners.ThresholdPruner(upper=2.5))
    trial = study.ask()
    pruner = {"factory": "optuna.pruners:ThresholdPruner", "kwargs": {"upper": 2.5}}
    result = run_trial(_spec("decisions", tmp_path, epochs=6, study_name="own",
                             storage_url=url, trial_id=trial._trial_id, pruner=pruner))
    assert result["state"] == "pruned", result.get("exit_reason")
    seen = _read(tmp_path, "decisions")
    assert seen[0] == seen[1] == ["continue", "continue", "stop"]
    assert study.trials[0].intermediate_values == {1: 1.0, 2: 2.0, 3: 3.0}


def test_ranks_that_disagree_on_the_reports_fail_the_trial_with_the_reason(
    tmp_path: Path,
) -> None:
    result = run_trial(_spec("rank1_returns_early", tmp_path))
    ended = time.time()
    assert result["state"] == "failed"
    reason = result["exit_reason"]
    assert "ranks disagree on the session calls" in reason, reason
    assert "rank 0 called report(epoch=2), its report #2" in reason
    assert "rank 1 returned from train() after 1 report(s)" in reason
    skipped = json.loads((tmp_path / "skipped.rank1.json").read_text())
    assert ended - skipped["time"] < 30


def test_a_rank_that_skips_a_report_fails_the_trial_within_the_bound(tmp_path: Path) -> None:
    agree = 3.0
    result = run_trial(_spec("rank1_skips_a_report", tmp_path, epochs=4, agree=agree))
    ended = time.time()
    assert result["state"] == "failed"
    reason = result["exit_reason"]
    assert f"waited {agree:g} s for the other ranks" in reason, reason
    assert "rank 0 called report(epoch=2)" in reason
    skipped = json.loads((tmp_path / "skipped.rank1.json").read_text())
    took = ended - skipped["time"]
    print(f"skip -> trial failed in {took:.1f} s (bound {agree} s), load {os.getloadavg()}")
    assert agree <= took < agree + 30


def test_a_rank_killed_inside_the_loop_fails_the_trial_when_mpi_ends_the_job(
    tmp_path: Path,
) -> None:
    # The outcome only: how long it takes is benchmarks/own_loop_faults.py's rank1_dies (goal
    # < 60 s). Ended by MPI (SIGKILL's code 9), neither by the session's agreement timeout
    # (40 s here) nor by the trial's timeout.
    result = run_trial(_spec("rank1_dies", tmp_path, epochs=4, agree=40.0))
    assert result["state"] == "failed"
    assert result["exit_reason"].startswith("MPI job exited with code 9"), result["exit_reason"]
    assert (tmp_path / "skipped.rank1.json").exists()  # killed where the loop says


def test_checkpoint_round_trip_through_a_resumed_trial(tmp_path: Path) -> None:
    url, study = _study(tmp_path)
    plan = {"store": str(tmp_path / "artifacts"), "every": 0, "keep": 2}
    first = study.ask()
    common = {"study_name": "own", "storage_url": url, "checkpoints": plan}
    result = run_trial(_spec("checkpointed", tmp_path, epochs=4, trial_id=first._trial_id,
                             **common))
    assert result["state"] == "complete", result.get("exit_reason")
    assert result["checkpoint"]["epoch"] == 2
    saved = _read(tmp_path, "saved")
    second = study.ask()
    again = run_trial(_spec("checkpointed", tmp_path, epochs=4, trial_id=second._trial_id,
                            resume_from=result["checkpoint"]["id"], **common))
    assert again["state"] == "complete", again.get("exit_reason")
    loaded = _read(tmp_path, "loaded")
    for rank in range(2):  # each rank gets its own state back, weights as saved
        assert loaded[rank]["rank"] == rank and loaded[rank]["tag"] == f"saved-by-{rank}"
        assert loaded[rank]["weight"] == saved[rank]["weight"]
    assert again["start_epoch"] == 3 and again["epochs_run"] == 2
    assert [row["epoch"] for row in again["history"]] == [1.0, 2.0, 3.0, 4.0]
    assert study.trials[1].intermediate_values == {3: 7.0, 4: 6.0}


def test_a_metric_the_loop_does_not_report_fails_the_trial_naming_it(tmp_path: Path) -> None:
    result = run_trial(_spec("no_metric", tmp_path, objectives=("val_accuracy",)))
    assert result["state"] == "failed"
    assert ("report(epoch=1) has no 'val_accuracy', the study's metric (reported: "
            "['not_the_metric'])") in result["exit_reason"]


PRUNE = {"target": 0.5, "start_epoch": 2, "end_epoch": 3, "steps": 2, "sparsity": 1e-4}


def _pruned_spec(tmp_path: Path, **more: Any) -> dict[str, Any]:
    spec = _spec("pruned", tmp_path, epochs=4, objectives=("acc",), **more)
    spec["config"]["prune"] = PRUNE  # [training] prune: session.prune_units follows it
    return spec


def test_an_own_loop_prunes_with_the_trainers_rule_and_keeps_learning(tmp_path: Path) -> None:
    result = run_trial(_pruned_spec(tmp_path))
    assert result["state"] == "complete", result.get("exit_reason")
    rank0, rank1 = _read(tmp_path, "pruned")
    assert rank0 == rank1  # the same units removed, the same weights (sync) on both ranks
    assert [r["changed"] for r in rank0] == [False, True, True, False]
    assert [r["widths"] for r in rank0] == [[16, 16, 3], [12, 12, 3], [8, 8, 3], [8, 8, 3]]
    assert len(rank0[2]["kept"]) == 8 and rank0[2]["kept"] != list(range(8))  # by importance
    assert all(r["momentum_sliced"] for r in rank0[1:])  # sliced with the weights, not reset
    assert all(r["moved"] > 1e-4 for r in rank0)  # the pruned layer learns after each prune
    assert rank0[-1]["acc"] > 0.9


@pytest.mark.slow  # three trials: ~40 s at load 8
def test_a_pruned_own_loop_resumes_at_its_pruned_widths(tmp_path: Path) -> None:
    url, study = _study(tmp_path)
    common = {"study_name": "own", "storage_url": url,
              "checkpoints": {"store": str(tmp_path / "artifacts"), "every": 0, "keep": 2}}
    straight = run_trial(_pruned_spec(tmp_path / "a", trial_id=study.ask()._trial_id, **common))
    first = run_trial(_pruned_spec(tmp_path / "b", trial_id=study.ask()._trial_id,
                                   params={"save_at": 2}, **common))
    assert first["checkpoint"]["epoch"] == 2
    again = run_trial(_pruned_spec(tmp_path / "b", trial_id=study.ask()._trial_id,
                                   params={"save_at": 2},  # the same params: it resumes
                                   resume_from=first["checkpoint"]["id"], **common))
    assert straight["state"] == again["state"] == "complete", again.get("exit_reason")
    whole, resumed = _read(tmp_path / "a", "pruned")[0], _read(tmp_path / "b", "pruned-resumed")
    assert resumed[0] == resumed[1]
    assert [r["widths"] for r in resumed[0]] == [[8, 8, 3], [8, 8, 3]]  # 12 restored, then 8
    assert resumed[0][-1]["weights"] == pytest.approx(whole[-1]["weights"], abs=1e-5)
