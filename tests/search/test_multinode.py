"""Trials whose ranks span nodes, on a real 3-node SLURM of network namespaces (``.ci/nodes.sh``:
each node its own hostname, address and slurmd; the filesystem shared, as on a cluster): the
user's study file as it ships, MPI traffic that really crosses the nodes' links, the same weights
as on one node, and node faults in the middle of a trial (benchmarks/node_faults.py's own hands
and checks: one rule, one place).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import optuna
import pytest
import torch
from optuna.trial import TrialState

from tests.cli_helpers import search_command
from tests.search.conftest import NODES_CONF
from training.contract import TrialSpec, open_storage
from training.launch import run_trial

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks")]

import node_faults  # noqa: E402  (benchmarks/node_faults.py)
from _common import soak  # noqa: E402

pytestmark = [pytest.mark.mpi, pytest.mark.multinode, pytest.mark.usefixtures("nodes")]


@pytest.fixture(autouse=True)
def _healed_and_empty(nodes_env: dict[str, str]) -> None:
    """Every test starts on a whole cluster (no fault left by a failed test, no job)."""
    subprocess.run(["scancel", "--user", "root"], env=nodes_env, timeout=30, check=False)
    for node in node_faults.all_nodes():
        node_faults.nodes_sh("heal", node)
    assert soak.wait_until(lambda: not node_faults.batch_jobs(), 30)


# The launcher environment of the shipped study (UCX over TCP, the nodes' eth0 only).
_STUDY_ENV = tomllib.loads((ROOT / "studies" / "two-nodes.toml").read_text())["launcher"]["env"]


def _veth_bytes() -> dict[str, int]:
    """Bytes each node has sent (received on the host end of its veth)."""
    return {n: int(Path(f"/sys/class/net/dtlv{n[7:]}/statistics/rx_bytes").read_text())
            for n in node_faults.all_nodes()}


def _run(study: Path, storage: str, cwd: Path, env: dict[str, str], *args: str,
         timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*search_command(), "run", str(study), "--storage", storage,
                           "--no-progress", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_two_node_study_runs_its_ranks_across_nodes_and_the_network(
        tmp_path: Path, nodes_env: dict[str, str]) -> None:
    # The study file as it ships; its warm pool (one MPI job over both nodes) serves both trials.
    before = _veth_bytes()
    proc = _run(ROOT / "studies" / "two-nodes.toml", "s.journal", tmp_path, nodes_env,
                "--trials", "2")
    sent = {n: b - before[n] for n, b in _veth_bytes().items()}
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = optuna.load_study(study_name="two-nodes",
                               storage=open_storage(str(tmp_path / "s.journal"))).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2, (
        [t.user_attrs.get("exit_reason") for t in trials], proc.stdout)
    hosts = [t.user_attrs["hosts"] for t in trials]
    assert all(len(h) == 2 and all(n.startswith("detol-n") for n in h) for h in hosts), hosts
    assert trials[1].user_attrs["wall_time_s"] < trials[0].user_attrs["wall_time_s"] / 2  # warm
    # Sync SGD: each step's allreduce needs every node's share of the gradients to leave it.
    gradient = sum(t.user_attrs["n_params"] * 4 * t.user_attrs["steps_per_rank"][0]
                   for t in trials)
    for node in hosts[0]:
        assert sent[node] >= gradient, (node, sent, gradient)
    # Where the ranks ran is shown where a user looks.
    status = subprocess.run([*search_command(), "status", "two-nodes", "--storage", "s.journal"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60).stdout
    assert "2 across several" in status and hosts[0][0] in status, status
    assert ",".join(hosts[0]) in proc.stdout  # search run's best table


def _train(tmp: Path, name: str, launcher: str, ranks: int, hosts: int,
           **config: object) -> dict[str, torch.Tensor]:
    """Train once through the cold launcher a Dask worker uses (``run_trial``: its launch
    retries, ``SLURM_KILL_BAD_EXIT``, its timeout) and return the weights."""
    spec = TrialSpec(
        config={"dataset": "digits", "epochs": 2, "batch_size": 64, "hidden": 32, "ranks": ranks,
                "seed": 5, "optimizer": "sgd", "momentum": 0.9, **config},
        launcher=launcher, env={"SLURM_CONF": NODES_CONF, **_STUDY_ENV},
        weights_path=str(tmp / f"{name}.pt"), timeout_s=180, report=False)
    result = run_trial(spec)
    assert result["state"] == "complete" and result["values"]["val_accuracy"] > 0.6, (
        result["exit_reason"], result.get("log", "")[-6000:])
    assert len(result["hosts"]) == hosts, result["hosts"]
    return torch.load(spec.weights_path)


SRUN_2_NODES = "srun -N 2 --mpi=pmi2 -n {ranks}"


@pytest.mark.parametrize("algorithm", [{"algorithm": "asgd"},
                                       {"algorithm": "localsgd", "local_steps": 4}],
                         ids=["asgd", "localsgd"])
def test_asgd_and_local_sgd_train_across_nodes(tmp_path: Path, nodes_env: dict[str, str],
                                               algorithm: dict[str, object]) -> None:
    # ASGD's one-sided window (MPI RMA) and local SGD's averaging between two hosts.
    _train(tmp_path, str(algorithm["algorithm"]), SRUN_2_NODES, 2, 2, **algorithm)


def test_sync_sgd_on_two_nodes_gives_the_weights_of_one_node(
        tmp_path: Path, nodes_env: dict[str, str]) -> None:
    # 2 nodes x 2 ranks through srun (UCX over TCP between the nodes) against 4 ranks on this
    # machine: the same global batches, the same sums; only the order of the float additions
    # inside MPI's allreduce may differ.
    across = _train(tmp_path, "nodes", SRUN_2_NODES, 4, 2)
    here = _train(tmp_path, "here", "mpiexec -n {ranks}", 4, 1)
    assert across.keys() == here.keys()
    worst = max(float((across[k] - here[k]).abs().max()) for k in across)
    assert worst < 1e-4, worst
    assert any(float((across[k] - _init(k, here)).abs().max()) > 1e-2 for k in here)


# A rank whose heap holds freed 4 KB blocks of dense bytes before MPI_Init, as a Python process
# leaves them: with a plain ``from mpi4py import MPI`` the bytes after its UCX address made PMI-1
# lines over SLURM's 1024-byte read, and every launch failed or hung (training/jobs/_mpi_start.py).
_DIRTY_HEAP_START = """
import sys
blocks = [(b"\\xab\\xcd" * 2100)[:4063] for _ in range(400)]
kept = blocks[1::2]
del blocks[0::2]
from training.jobs._mpi_start import start_mpi
MPI = start_mpi()
MPI.COMM_WORLD.Barrier()
print(f"through MPI_Init: {MPI.COMM_WORLD.rank} of {MPI.COMM_WORLD.size}", flush=True)
"""


@pytest.mark.parametrize("ranks", [2, 4])
def test_a_rank_whose_heap_held_dense_data_gets_through_mpi_init_across_nodes(
        tmp_path: Path, nodes_env: dict[str, str], ranks: int) -> None:
    script = tmp_path / "start.py"
    script.write_text(_DIRTY_HEAP_START)
    proc = subprocess.run(["srun", "-N", "2", "--mpi=pmi2", "-n", str(ranks), sys.executable,
                           str(script)], env={**nodes_env, **_STUDY_ENV}, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "value not properly terminated" not in out, out[-3000:]
    assert sorted(proc.stdout.split("\n")[:-1]) == sorted(
        f"through MPI_Init: {r} of {ranks}" for r in range(ranks)), out[-3000:]


def _init(key: str, trained: dict[str, torch.Tensor]) -> torch.Tensor:
    """The weight ``key`` as the trainer initialises it (seed 5): training moved it."""
    from training.models._mlp import build_mlp

    torch.manual_seed(5)
    model = build_mlp(64, 10, hidden=32, layers=2, activation="relu", dropout=0.0)
    return model.state_dict()[key] if key in model.state_dict() else trained[key]


def _fault_mid_trial(tmp_path: Path, nodes_env: dict[str, str], kind: str, pick: int,
                     hold_s: float) -> tuple[list[optuna.trial.FrozenTrial], dict, str]:
    """The soak's study with one trial; ``kind`` strikes node ``pick`` of its job once the trial
    has reported an epoch; the study's trials, the fault and search run's output."""
    study = node_faults.study_file(tmp_path, trials=1)
    url = str(tmp_path / "s.journal")
    tag = f"test-{kind}"
    proc = subprocess.Popen([*search_command(), "run", str(study), "--storage", url,
                             "--no-progress"], cwd=tmp_path,
                            env={**nodes_env, "DETOL_SOAK_TAG": tag},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert soak.wait_until(lambda: node_faults.running_trial(url) is not None, 120)
        busy = node_faults.job_nodes()
        assert len(busy) == 2, busy
        at = time.time()
        node_faults.nodes_sh(kind, busy[pick])
        time.sleep(hold_s)
        node_faults.nodes_sh("heal", busy[pick])
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    # Nothing of the study is left on any node, nor any batch job, within 30 s.
    assert soak.wait_until(lambda: not node_faults.leftovers(tag)
                           and not node_faults.batch_jobs(), 30), node_faults.leftovers(tag)
    trials = soak.read_trials(url, node_faults.NAME) or []
    late, accepted = node_faults.late_writes(Path(url))
    assert accepted == 0
    fault = {"at": at, "node": busy[pick], "job_nodes": busy, "late_writes": late}
    return trials, fault, out


def _failed_requeued_and_finished_elsewhere(trials: list, fault: dict,
                                            *reasons: str) -> float:
    # A retry whose job failed MPI_Init on every launch (seen after a freeze and after a crash,
    # with the PMI lines garbled as training/jobs/_mpi_start.py now prevents) is, on a batch
    # worker, a lost trial re-queued in turn (tests/search/test_start_failures.py): once here.
    assert len(trials) in (2, 3), [(t.state, t.user_attrs.get("exit_reason")) for t in trials]
    first, *restarts, retry = trials
    assert first.state == TrialState.FAIL and first.values is None
    assert first.user_attrs["exit_reason"].startswith(reasons), first.user_attrs["exit_reason"]
    assert "parameters re-queued" in first.user_attrs["exit_reason"]
    for again in restarts:
        reason = again.user_attrs["exit_reason"]
        assert again.state == TrialState.FAIL and again.params == first.params, reason
        assert reason.startswith("MPI job failed to start") and "parameters re-queued" in reason
        assert again.user_attrs["detol:retry_of"] == first.number
    assert retry.state == TrialState.COMPLETE and retry.params == first.params
    assert retry.user_attrs["detol:retry_of"] == (restarts[-1] if restarts else first).number
    assert not soak.final_problems(trials, budget=1, max_retries=node_faults.MAX_RETRIES)
    return first.datetime_complete.timestamp() - fault["at"]


def test_a_node_crash_mid_trial_fails_the_trial_which_runs_again_elsewhere(
        tmp_path: Path, nodes_env: dict[str, str]) -> None:
    # Down for 30 s, as a rebooting node is: longer than SLURM takes to notice (SlurmdTimeout).
    trials, fault, out = _fault_mid_trial(tmp_path, nodes_env, "crash", pick=1, hold_s=30.0)
    # SLURM sets the node DOWN and ends the job: srun says so (the trial is not to blame), or
    # the end of the job took the Dask worker on the other node first (its trial: lost).
    waited = _failed_requeued_and_finished_elsewhere(
        trials, fault, f"node lost: srun: error: Node failure on {fault['node']}",
        "Dask worker lost")
    print(f"crash: the trial failed {waited:.1f} s after the fault")  # pytest -s shows it
    assert waited < 60, (waited, out)  # SLURM's SlurmdTimeout (10 s) and its ping cycle


# ~120-140 s, most of it the fault's 80 s: in the slow tier (default run time). Its parts run by
# default: a lost worker's trial re-queued (test_slurm.py, the crash above), reports into a trial
# failed elsewhere refused (tests/training/test_stale_trial.py); benchmarks/node_faults.py
# freezes nodes in its soak.
@pytest.mark.slow
def test_a_frozen_node_that_wakes_after_its_trial_was_requeued_changes_nothing(
        tmp_path: Path, nodes_env: dict[str, str]) -> None:
    # The first node holds rank 0 and the Dask worker: frozen, only the heartbeat tells (Dask's
    # worker-ttl), and it wakes after its trial has been failed and re-queued.
    trials, fault, out = _fault_mid_trial(tmp_path, nodes_env, "freeze", pick=0, hold_s=80.0)
    waited = _failed_requeued_and_finished_elsewhere(trials, fault, "Dask worker lost")
    print(f"freeze: the trial failed {waited:.1f} s after the fault")  # pytest -s shows it
    assert waited < 75, (waited, out)  # worker-ttl 15 s, then its nanny asked for 30 s
    assert trials[0].intermediate_values  # what it reported before it froze stays


def test_resize_widens_a_trial_from_one_node_to_two_in_place(
        tmp_path: Path, nodes_env: dict[str, str]) -> None:
    # The warm pool holds 4 ranks over both nodes (srun places 2 on each, in rank order); a
    # 2-rank segment runs on the pool's first 2 ranks (one node), its promoted continuation on
    # all 4: from one node to two, in the same pool, restored from its rank 0's memory.
    text = (ROOT / "studies" / "two-nodes.toml").read_text()
    text = text.replace("ranks = 4\n", "ranks = 2\n").replace("epochs = 3\n", "epochs = 4\n")
    text = text.replace("trials = 4\n", "trials = 2\n")
    text += ("[pruner]\nname = \"asha\"\npromote = true\nmin_epochs = 2\nreduction_factor = 2\n"
             "[resize]\nfactor = 2\nmax_ranks = 4\n")
    study = tmp_path / "wide.toml"
    study.write_text(text)
    proc = _run(study, "s.journal", tmp_path, nodes_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = {t.number: t for t in optuna.load_study(
        study_name="two-nodes", storage=open_storage(str(tmp_path / "s.journal"))).trials}
    wide = [t for t in trials.values() if t.user_attrs.get("ranks") == 4]
    assert wide, [(t.number, t.state.name, t.user_attrs.get("ranks")) for t in trials.values()]
    for t in wide:
        parent = trials[t.user_attrs["detol:resume_of"]]
        assert len(parent.user_attrs["hosts"]) == 1 and parent.user_attrs["ranks"] == 2
        assert len(t.user_attrs["hosts"]) == 2
        assert t.user_attrs["restored_from"] == "memory"  # in place: no new job, no file read


@pytest.mark.parametrize("kind", ["journal", "postgresql"])
def test_drivers_on_two_nodes_share_one_study_exactly(tmp_path: Path, kind: str,
                                                      nodes_env: dict[str, str]) -> None:
    # Two `search run` on two hosts at once: a journal on the shared filesystem (its lock file
    # is the one lock both take), or PostgreSQL over the nodes' network.
    from tests.pg_server import throwaway_postgres
    from tests.search.test_two_drivers import BUDGET, _study

    with contextlib.ExitStack() as stack:
        if kind == "journal":
            storage = str(tmp_path / "s.journal")
        else:
            storage = stack.enter_context(throwaway_postgres(host=node_faults.LOGIN)).url
        study = _study(tmp_path, "hosts")
        env = {k: v for k, v in nodes_env.items() if k != "DETOL_STORAGE"}
        if kind == "postgresql":  # created once, so that neither driver races to create it
            subprocess.run([*search_command(), "run", str(study), "--storage", storage,
                            "--no-progress", "--trials", "1"], cwd=tmp_path, env=env,
                           check=True, capture_output=True, timeout=180)
        drivers = [subprocess.Popen([*node_faults.on_node(node), *search_command(), "run",
                                     str(study), "--storage", storage, "--no-progress"],
                                    cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT)
                   for node in ("detol-n2", "detol-n3")]
        outputs = [d.communicate(timeout=240)[0] for d in drivers]
        assert [d.returncode for d in drivers] == [0, 0], outputs
        trials = optuna.load_study(study_name="hosts", storage=open_storage(storage)).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * BUDGET, outputs
    first = 1 if kind == "postgresql" else 0
    # Claimed by drivers on the nodes (the first PostgreSQL trial: the one that made the study).
    hosts = {t.user_attrs["detol:driver"].split(":")[0] for t in trials if t.number >= first}
    assert hosts and hosts <= {"detol-n2", "detol-n3"}, hosts
    said = [int(line.split()[1]) for out in outputs for line in out.splitlines()
            if " complete " in line and line.lstrip().startswith("trial")]
    assert sorted(said) == list(range(first, BUDGET)), outputs  # each told once, by one host
