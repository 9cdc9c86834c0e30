"""A trial changes width between segments (issue 31): a checkpoint of P ranks restores on Q.

One real 3-rank MPI job (tests/mpi_jobs/_reshard_job.py): sync trained 2 -> 1 -> 3 ranks ends
with the weights of a fixed 2-rank run; asgd, localsgd and simuparallel grow 2 -> 3 and shrink
3 -> 2 by training.state._reshard's rule and train on."""

from __future__ import annotations

from typing import Any

import pytest

from tests.mpi_helpers import run_mpi_job

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return run_mpi_job("_reshard_job.py", tmp_path_factory.mktemp("reshard") / "out.json",
                       ranks=3, timeout=400)


def test_sync_resized_2_1_3_ends_with_the_fixed_width_weights(job: Any) -> None:
    r = job["sync"]
    assert r["states"] == ["paused", "paused", "complete"]
    assert r["restored_is_ranks0"]  # one state: rank 0's, every rank
    assert r["momentum_restored"] and r["momentum_nonzero"]  # the optimizer state travelled
    assert r["max_weight_difference"] <= 1e-5  # the order of a float sum, nothing more
    assert r["accuracy"] > 0.8


@pytest.mark.parametrize("algorithm", ["asgd", "localsgd", "simuparallel"])
def test_each_algorithm_grows_and_shrinks_by_the_rule_and_trains_on(
    job: Any, algorithm: str
) -> None:
    r = job[algorithm]
    assert r["states"] == ["paused", "paused", "complete"]
    assert r["grow_ranks_differ"] and r["shrink_ranks_differ"]  # the rule is visible
    assert r["grow_copies"] == [True, True, True]  # rank q of 3 = rank q % 2 of 2
    merged, kept = r["shrink_merges"]  # rank 0 of 2 = mean of ranks 0, 2 of 3; rank 1 = 1
    assert merged <= 1e-6 and kept == 0.0
    assert r["accuracy"] > 0.8
