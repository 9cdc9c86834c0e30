"""Cluster backends from the [cluster] table.

Remote backends (slurm, pbs, kubernetes, cloud) are built from a study file and checked without
submitting anything; adaptive scaling runs for real on a LocalCluster.
"""

from __future__ import annotations

import gc
import inspect
import threading
import time
import tomllib
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import optuna
import pytest
from optuna.trial import TrialState

from search import Driver, StudyError, open_study, parse_study
from search.clusters._base import MPI, ClusterPlan, trial_task_durations
from search.clusters._plans import plan_cluster
from search.driver._open_cluster import open_client, with_overrides
from tests.cli_helpers import run_cli
from training.contract import open_storage


def _http_hosts(scheduler: Any) -> set[str]:
    return {sock.getsockname()[0] for sock in scheduler.http_server._sockets.values()}


def _cluster(table: dict[str, Any]) -> Any:
    return parse_study({"name": "clu", "cluster": table}).cluster


# --- the [cluster] table ---------------------------------------------------------------------------


@pytest.mark.unit
def test_defaults_and_backward_compatible_address() -> None:
    assert _cluster({}).backend == "local"
    old = _cluster({"address": "tcp://10.0.0.1:8786", "connect_timeout": 3})
    assert (old.backend, old.address, old.connect_timeout) == ("address", "tcp://10.0.0.1:8786", 3)
    assert _cluster({"workers": 2, "slots_per_worker": 4}).workers == 2


@pytest.mark.unit
@pytest.mark.parametrize(
    ("table", "where", "fragment"),
    [
        ({"backend": "lsf"}, "cluster.backend", "known: address, cloud, kubernetes"),
        ({"backend": "slurm", "image": "x"}, "cluster.image", "not an option of the 'slurm'"),
        ({"backend": "local", "queue": "q"}, "cluster.queue", "not an option of the 'local'"),
        ({"address": "tcp://h:1", "adapt": {"maximum": 2}}, "cluster.adapt", "'address' backend"),
        ({"backend": "address"}, "cluster.address", "required"),
        ({"adapt": {"minimum": 3, "maximum": 2}}, "cluster.adapt", "must not exceed maximum"),
        ({"adapt": {"minimum": 0}}, "cluster.adapt.maximum", "required"),
        ({"adapt": {"maximum": 2, "most": 3}}, "cluster.adapt.most", "unknown key"),
        ({"backend": "cloud", "provider": "ibm"}, "cluster.provider", "known: azure, ec2, gcp"),
        ({"colour": "red"}, "cluster.colour", "unknown key"),
    ],
)
def test_bad_cluster_tables_name_the_key(table: dict[str, Any], where: str, fragment: str) -> None:
    with pytest.raises(StudyError) as info:
        _cluster(table)
    assert info.value.where == where
    assert fragment in info.value.message
    assert "\n" not in str(info.value)


@pytest.mark.unit
def test_cli_flags_override_the_table() -> None:
    base = _cluster({"workers": 2, "adapt": {"maximum": 3}})
    bounds = with_overrides(base, adapt_min=1, adapt_max=5).adapt
    assert (bounds.minimum, bounds.maximum) == (1, 5)
    # --scheduler keeps only the address backend's options (workers was a local option).
    remote = with_overrides(base, scheduler="tcp://h:8786")
    assert (remote.backend, remote.address) == ("address", "tcp://h:8786")
    with pytest.raises(StudyError, match=r"^cluster\.adapt: minimum \(4\)"):
        with_overrides(base, adapt_min=4)
    with pytest.raises(StudyError, match=r"^cluster\.adapt: not an option of the 'address'"):
        with_overrides(base, backend="address")


@pytest.mark.unit
def test_search_run_rejects_a_bad_cluster_flag_before_anything_starts(
    tmp_path: Path, write_study: Callable[..., Path]
) -> None:
    study = write_study()
    journal = tmp_path / "j.log"
    code, _, err = run_cli("run", str(study), "--storage", str(journal), "--no-progress",
                           "--backend", "slurm")
    assert code == 2
    assert "cluster.memory: required for the 'slurm' backend" in err
    code, _, err = run_cli("run", str(study), "--storage", str(journal), "--no-progress",
                           "--adapt-min", "3", "--adapt-max", "2")
    assert code == 2
    assert "cluster.adapt: minimum (3) must not exceed maximum (2)" in err


