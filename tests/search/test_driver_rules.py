"""The driver's bookkeeping for MPI trials, in one process (issue 33: only real studies, in
subprocesses, drove it, where no slip of it could show): what it asks Dask for (the trial's
spec, its key and ranks, never a Dask retry), what it records when a trial ends (the value, the
epoch a trial paused at, the lineage's work), how a failure is told (its log beside the storage,
a lost worker re-queued, a lost pause asked again). The client is a stand-in that takes
submissions without running them (as in test_pool_affinity.py): a job's own outcome is what
the tests hand to the driver."""

from __future__ import annotations

import os
import random
import socket
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from search import parse_study
from search.backends._dask import run_trial_on_worker
from search.clusters._base import MPI
from search.driver._driver import Driver
from search.driver._outcomes import RunCounts, Running
from search.driver._resize import WIDTH_ATTR
from search.driver._study import DRIVER_ATTR, RESUME_FROM_ATTR, open_study
from search.driver._warm_start import TRANSFERRED_FROM
from search.pruners._promotion import (
    LINEAGE_ATTR,
    LINEAGE_EPOCHS_ATTR,
    LINEAGE_RANK_SECONDS_ATTR,
    LINEAGE_WALL_ATTR,
    PAUSED_ATTR,
    RESUME_OF_ATTR,
)
from training.contract import CHECKPOINT_ATTR, TrainConfig, TrialSpec

SINGLE_NODE = {"UCX_TLS": "self,sm", "UCX_NET_DEVICES": "lo", "DETOL_SINGLE_NODE": "1"}


class _Client:
    """Takes submissions and runs nothing: what the driver asks Dask for (a trial's spec in
    ``submitted`` in its JSON form, as sent in ``sent``)."""

    def __init__(self) -> None:
        self.submitted: list[tuple[Any, tuple, dict]] = []
        self.sent: list[tuple] = []

    def submit(self, func: Any, *args: Any, **kwargs: Any) -> Future:
        self.sent.append(args)
        args = tuple(a.to_json() if isinstance(a, TrialSpec) else a for a in args)
        self.submitted.append((func, args, kwargs))
        return Future()


def _driver(tmp_path: Path, resize: dict | None = None,
            **options: Any) -> tuple[Driver, list[tuple]]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sf = parse_study({
        "name": "d", "budget": {"trials": 4, "max_retries": 1},
        "pruner": {"name": "asha", "promote": True, "min_epochs": 1, "reduction_factor": 2},
        "training": {"dataset": "digits", "epochs": 4, "ranks": 2},
        "space": {"lr": {"type": "float", "low": 0.001, "high": 0.1}},
        **({"resize": resize} if resize else {})})
    url = str(tmp_path / "s.journal")  # names the storage: logs go beside it
    study = open_study(sf, optuna.storages.InMemoryStorage(), url=url)
    events: list[tuple] = []

    def on_event(kind: str, trial: Any, counts: RunCounts, result: Any) -> None:
        events.append((kind, trial.number if trial is not None else None, result))

    return Driver(sf, study, _Client(), storage_url=url, on_event=on_event,
                  **options), events


