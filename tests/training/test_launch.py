"""The launcher runs real MPI jobs and turns every way they end into a result dict."""

from __future__ import annotations

import time

import pytest

from training.launch import LauncherNotFound, launcher_argv, run_trial

pytestmark = pytest.mark.mpi


def test_launcher_line_fills_in_ranks_and_finds_the_venv_mpiexec() -> None:
    argv = launcher_argv("mpiexec -n {ranks} -genv X 1", 3)
    assert argv[0].endswith("mpiexec")
    assert argv[1:] == ["-n", "3", "-genv", "X", "1"]


def test_missing_launcher_names_the_program_and_the_fix() -> None:
    with pytest.raises(LauncherNotFound, match="'no-such-mpiexec' not found.*pip install mpich"):
        launcher_argv("no-such-mpiexec -n {ranks}", 2)


def test_complete_trial_reports_metrics_and_timings() -> None:
    result = run_trial({"config": {"dataset": "digits", "epochs": 2, "ranks": 2, "hidden": 16},
                        "ask_time": time.time()})
    assert result["state"] == "complete", result
    assert result["ranks"] == 2 and result["epochs_run"] == 2
    assert len(result["history"]) == 2
    assert 0.5 < result["values"]["val_accuracy"] <= 1.0
    assert result["samples_per_s"] > 0
    assert 0 < result["launch_overhead_s"] < result["wall_time_s"]
    assert result["rank_seconds"] == pytest.approx(2 * result["wall_time_s"])
    assert "training.worker" in result["command"]


def test_error_on_a_non_root_rank_fails_the_trial_with_its_text(helpers_env: dict) -> None:
    started = time.monotonic()
    result = run_trial({"config": {"dataset": "_trial_helpers:digits_failing_on_two_ranks",
                                   "epochs": 1, "ranks": 2}, "env": helpers_env})
    assert result["state"] == "failed"
    assert "user dataset exploded on rank 1" in result["exit_reason"]
    assert time.monotonic() - started < 60


def test_a_rank_that_dies_ends_the_job_instead_of_hanging(helpers_env: dict) -> None:
    started = time.monotonic()
    result = run_trial({"config": {"dataset": "_trial_helpers:digits_rank1_dies", "epochs": 1,
                                   "ranks": 2}, "env": helpers_env, "timeout_s": 90})
    assert result["state"] == "failed"
    assert "timeout" not in result["exit_reason"]  # ended by MPI, not by our kill
    assert "exited with code" in result["exit_reason"]
    assert time.monotonic() - started < 60


def test_trial_timeout_kills_the_job_and_says_so() -> None:
    started = time.monotonic()
    result = run_trial({"config": {"dataset": "digits", "epochs": 500, "ranks": 2},
                        "timeout_s": 4})
    assert result["state"] == "failed"
    assert "trial timeout" in result["exit_reason"]
    assert time.monotonic() - started < 20


def test_a_diverging_run_stops_and_says_so() -> None:
    result = run_trial({"config": {"dataset": "digits", "epochs": 50, "ranks": 2, "lr": 1e8,
                                   "momentum": 0.0}})
    assert result["state"] == "failed"
    assert result["exit_reason"].startswith("diverged: training loss is")
    assert result["epochs_run"] < 50  # stopped, not trained to the end


# Two separate single-rank MPI jobs where one 2-rank job was asked for: what `srun -n 2` does
# under SLURM's MpiDefault=none with the mpich wheel (each process is "rank 0 of 1").
SINGLETONS = "sh -c 'for i in $(seq {ranks}); do \"$@\" & done; wait' sh"


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_job_with_the_wrong_rank_count_fails_instead_of_training(warm: bool) -> None:
    started = time.monotonic()
    result = run_trial({"config": {"dataset": "digits", "epochs": 1, "ranks": 2, "hidden": 16},
                        "launcher": SINGLETONS, "warm": warm, "timeout_s": 90})
    assert result["state"] == "failed", result
    reason = result["exit_reason"]
    assert "wrong rank count: the trial asked for 2 ranks but its MPI job has 1" in reason
    assert "srun --mpi=pmi2" in reason and "sh -c" in reason  # the fix, and the launcher line
    assert "Traceback" not in reason  # the message says all
    assert "history" not in result and "values" not in result  # nothing was trained or reported
    assert time.monotonic() - started < 60