@pytest.mark.unit
def test_slots_must_hold_the_largest_trial() -> None:
    opts = _cluster({"backend": "slurm", "slots_per_worker": 2, "memory": "8GB",
                     "scheduler_host": "127.0.0.1"})
    with pytest.raises(StudyError, match=r"^cluster\.slots_per_worker: 2 MPI slots cannot hold"):
        plan_cluster(opts, concurrency=1, max_ranks=4)


# --- slurm and pbs: the job script, nothing submitted ------------------------------------------


SLURM = {
    "backend": "slurm", "queue": "gpu", "account": "proj42", "walltime": "02:00:00",
    "memory": "16GB", "slots_per_worker": 4, "cpus_per_slot": 2, "nodes": 2,
    "job_extra_directives": ["--exclusive"], "job_script_prologue": ["module load mpi"],
    "python": "/opt/venv/bin/python", "scheduler_host": "127.0.0.1",
    "adapt": {"minimum": 0, "maximum": 3},
}  # fmt: skip


def test_slurm_job_script_asks_for_one_job_per_trial_with_all_its_ranks() -> None:
    plan = plan_cluster(_cluster(SLURM), concurrency=2, max_ranks=4, study_name="clu")
    assert plan.factory == "dask_jobqueue:SLURMCluster"
    with plan.start() as cluster:  # adapt(0, 3): nothing to run, so no job is submitted
        script = cluster.job_script()
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        assert cluster.scheduler_spec["options"]["dashboard"] is False
        assert _http_hosts(cluster.scheduler) == {"127.0.0.1"}
        assert len(cluster.workers) == 0
    lines = script.splitlines()
    for line in ["#SBATCH -p gpu", "#SBATCH -A proj42", "#SBATCH -t 02:00:00",
                 "#SBATCH --ntasks=4", "#SBATCH --cpus-per-task=2", "#SBATCH --nodes=2",
                 "#SBATCH --exclusive", "#SBATCH --mem=15G", "module load mpi"]:
        assert line in lines, (line, script)
    assert "#SBATCH -n 1" not in lines  # jobqueue's one-task header is gone
    assert sum(line.startswith("#SBATCH --cpus-per-task") for line in lines) == 1
    worker = next(line for line in lines if "distributed.cli.dask_worker" in line)
    assert worker.startswith("/opt/venv/bin/python -m distributed.cli.dask_worker tcp://127.0.0.1:")
    assert f"--resources {MPI}=4" in worker
    assert "--nthreads 1" in worker and "--nworkers" not in worker  # one worker per job
    # A process name without spaces, found by SLURM's proctrack/linuxproc (search/clusters/_proctitle.py).
    assert "--preload search.clusters._proctitle" in worker


def test_pbs_job_script_selects_chunks_with_mpiprocs() -> None:
    table = {**SLURM, "backend": "pbs", "queue": "workq"}
    plan = plan_cluster(_cluster(table), concurrency=1, max_ranks=4)
    assert plan.factory == "dask_jobqueue:PBSCluster"
    cluster = plan.cluster_class()(**plan.kwargs)
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    lines = script.splitlines()
    for line in ["#PBS -q workq", "#PBS -A proj42", "#PBS -l walltime=02:00:00",
                 "#PBS -l select=2:ncpus=4:mpiprocs=2:mem=16GB", "#PBS --exclusive"]:
        assert line in lines, (line, script)
    assert f"--resources {MPI}=4" in script and "--nthreads 1" in script