@pytest.mark.unit
def test_an_mpi_trial_is_submitted_with_its_spec_and_no_dask_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver, events = _driver(tmp_path, single_node=True)
    validations = []
    real = TrainConfig.model_validate.__func__  # type: ignore[attr-defined]

    def counted(cls: type, *args: Any, **kwargs: Any) -> Any:
        validations.append(args[0])
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(TrainConfig, "model_validate", classmethod(counted))
    before = time.time()
    future, run = driver._submit(RunCounts())  # noqa: SLF001
    # Validated once: the searched values applied to the study's [training] (with_params); the
    # spec carries that very TrainConfig, not a dump to validate again.
    assert len(validations) == 1, validations
    ((func, (spec,), kwargs),) = driver.client.submitted
    trial = run.trial
    assert func is run_trial_on_worker
    # Passed typed: the configuration the driver validated, not a dict to validate again.
    ((sent,),) = driver.client.sent
    assert isinstance(sent, TrialSpec) and isinstance(sent.config, TrainConfig)
    assert driver.owner == f"{socket.gethostname()}:{os.getpid()}"  # see recover_orphans
    assert kwargs == {"key": f"trial-d-{trial.number}-{driver.task_prefix}", "resources": {MPI: 2},
                      "pure": False, "retries": 0}
    assert spec["config"]["ranks"] == 2 and spec["config"]["lr"] == trial.params["lr"]
    assert spec["config"]["epochs"] == 4 and spec["config"]["dataset"] == "digits"
    assert (spec["objectives"], spec["study_name"], spec["storage_url"]) == (
        ["val_accuracy"], "d", str(tmp_path / "s.journal"))
    trial_id = trial._trial_id  # noqa: SLF001
    assert (spec["trial_id"], spec["trial_number"]) == (trial_id, trial.number)
    assert spec["pruner"] == driver.pruner and spec["report"] is True
    assert spec["pruner"]["factory"] == "search.pruners._promotion:PromotingHalving"
    assert spec["pruner"]["kwargs"]["max_resource"] == 4  # the study's epochs
    assert spec["launcher"] == driver.sf.launcher.command and spec["env"] == SINGLE_NODE
    assert (spec["timeout_s"], spec["warm"], spec["pool_ranks"], spec["resume_from"],
            spec["own_loop"]) == (None, False, None, None, None)
    assert spec["checkpoints"] == {"store": str(tmp_path.resolve() / "detol-artifacts"), "every": 0,
                                   "every_steps": 0, "keep": 2}
    assert before <= spec["ask_time"] <= time.time()
    assert (run.ranks, run.continuation, run.resumed_epoch) == (2, False, 0)
    assert run.carried == {LINEAGE_EPOCHS_ATTR: 0.0, LINEAGE_RANK_SECONDS_ATTR: 0.0,
                           LINEAGE_WALL_ATTR: 0.0}
    attrs = driver.study.trials[trial.number].user_attrs
    assert attrs[WIDTH_ATTR] == 2 and attrs[DRIVER_ATTR] == driver.owner
    assert events == [("started", trial.number, None)]
    future.set_result({})
    assert driver._ended_now(timeout=0.0) == [future]  # noqa: SLF001  its end is reported


@pytest.mark.unit
def test_a_continuation_resumes_from_its_checkpoint_with_its_lineages_work(
        tmp_path: Path) -> None:
    driver, _ = _driver(tmp_path)
    study = driver.study
    parent = study.ask()
    for epoch, value in ((1, 0.5), (2, 0.6), (3, 0.7)):
        parent.report(value, epoch)
    study.tell(parent, state=TrialState.PRUNED)
    study.enqueue_trial({"lr": 0.01}, user_attrs={
        RESUME_OF_ATTR: parent.number, LINEAGE_ATTR: parent.number,
        RESUME_FROM_ATTR: {"id": "ck-2", "epoch": 2, "trial": parent.number},
        LINEAGE_EPOCHS_ATTR: 2, LINEAGE_RANK_SECONDS_ATTR: 5.5, LINEAGE_WALL_ATTR: 3})
    _, run = driver._submit(RunCounts())  # noqa: SLF001
    ((_, (spec,), _),) = driver.client.submitted
    assert spec["resume_from"] == "ck-2" and spec["config"]["lr"] == 0.01
    assert (run.continuation, run.resumed_epoch) == (True, 2)
    assert run.carried == {LINEAGE_EPOCHS_ATTR: 2.0, LINEAGE_RANK_SECONDS_ATTR: 5.5,
                           LINEAGE_WALL_ATTR: 3.0}
    # its curve starts with its parent's, up to the checkpoint's epoch
    assert study.trials[run.trial.number].intermediate_values == {1: 0.5, 2: 0.6}


@pytest.mark.unit
def test_a_warm_start_candidate_queued_twice_runs_once(tmp_path: Path) -> None:
    driver, events = _driver(tmp_path)
    for _ in range(2):
        driver.study.enqueue_trial({"lr": 0.02}, user_attrs={TRANSFERRED_FROM: "src#3"},
                                   skip_if_exists=False)
    counts = RunCounts()
    assert driver._submit(counts) is not None  # noqa: SLF001
    assert driver._submit(counts) is None  # noqa: SLF001
    second = driver.study.trials[1]
    assert second.state is TrialState.FAIL
    assert second.user_attrs["exit_reason"] == (
        "duplicate of trial 0: the warm-start candidate src#3 was queued twice (two drivers "
        "opened the new study at once); not run")
    assert len(driver.client.submitted) == 1 and counts.failed == 0  # not the trial's fault
    assert [e[0] for e in events] == ["started"]


