"""`search run` on the real path: study file -> LocalCluster -> mpiexec -> journal storage.

Checked afterwards with plain Optuna only, as a notebook or the dashboard would read it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.cli_helpers import search_command
from tests.mpi_helpers import expected_device
from training.contract import open_storage

pytestmark = pytest.mark.mpi

EPOCHS = 3


def _study_text(env: dict[str, str]) -> str:
    return f"""
name = "e2e"
metric = "val_accuracy"

[budget]
trials = 4
concurrency = 1
max_failures = 10

[strategy]
name = "random"
seed = 7

[pruner]
name = "median"
startup_trials = 1
warmup_epochs = 0

[training]
dataset = "_trial_helpers:digits_failing_on_three_ranks"
epochs = {EPOCHS}
batch_size = 64
ranks = 2

[launcher]
env = {{ PYTHONPATH = {json.dumps(env["PYTHONPATH"])} }}

[space]
lr = {{ type = "float", low = 1e-5, high = 0.3, log = true }}
hidden = {{ type = "int", low = 16, high = 64 }}
ranks = {{ type = "categorical", choices = [2, 3] }}
"""


def _search(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*search_command(), *args], capture_output=True, text=True, timeout=400)


def test_study_runs_end_to_end_and_resumes(
    tmp_path: Path, helpers_env: dict[str, str], write_study: Callable[..., Path]
) -> None:
    study_file = write_study(_study_text(helpers_env))
    journal = str(tmp_path / "e2e.journal")
    # Known first trials: a good one, a hopeless one (pruned after epoch 1), a failing one.
    seeded = optuna.create_study(study_name="e2e", storage=open_storage(journal),
                                 direction="maximize")
    seeded.enqueue_trial({"lr": 0.05, "hidden": 32, "ranks": 2})
    seeded.enqueue_trial({"lr": 1e-5, "hidden": 16, "ranks": 2})
    seeded.enqueue_trial({"lr": 0.05, "hidden": 32, "ranks": 3})

    first = _search("run", str(study_file), "--storage", journal, "--no-progress")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "trial   0 complete" in first.stdout

    study = optuna.load_study(study_name="e2e", storage=open_storage(journal))
    trials = study.get_trials()
    states = [t.state for t in trials]
    assert states[:3] == [TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL]
    assert states.count(TrialState.COMPLETE) + states.count(TrialState.PRUNED) == 4
    assert TrialState.RUNNING not in states and TrialState.WAITING not in states

    for t in trials:
        attrs = t.user_attrs
        assert attrs["exit_reason"], t.number
        if t.state is TrialState.FAIL:
            assert t.params["ranks"] == 3
            assert "user dataset exploded on rank 1 of 3" in attrs["exit_reason"]
            continue
        for key in ("ranks", "algorithm", "wall_time_s", "epochs_run", "samples_per_s",
                    "test_accuracy", "launch_overhead_s"):
            assert key in attrs, (t.number, key)
        assert attrs["ranks"] == t.params["ranks"] == 2
        assert attrs["algorithm"] == "sync"
        assert attrs["device"] == expected_device()  # CUDA where there is one
        assert attrs["samples_per_s"] > 0
        assert sorted(t.intermediate_values) == list(range(1, attrs["epochs_run"] + 1))
        if t.state is TrialState.COMPLETE:
            assert attrs["epochs_run"] == EPOCHS
            assert t.value == pytest.approx(t.intermediate_values[EPOCHS])
        else:
            assert attrs["epochs_run"] < EPOCHS
            assert attrs["exit_reason"].startswith("pruned after epoch")

    assert trials[0].value > 0.8
    assert trials[1].user_attrs["epochs_run"] == 1

    second = _search("run", str(study_file), "--storage", journal, "--no-progress",
                     "--trials", "5")
    assert second.returncode == 0, second.stdout + second.stderr
    again = optuna.load_study(study_name="e2e", storage=open_storage(journal)).get_trials()
    assert [t.number for t in again[: len(trials)]] == [t.number for t in trials]
    assert [t.state for t in again[: len(trials)]] == states  # nothing re-run or lost
    finished = [t for t in again if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(finished) == 5

    status = _search("status", "e2e", "--storage", journal)
    assert status.returncode == 0
    assert "complete" in status.stdout and "e2e" in status.stdout
    best = _search("best", str(study_file), "--storage", journal, "-n", "2")
    assert best.returncode == 0
    assert f"{study.best_value:.4g}" in best.stdout


def test_new_study_records_metric_names_and_the_study_file(
    tmp_path: Path, write_study: Callable[..., Path]
) -> None:
    study_file = write_study("""
name = "fresh"
metric = ["val_accuracy", "n_params"]
pruner = "none"
[budget]
trials = 1
[training]
dataset = "digits"
epochs = 1
ranks = 1
hidden = 8
""")
    journal = str(tmp_path / "fresh.journal")
    done = _search("run", str(study_file), "--storage", journal, "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    study = optuna.load_study(study_name="fresh", storage=open_storage(journal))
    assert study.metric_names == ["val_accuracy", "n_params"]
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    (trial,) = study.trials
    assert trial.state is TrialState.COMPLETE
    assert trial.values[1] == trial.user_attrs["n_params"] == (64 * 8 + 8) + (8 * 8 + 8) + (8 * 10 + 10)  # two hidden layers
    assert study.user_attrs["detol:study"]["training"]["hidden"] == 8
    assert "Pareto front" in done.stdout
    # No per-epoch reports in a multi-objective study (Optuna refuses them): a vector attribute
    # per epoch instead, even unpruned, and the learning curve all the same.
    assert trial.intermediate_values == {}
    assert [row["epoch"] for row in trial.user_attrs["history"]] == [1]
    assert trial.user_attrs["detol:vector:1"] == [trial.values[0], trial.values[1]]


def test_topology_study_stores_genomes_rebuildable_from_params(
    tmp_path: Path, write_study: Callable[..., Path]
) -> None:
    import spaces

    study_file = write_study("""
name = "topo"
metric = ["val_accuracy", "flops"]
pruner = "none"
strategy = { name = "random", seed = 3 }
[budget]
trials = 2
[training]
dataset = "digits"
epochs = 1
ranks = 2
optimizer = "adam"
lr = 0.003
[space.genome]
family = "stack"
max_conv_layers = 2
channels = [4, 8]
widths = [16]
""")
    journal = str(tmp_path / "topo.journal")
    done = _search("run", str(study_file), "--storage", journal, "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    family = spaces.make_family("stack", max_conv_layers=2, channels=[4, 8], widths=[16])
    study = optuna.load_study(study_name="topo", storage=open_storage(journal))
    for t in study.trials:
        assert t.state is TrialState.COMPLETE
        genome = family.from_params(t.params)  # the genome from trial.params alone
        assert genome.key == t.user_attrs["genome_key"]
        assert spaces.genome_from_json(t.user_attrs["genome"]) == genome
        assert t.user_attrs["genome_summary"] == genome.summary()
        assert t.values[1] == t.user_attrs["flops"] > 0
        assert genome.summary() in done.stdout