def test_sge_job_script_asks_the_parallel_environment_for_the_trials_ranks() -> None:
    table = {**SLURM, "backend": "sge", "queue": "all.q", "resource_spec": "h_vmem=4G",
             "cpus_per_slot": 2}
    table.pop("nodes")  # one host per job: the parallel environment places the slots
    plan = plan_cluster(_cluster(table), concurrency=1, max_ranks=4)
    assert plan.factory == "dask_jobqueue:SGECluster"
    cluster = plan.cluster_class()(**plan.kwargs)
    try:
        lines = cluster.job_script().splitlines()
    finally:
        cluster.close()
    for line in ["#$ -q all.q", "#$ -P proj42", "#$ -l h_rt=02:00:00", "#$ -l h_vmem=4G",
                 "#$ -pe smp 8", "#$ -S /bin/bash", "#$ -V", "#$ --exclusive"]:
        assert line in lines, (line, lines)
    worker = next(line for line in lines if "distributed.cli.dask_worker" in line)
    assert f"--resources {MPI}=4" in worker and "--nthreads 1" in worker
    assert "--death-timeout 20" in worker  # the bound on a killed driver's orphans
    opts = _cluster({**table, "parallel_environment": "mpi"})
    assert "-pe mpi 8" in plan_cluster(opts, concurrency=1, max_ranks=4).kwargs[
        "job_extra_directives"]
    with pytest.raises(StudyError, match=r"^cluster\.nodes: not an option of the 'sge'"):
        _cluster({**table, "nodes": 2})


@pytest.mark.unit
def test_jobqueue_backends_need_memory_and_a_reachable_scheduler_host() -> None:
    opts = _cluster({"backend": "slurm", "memory": "8GB"})
    with pytest.raises(StudyError, match=r"^cluster\.scheduler_host: required"):
        plan_cluster(opts, concurrency=1, max_ranks=1)
    opts = _cluster({"backend": "pbs", "memory": "8GB", "nodes": 3, "slots_per_worker": 4,
                     "interface": "ib0"})
    with pytest.raises(StudyError, match=r"^cluster\.nodes: 4 MPI slots per job do not split"):
        plan_cluster(opts, concurrency=1, max_ranks=1)


# --- kubernetes: the DaskCluster resource, no API server contacted ----------------------------------


@pytest.mark.unit
def test_kubernetes_spec_gives_each_pod_one_trial_and_its_slots() -> None:
    table = {"backend": "kubernetes", "image": "ghcr.io/me/detol:1", "namespace": "ml",
             "slots_per_worker": 4, "cpus_per_slot": 2, "adapt": {"minimum": 1, "maximum": 6},
             "env": {"OMP_NUM_THREADS": "2"}}
    plan = plan_cluster(_cluster(table), concurrency=2, max_ranks=2, study_name="clu")
    assert plan.cluster_class().__name__ == "KubeCluster"
    assert plan.kwargs["namespace"] == "ml" and plan.adapt_bounds_only
    spec = plan.kwargs["custom_cluster_spec"]
    assert spec["kind"] == "DaskCluster"
    worker_spec = spec["spec"]["worker"]
    assert worker_spec["replicas"] == 1  # adapt.minimum
    (worker,) = worker_spec["spec"]["containers"]
    assert worker["image"] == "ghcr.io/me/detol:1"
    assert worker["args"][-2:] == ["--nthreads", "1"]
    assert worker["resources"]["requests"]["cpu"] == "8"
    env = {e["name"]: e["value"] for e in worker["env"]}
    assert env["OMP_NUM_THREADS"] == "2"
    (scheduler,) = spec["spec"]["scheduler"]["spec"]["containers"]
    sched_env = {e["name"]: e["value"] for e in scheduler["env"]}
    # Dask in the scheduler pod reads the trial duration estimate from its environment.
    parsed = dask.config.collect_env(sched_env)
    durations = dask.config.get("distributed.scheduler.default-task-durations", config=parsed)
    assert durations == trial_task_durations("clu")
    assert durations["trial-clu"] == "1h"
    worker_config = dask.config.collect_env(env)
    assert dask.config.get("distributed.worker.resources", config=worker_config) == {MPI: 4}


# --- cloud: keyword arguments for the provider class; constructing it is deferred ------------------