def _ended(driver: Driver, continuation: bool = False, **carried: float) -> Running:
    trial = driver.study.ask()
    trial.suggest_float("lr", 0.001, 0.1)
    return Running(trial, 2, continuation=continuation, carried=dict(carried))


@pytest.mark.unit
def test_a_complete_continuation_adds_its_work_to_its_lineages(tmp_path: Path) -> None:
    driver, events = _driver(tmp_path)
    run = _ended(driver, continuation=True, **{LINEAGE_EPOCHS_ATTR: 2.0,
                                               LINEAGE_RANK_SECONDS_ATTR: 4.0,
                                               LINEAGE_WALL_ATTR: 2.25})
    counts = RunCounts()
    result = {"state": "complete", "values": {"val_accuracy": 0.8}, "epochs_run": 2,
              "rank_seconds": 6.5, "wall_time_s": 3.5, "host": "h1", "flops": None,
              "user_attrs": {"note": "mine"}}
    driver._finish(run, result, counts)  # noqa: SLF001
    t = driver.study.trials[run.trial.number]
    assert t.state is TrialState.COMPLETE and t.value == 0.8
    epochs = t.user_attrs[LINEAGE_EPOCHS_ATTR]
    assert epochs == 4 and isinstance(epochs, int)
    assert t.user_attrs[LINEAGE_RANK_SECONDS_ATTR] == 10.5
    assert t.user_attrs[LINEAGE_WALL_ATTR] == 5.75
    assert t.user_attrs["host"] == "h1" and t.user_attrs["note"] == "mine"
    assert "flops" not in t.user_attrs and t.user_attrs["epochs_run"] == 2
    assert (counts.complete, counts.continuations, counts.pruned, counts.failed) == (1, 1, 0, 0)
    assert events == [("complete", run.trial.number, result)]


@pytest.mark.unit
@pytest.mark.parametrize(("start", "paused_at"), [(3, 4), (None, 2)])
def test_a_paused_trial_records_the_epoch_it_stopped_at(tmp_path: Path, start: int | None,
                                                        paused_at: int) -> None:
    driver, events = _driver(tmp_path)
    run = _ended(driver)
    counts = RunCounts()
    result = {"state": "paused", "start_epoch": start, "epochs_run": 2, "rank_seconds": None,
              "wall_time_s": 1.0}
    driver._finish(run, result, counts)  # noqa: SLF001
    t = driver.study.trials[run.trial.number]
    assert t.state is TrialState.PRUNED and t.user_attrs[PAUSED_ATTR] == paused_at
    assert t.user_attrs[LINEAGE_RANK_SECONDS_ATTR] == 0.0  # none measured: nothing added
    assert (counts.paused, counts.pruned, counts.continuations, counts.complete) == (1, 1, 0, 0)
    assert events == [("pruned", run.trial.number, result)]
    pruned = _ended(driver, continuation=True)
    driver._finish(pruned, {"state": "pruned", "epochs_run": 1}, counts)  # noqa: SLF001
    t = driver.study.trials[pruned.trial.number]
    assert t.state is TrialState.PRUNED and PAUSED_ATTR not in t.user_attrs
    assert (counts.paused, counts.pruned, counts.continuations) == (1, 2, 1)


@pytest.mark.unit
def test_a_complete_job_without_a_finite_value_fails_with_its_log_beside_the_storage(
        tmp_path: Path) -> None:
    driver, events = _driver(tmp_path)
    run = _ended(driver)
    counts = RunCounts()
    result = {"state": "complete", "values": {"val_accuracy": float("nan")}, "log": "the log"}
    driver._finish(run, result, counts)  # noqa: SLF001
    t = driver.study.trials[run.trial.number]
    log = tmp_path.resolve() / "detol-logs" / "d" / f"trial-{run.trial.number}.log"
    assert t.state is TrialState.FAIL and log.read_text() == "the log"
    assert t.user_attrs["exit_reason"] == "no finite value for ['val_accuracy']"
    assert t.user_attrs["log_path"] == str(log)
    assert counts.failed == 1 and counts.failures == [
        f"trial {run.trial.number}: no finite value for ['val_accuracy']"]
    assert events[-1][0] == "failed" and events[-1][2]["log_path"] == str(log)
    assert driver.study.get_trials(states=(TrialState.WAITING,)) == []  # its own failure


