"""Pruning during training on 2 real MPI ranks: every rank removes the same units (sync and
asgd), the model shrinks in the per-epoch report, and a pruned run resumes from its checkpoint."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.mpi_helpers import run_mpi_job

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return run_mpi_job("_prune_job.py", tmp_path_factory.mktemp("prune") / "out.json")


@pytest.mark.parametrize("algorithm", ["sync", "asgd", "asgd-taylor"])
def test_every_rank_removes_the_same_units(job: Any, algorithm: str) -> None:
    r = job[algorithm]
    rank0, rank1 = r["kept"]
    assert len(rank0) == 2 and rank0 == rank1  # two pruning steps, the same units on both
    assert r["widths"][0] == r["widths"][1] == [8, 8, 16]
    # what the trial records: each group by its first layer, dense and final width
    assert list(r["pruned"]["groups"].values()) == [[16, 8], [16, 8], [32, 16]]
    assert r["pruned"]["left_alone"] == []
    # It trained on after pruning (chance: 0.1; asgd's 4 epochs here reach 0.5 to 0.8).
    assert r["state"] == "complete" and r["accuracy"] > (0.7 if algorithm == "sync" else 0.3)
    if algorithm == "asgd-taylor":  # taylor's choice is its own, not l1's
        assert rank0 != job["asgd"]["kept"][0]


@pytest.mark.parametrize("algorithm", ["sync", "asgd"])
def test_parameters_and_flops_shrink_in_the_epoch_report(job: Any, algorithm: str) -> None:
    n, flops = job[algorithm]["n_params"], job[algorithm]["flops"]
    assert n[0] > n[1] > n[2] == n[3]  # dense in epoch 1, pruned at the start of 2 and 3
    assert flops[0] > flops[1] > flops[2] == flops[3] and flops[3] < 0.4 * flops[0]


def test_ranks_with_different_importances_agree_on_the_mean(job: Any) -> None:
    rank0, rank1 = job["agreed"]
    assert rank0 == rank1 == [[1.0, 0.0, 1.5], [pytest.approx(0.15)]]


def test_a_pruned_run_resumes_from_its_checkpoint_with_taylor_sums(job: Any) -> None:
    r = job["resume"]
    assert r["start_epoch"] == 3 and r["widths"][0] == r["widths"][1] == [8, 8, 16]
    assert r["resumed"] == pytest.approx(r["full"], abs=1e-9)
    # bit for bit on CPU; cuDNN's convolution backward is not, so float noise on a GPU
    assert r["max_weight_difference"] <= (1e-5 if torch.cuda.is_available() else 1e-6)
