"""A trial whose MPI job never got through MPI_Init on any launch, on a Dask worker: in a batch
allocation its parameters run again elsewhere (the allocation is suspect), on a local worker it
fails (the launcher line is the likely cause, and another run would fail the same way)."""

from __future__ import annotations

import pytest

from search.backends._dask import run_trial_on_worker
from training.contract import TrialSpec
from training.launch import launcher_argv


@pytest.mark.parametrize("batch", [True, False], ids=["batch-job", "local"])
def test_a_trial_that_never_started_in_a_batch_job_is_lost_and_a_local_one_fails(
        monkeypatch: pytest.MonkeyPatch, batch: bool) -> None:
    for name in ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "JOB_ID"):
        monkeypatch.delenv(name, raising=False)
    if batch:
        monkeypatch.setenv("SLURM_JOB_ID", "4242")
    mpiexec = launcher_argv("mpiexec -n {ranks}", 1)[0]
    # UCX has no such transport: every launch fails inside MPI_Init, as on a node just back from
    # a crash (docs/clusters.md)
    line = f"sh -c 'export UCX_TLS=bogus; exec \"$@\"' sh {mpiexec} -n {{ranks}}"
    spec = TrialSpec.from_json({"config": {"dataset": "digits", "epochs": 1, "ranks": 2},
                                "launcher": line})
    result = run_trial_on_worker(spec)
    assert result["state"] == "failed"
    assert result["exit_reason"].startswith("MPI job failed to start"), result["exit_reason"]
    assert result.get("lost", False) is batch  # lost: the driver re-queues its parameters
    assert result.get("batch_job") == ("4242" if batch else None)