@pytest.mark.unit
def test_a_log_that_cannot_be_written_still_fails_the_trial(tmp_path: Path) -> None:
    driver, _ = _driver(tmp_path)
    (tmp_path / "detol-logs").write_text("a file where the directory would go")
    run = _ended(driver)
    counts = RunCounts()
    failed = {"state": "failed", "exit_reason": "exit 1\ntraceback", "log": "x"}
    driver._finish(run, failed, counts)  # noqa: SLF001
    t = driver.study.trials[run.trial.number]
    assert t.state is TrialState.FAIL and "log_path" not in t.user_attrs
    assert t.user_attrs["exit_reason"] == "exit 1\ntraceback"
    assert counts.failures == [f"trial {run.trial.number}: exit 1"]  # its first line
    driver._finish(_ended(driver), {"state": "failed"}, counts)  # noqa: SLF001
    assert counts.failures[-1].endswith(": unknown error") and counts.failed == 2


@pytest.mark.unit
def test_a_lost_worker_requeues_its_parameters(tmp_path: Path) -> None:
    driver, events = _driver(tmp_path)
    counts = RunCounts()
    run = _ended(driver)
    lost = {"state": "failed", "exit_reason": "Dask worker lost: KilledWorker", "lost": True}
    driver._finish(run, lost, counts)  # noqa: SLF001
    t = driver.study.trials[run.trial.number]
    assert t.state is TrialState.FAIL and t.user_attrs["exit_reason"] == (
        "Dask worker lost: KilledWorker; parameters re-queued (attempt 2 of 2)")
    (retry,) = driver.study.get_trials(states=(TrialState.WAITING,))
    assert retry.user_attrs["detol:retry_of"] == run.trial.number and counts.failed == 1
    assert events[-1] == ("failed", run.trial.number, lost)


@pytest.mark.unit
def test_a_lost_pause_is_asked_again_not_rerun(tmp_path: Path) -> None:
    driver, events = _driver(tmp_path)
    counts = RunCounts()
    lost = {"state": "failed", "exit_reason": "Dask worker lost: KilledWorker", "lost": True}
    # Two trials at rung 1 (eta 2) ahead of a third that wrote its pause checkpoint at
    # epoch 1 and lost its worker before its answer came: it pauses, it is not re-run.
    for value in (0.9, 0.8):
        ahead = driver.study.ask()
        ahead.report(value, 1)
        driver.study.tell(ahead, state=TrialState.PRUNED)
    behind = _ended(driver, continuation=True)
    behind.trial.set_user_attr(RESUME_OF_ATTR, 0)
    behind.trial.report(0.1, 1)
    behind.trial.set_user_attr(CHECKPOINT_ATTR, {"id": "ck", "epoch": 1, "store": "x"})
    driver._finish(behind, lost, counts)  # noqa: SLF001
    t = driver.study.trials[behind.trial.number]
    assert t.state is TrialState.PRUNED and t.user_attrs[PAUSED_ATTR] == 1
    assert t.user_attrs["exit_reason"].startswith("paused after epoch 1 (Dask worker lost: ")
    assert (counts.paused, counts.pruned, counts.continuations, counts.failed) == (1, 1, 1, 0)
    assert events == [("pruned", behind.trial.number, lost)]
    assert driver.study.get_trials(states=(TrialState.WAITING,)) == []  # nothing re-run


