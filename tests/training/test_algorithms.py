"""Every distributed algorithm, on 2 real MPI ranks, lowers the MLP loss on digits and the
K-means loss (on step counts, not clocks); ASGD's exchange keeps its ranks together; all ranks
end on the same (averaged) weights. The exchange's arithmetic: ``test_asgd_exchange.py``."""

from __future__ import annotations

import pytest

from tests.mpi_helpers import run_mpi_job
from training.algorithms._registry import ALGORITHMS

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    result: dict = run_mpi_job("_algo_job.py", tmp_path_factory.mktemp("algos") / "out.json",
                               timeout=240)
    return result


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_mlp_loss_goes_down(results: dict, algorithm: str) -> None:
    r = results["mlp"][algorithm]
    assert r["after"] < 0.5 * r["before"], r
    assert r["accuracy"] > 0.7, r
    assert r["spread_after_finish"] < 1e-6  # every rank holds the same final weights


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_kmeans_loss_goes_down(results: dict, algorithm: str) -> None:
    r = results["kmeans"][algorithm]
    assert results["lloyd"] < 0.75 * r["before"]  # there is a long way to go from the start
    assert r["after"] < 1.05 * results["lloyd"], (r, results["lloyd"])  # and it went all of it
    assert r["steps"] == (30 if algorithm == "batch" else 300)


def test_asgd_blends_states_that_keep_its_ranks_together(results: dict) -> None:
    """Same seeds, same shards, same steps, ranks kept in step: SimuParallelSGD's ranks drift
    apart on their own data; ASGD's accepted blends pull them together. Without the blend (or
    with a gate that accepts nothing) the two spreads are equal."""
    asgd, alone = results["lockstep"]["asgd"], results["lockstep"]["simuparallel"]
    c = asgd["counters"]
    assert c["accepted"] > 0 and c["rejected"] > 0, c  # the gate decides, both ways
    assert asgd["spread"] < 0.8 * alone["spread"], (asgd["spread"], alone["spread"])
    # The counters are rank 0's: sent = its Puts to rank 1, received = its reads of a new
    # state from rank 1. A slot written twice before it was read is received once, so rank 0
    # receives at most what rank 1 sent; with the same steps on both ranks (K-means, a step
    # budget) that is what rank 0 sent. In the trainer ASGD's ranks claim batches and may take
    # different step counts, so there both counts are only known to be positive.
    kmeans = results["kmeans"]["asgd"]["counters"]
    assert 0 < kmeans["received"] <= kmeans["sent"], kmeans
    mlp = results["mlp"]["asgd"]["counters"]
    assert mlp["sent"] > 0 and mlp["received"] > 0, mlp


def test_sync_overlaps_communication_with_backward(results: dict) -> None:
    c = results["mlp"]["sync"]["counters"]
    assert c["overlapped_buckets"] > 0