@pytest.mark.unit
def test_cloud_ec2_kwargs_fit_the_provider_class() -> None:
    table = {"backend": "cloud", "provider": "ec2", "instance_type": "c6i.4xlarge",
             "region": "eu-west-1", "image": "ghcr.io/me/detol:1", "slots_per_worker": 8,
             "adapt": {"maximum": 4}, "provider_options": {"spot": True}}
    plan = plan_cluster(_cluster(table), concurrency=4, max_ranks=8)
    kw = plan.kwargs
    assert plan.factory == "dask_cloudprovider.aws:EC2Cluster"
    assert (kw["instance_type"], kw["region"], kw["docker_image"]) == (
        "c6i.4xlarge", "eu-west-1", "ghcr.io/me/detol:1")
    assert kw["worker_options"] == {"nthreads": 1, "resources": {MPI: 8}}
    assert kw["n_workers"] == 0 and kw["spot"] is True
    assert kw["scheduler_options"] == {"dashboard": False}
    assert "DASK_DISTRIBUTED__SCHEDULER__DEFAULT_TASK_DURATIONS" in kw["env_vars"]
    assert kw["env_vars"]["DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES"] == "0"
    # Building the plan contacted nothing; only start() constructs EC2Cluster (and calls AWS).
    cls = plan.cluster_class()
    assert cls.__name__ == "EC2Cluster"
    names = set()
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            names |= set(inspect.signature(klass.__init__).parameters)
    assert set(kw) - {"spot"} <= names, set(kw) - names


@pytest.mark.unit
@pytest.mark.parametrize(("provider", "factory", "type_key", "region_key"), [
    ("gcp", "dask_cloudprovider.gcp:GCPCluster", "machine_type", "zone"),
    ("azure", "dask_cloudprovider.azure:AzureVMCluster", "vm_size", "location"),
])
def test_cloud_providers_map_generic_options(provider: str, factory: str, type_key: str,
                                             region_key: str) -> None:
    table = {"backend": "cloud", "provider": provider, "instance_type": "big", "region": "r1"}
    plan = plan_cluster(_cluster(table), concurrency=1, max_ranks=1)
    assert plan.factory == factory
    assert (plan.kwargs[type_key], plan.kwargs[region_key]) == ("big", "r1")


@pytest.mark.unit
def test_missing_backend_package_is_a_clear_study_error() -> None:
    plan = ClusterPlan("cloud", "dask_cloudprovider.nowhere:Cluster", {}, 1, pip_extra="cloud")
    with pytest.raises(StudyError, match=r"^cluster\.backend: the 'cloud' backend needs "
                                         r"dask_cloudprovider \(pip install 'detol\[cloud\]'\)"):
        plan.cluster_class()


# --- local: localhost by default, adaptive for real ----------------------------------------------


def test_local_scheduler_binds_localhost_without_a_dashboard() -> None:
    with open_client(_cluster({"workers": 1}), concurrency=1, max_ranks=1,
                     launcher="mpiexec -n {ranks}") as client:
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        assert client.cluster.scheduler_spec["options"]["dashboard"] is False
        # Its HTTP endpoints (health, metrics) listen on localhost only, and not on the
        # dashboard's well-known port: a second study must not collide with the first.
        assert _http_hosts(client.cluster.scheduler) == {"127.0.0.1"}
        assert client.cluster.scheduler.http_server.port != 8787
        info = client.scheduler_info()
        (worker,) = info["workers"].values()
        assert set(worker["resources"]) == {MPI} and worker["resources"][MPI] >= 1
        assert worker["nthreads"] == 1
    with open_client(_cluster({"workers": 1, "dashboard": "127.0.0.1:0"}), concurrency=1,
                     max_ranks=1, launcher="mpiexec -n {ranks}") as client:
        assert client.cluster.scheduler_spec["options"]["dashboard"] is True
        assert _http_hosts(client.cluster.scheduler) == {"127.0.0.1"}
        port = client.cluster.scheduler.http_server.port
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10).status == 200


OBJECTIVE = '''
import time

def objective(params):
    time.sleep(params["seconds"])
    return params["seconds"]
'''