@pytest.mark.unit
def test_a_function_trial_carries_the_noise_seed_the_benchmarks_reproduce(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from search.backends._objectives import run_function_trial

    monkeypatch.chdir(tmp_path)
    form = {"name": "f", "objective": "math:fabs", "metric": "y", "direction": "minimize",
            "pruner": "none", "strategy": {"name": "random", "seed": 7},
            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}}}
    sf = parse_study(form)
    url = str(tmp_path / "f.journal")
    study = open_study(sf, optuna.storages.InMemoryStorage(), url=url)
    driver = Driver(sf, study, _Client(), storage_url=url)
    for _ in range(2):
        _, run = driver._submit(RunCounts())  # noqa: SLF001
    assert (run.ranks, run.sim_start, run.continuation) == (1, 0.0, False)
    (_, (first,), _), (func, (task,), kwargs) = driver.client.submitted
    assert func is run_function_trial
    assert kwargs == {"key": f"trial-f-1-{driver.task_prefix}", "pure": False, "retries": 0}
    # benchmarks/_common (peers, flat): noise seed = strategy seed * 1_000_003 + trial number
    assert (first["noise_seed"], task["noise_seed"]) == (7 * 1_000_003, 7 * 1_000_003 + 1)
    assert task["params"] == {"x": study.trials[1].params["x"]}
    assert (task["objective"], task["objectives"], task["study_name"], task["storage_url"],
            task["report"], task["sys_path"]) == ("math:fabs", ["y"], "f", url, True,
                                                  [str(tmp_path.resolve())])
    trial_id = run.trial._trial_id  # noqa: SLF001
    assert task["trial_id"] == trial_id and task["pruner"] == driver.pruner
    unseeded = parse_study({**form, "strategy": {"name": "random"}})
    monkeypatch.setattr(random, "getrandbits", lambda bits: 2**bits - 1)  # the largest draw
    assert Driver(unseeded, study, _Client(), storage_url=url).noise_seed == 2**32 - 1


@pytest.fixture(scope="module")
def dask_client() -> Any:
    from distributed import Client

    with Client(processes=False, n_workers=1, threads_per_worker=4,
                dashboard_address=None) as c:
        yield c


def _loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: Any, body: str,
          budget: dict[str, Any], **options: Any) -> tuple[Driver, optuna.Study]:
    monkeypatch.chdir(tmp_path)  # "module:function" imports from here, as `search run`
    module = f"loop_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(
        "import time\n\n\ndef objective(params):\n" + body)
    sf = parse_study({"name": "l", "objective": f"{module}:objective", "metric": "y",
                      "direction": "minimize", "pruner": "none",
                      "strategy": {"name": "random", "seed": 1}, "budget": budget,
                      "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}}})
    url = str(tmp_path / "l.journal")
    study = open_study(sf, optuna.storages.InMemoryStorage(), url=url)
    return Driver(sf, study, client, storage_url=url, **options), study


def test_a_run_stops_after_max_failures_and_leaves_nothing_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dask_client: Any) -> None:
    driver, study = _loop(tmp_path, monkeypatch, dask_client, "    raise ValueError('bad')\n",
                          {"trials": 10, "max_failures": 2})
    counts = driver.run(trials=10, concurrency=1, timeout=None)
    assert counts.stopped_because == "stopped after 2 failed trials (budget.max_failures)"
    assert (counts.failed, counts.complete, counts.running) == (2, 0, 0)
    assert [t.state for t in study.trials] == [TrialState.FAIL] * 2


def test_a_run_past_its_timeout_starts_nothing_more(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dask_client: Any) -> None:
    driver, study = _loop(tmp_path, monkeypatch, dask_client,
                          "    time.sleep(1.0)\n    return params['x']\n", {"trials": 10})
    counts = driver.run(trials=10, concurrency=1, timeout=0.5)
    assert counts.stopped_because == "budget.timeout of 0.5 s reached"
    assert counts.complete == 1 and [t.state for t in study.trials] == [TrialState.COMPLETE]


def test_two_drivers_in_one_process_never_share_a_trial_s_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dask_client: Any) -> None:
    # A notebook runs a study, then another of the same name on another storage, on one client.
    # While a future of the first driver's trial 0 is held, a Dask key shared by the second
    # driver's trial 0 would hand it that task's answer instead of running it.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, _ = _loop(tmp_path / "a", monkeypatch, dask_client, "    return 5.0\n", {"trials": 1})
    first.run(trials=1, concurrency=1, timeout=None)
    held = dask_client.submit(lambda: {"state": "failed", "exit_reason": "not this trial's"},
                              key=first._task_key(first.study.trials[0]), pure=False)  # noqa: SLF001
    second, study = _loop(tmp_path / "b", monkeypatch, dask_client, "    return params['x']\n",
                          {"trials": 1})
    second.run(trials=1, concurrency=1, timeout=None)
    assert study.trials[0].state is TrialState.COMPLETE, study.trials[0].user_attrs
    assert study.trials[0].values == [study.trials[0].params["x"]]
    held.release()


def test_trials_on_this_machine_share_its_cores_by_the_concurrency(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dask_client: Any) -> None:
    from training.launch import TRIAL_CORES_ENV

    driver, _ = _loop(tmp_path, monkeypatch, dask_client, "    return params['x']\n",
                      {"trials": 1}, single_node=True)
    driver.run(trials=1, concurrency=2, timeout=None)
    assert driver.job_env[TRIAL_CORES_ENV] == str(max(1, len(os.sched_getaffinity(0)) // 2))
    remote, _ = _loop(tmp_path, monkeypatch, dask_client, "    return params['x']\n",
                      {"trials": 2})
    remote.run(trials=2, concurrency=2, timeout=None)
    assert TRIAL_CORES_ENV not in remote.job_env  # a batch job's ranks count their own cores


def test_a_cluster_that_fails_fails_the_running_trials_and_requeues_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dask_client: Any) -> None:
    from search.clusters._watch import ClusterFailed

    def watch(*, waiting: bool) -> None:
        raise ClusterFailed("cluster", "no worker came")

    driver, study = _loop(tmp_path, monkeypatch, dask_client,
                          "    time.sleep(3)\n    return params['x']\n",
                          {"trials": 4, "max_retries": 1}, watch=watch)
    with pytest.raises(ClusterFailed):
        driver.run(trials=4, concurrency=2, timeout=None)
    failed = [t for t in study.trials if t.state is TrialState.FAIL]
    assert len(failed) == 2 and not [t for t in study.trials if t.state is TrialState.RUNNING]
    for t in failed:
        assert t.user_attrs["exit_reason"] == (
            "cluster failed: cluster: no worker came; parameters re-queued (attempt 2 of 2)")
    assert len(study.get_trials(states=(TrialState.WAITING,))) == 2


@pytest.mark.unit
def test_a_driver_on_a_cluster_sends_only_the_study_files_env(tmp_path: Path) -> None:
    driver, _ = _driver(tmp_path)  # single_node: False by default
    driver._submit(RunCounts())  # noqa: SLF001
    ((_, (spec,), _),) = driver.client.submitted
    assert spec["env"] == {}


@pytest.mark.unit
def test_with_resize_a_continuation_runs_at_its_planned_width_on_a_wide_pool(
        tmp_path: Path) -> None:
    driver, _ = _driver(tmp_path, resize={"factor": 2, "max_ranks": 4})
    assert driver.resize is not None and driver.promoter is not None
    assert driver.pruner["kwargs"]["widen_until"] == 4  # a narrower promoted trial pauses
    study = driver.study
    parent = study.ask()
    parent.report(0.5, 1)
    study.tell(parent, state=TrialState.PRUNED)
    study.enqueue_trial({"lr": 0.01}, user_attrs={
        RESUME_OF_ATTR: parent.number, LINEAGE_ATTR: parent.number, WIDTH_ATTR: 4,
        RESUME_FROM_ATTR: {"id": "ck", "epoch": 1, "trial": parent.number}})
    _, run = driver._submit(RunCounts())  # noqa: SLF001
    ((_, (spec,), kwargs),) = driver.client.submitted
    assert spec["config"]["ranks"] == 4 and kwargs["resources"] == {MPI: 4} and run.ranks == 4
    assert spec["pool_ranks"] == 4
    assert study.trials[run.trial.number].user_attrs[WIDTH_ATTR] == 4


@pytest.mark.unit
def test_without_checkpoints_a_queued_resume_point_is_ignored(tmp_path: Path) -> None:
    sf = parse_study({"name": "n", "pruner": "none",
                      "training": {"dataset": "digits", "epochs": 2, "ranks": 1},
                      "space": {"lr": {"type": "float", "low": 0.001, "high": 0.1}}})
    url = str(tmp_path / "n.journal")
    study = open_study(sf, optuna.storages.InMemoryStorage(), url=url)
    driver = Driver(sf, study, _Client(), storage_url=url)
    study.enqueue_trial({"lr": 0.01}, user_attrs={
        RESUME_FROM_ATTR: {"id": "ck", "epoch": 1, "trial": 0}})
    _, run = driver._submit(RunCounts())  # noqa: SLF001
    ((_, (spec,), _),) = driver.client.submitted
    assert (spec["checkpoints"], spec["resume_from"], run.resumed_epoch) == (None, None, 0)
    assert driver.promoter is None and driver.resize is None  # nothing pauses