ADAPT_STUDY = '''
name = "adaptive"
objective = "slowobj:objective"
metric = "seconds"
direction = "minimize"

[budget]
trials = 4
concurrency = 2

[strategy]
name = "random"
seed = 1

[cluster]
adapt = { minimum = 0, maximum = 2, interval = 0.25, wait_count = 2 }

[space]
seconds = { type = "float", low = 0.5, high = 8.0 }
'''


def test_adaptive_local_cluster_grows_with_the_queue_and_retires_idle_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "slowobj.py").write_text(OBJECTIVE)
    monkeypatch.chdir(tmp_path)  # the driver ships its cwd to workers for "slowobj:objective"
    sf = parse_study(tomllib.loads(ADAPT_STUDY))
    url = str(tmp_path / "adaptive.journal")
    study = open_study(sf, open_storage(url))
    # Two short trials, then a short one beside a long one: the short one's worker goes idle and
    # is retired while the long trial still runs on the other worker.
    for seconds in (1.0, 1.0, 0.5, 7.0):
        study.enqueue_trial({"seconds": seconds})
    samples: list[tuple[float, int, int]] = []  # (time, workers, trials running)
    stop = threading.Event()
    with open_client(sf.cluster, concurrency=2, max_ranks=1, launcher="mpiexec -n {ranks}",
                     study_name=sf.name) as client:
        scheduler = client.cluster.scheduler
        assert not scheduler.workers  # adapt.minimum = 0: nothing runs before trials queue

        def watch() -> None:
            while not stop.is_set():
                running = sum(len(ws.processing) for ws in list(scheduler.workers.values()))
                samples.append((time.monotonic(), len(scheduler.workers), running))
                time.sleep(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        counts = Driver(sf, study, client, storage_url=url).run(trials=4, concurrency=2,
                                                                timeout=None)
        gc.collect()  # the driver's last futures: their results pin data on a worker
        deadline = time.monotonic() + 30
        while scheduler.workers and time.monotonic() < deadline:
            time.sleep(0.1)
        stop.set()
        watcher.join()
        events = [e for _, e in scheduler.get_events("all")]
        assert not scheduler.workers, "idle workers were not retired down to adapt.minimum"
    trials = optuna.load_study(study_name="adaptive", storage=open_storage(url)).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4, [t.user_attrs for t in trials]
    assert counts.complete == 4 and counts.failed == 0
    added = [e["worker"] for e in events if e.get("action") == "add-worker"]
    removed = [e["worker"] for e in events if e.get("action") == "remove-worker"]
    assert len(set(added)) >= 2 and set(removed) == set(added)
    assert max(w for _, w, _ in samples) == 2  # two trials queued: two workers, never more
    # A worker was retired while the long trial still ran on the other one.
    first_full = next(i for i, (_, w, _) in enumerate(samples) if w == 2)
    assert any(w == 1 and r == 1 for _, w, r in samples[first_full:]), samples[::10]


def test_a_worker_killed_while_the_local_cluster_starts_is_started_again(tmp_path: Path) -> None:
    """Found by the crash soak: a Dask worker SIGKILLed while the local cluster started made
    ``search run`` die with Dask's 'Nanny failed to start' traceback. The first worker process
    to start kills itself (a preload that claims a file atomically); the cluster still comes up
    with every worker."""
    import dataclasses

    claim = tmp_path / "claimed"
    preload = tmp_path / "die_once.py"
    preload.write_text(
        "import os, signal\n"
        "try:\n"
        f"    os.close(os.open({str(claim)!r}, os.O_CREAT | os.O_EXCL))\n"
        "except FileExistsError:\n"
        "    pass\n"
        "else:\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n")
    plan = plan_cluster(_cluster({}), concurrency=2, max_ranks=1)
    plan = dataclasses.replace(plan, kwargs={**plan.kwargs,
                                             "preload": [*plan.kwargs["preload"], str(preload)]})
    with plan.start() as cluster:
        assert claim.exists()  # a worker did die
        assert len(cluster.scheduler_info["workers"]) == 2
