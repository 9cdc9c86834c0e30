"""The driver's parameters for a trial, in one process (issue 33, the driver's full mutant set):
an own loop gets the trial's parameters while only ``ranks`` and ``prune_<key>`` reach the
built-in config; a genome reaches the built-in trainer's config or the loop's parameters and is
recorded on the trial; a duplicate warm-start candidate is failed without a warning. The client
is test_driver_rules.py's stand-in that takes submissions without running them."""

from __future__ import annotations

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
from search.driver._study import RESUME_FROM_ATTR, open_study
from search.driver._warm_start import TRANSFERRED_FROM
from search.pruners._promotion import LINEAGE_ATTR, PAUSED_ATTR, RESUME_OF_ATTR
from tests.search.test_driver_rules import _Client, _driver
from training.contract import CHECKPOINT_ATTR


def _mpi_driver(
    tmp_path: Path, space: dict[str, Any], *, own_loop: bool, **training: Any
) -> tuple[Driver, list[tuple]]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    form: dict[str, Any] = {
        "name": "g",
        "budget": {"trials": 4},
        "training": {
            "epochs": 4,
            "ranks": 2,
            **({} if own_loop else {"dataset": "digits"}),
            **training,
        },
        "space": {"lr": {"type": "float", "low": 0.001, "high": 0.1}, **space},
    }
    if own_loop:
        form["objective"] = "mpi:examples.own_loop.train:train"
    sf = parse_study(form)
    url = str(tmp_path / "g.journal")
    study = open_study(sf, optuna.storages.InMemoryStorage(), url=url)
    events: list[tuple] = []

    def on_event(kind: str, trial: Any, counts: RunCounts, result: Any) -> None:
        events.append((kind, trial.number if trial is not None else None, counts.target))

    return Driver(sf, study, _Client(), storage_url=url, on_event=on_event), events


GENOME = {"family": "stack", "max_conv_layers": 2, "channels": [4, 8], "widths": [16]}
RANKS = {"type": "categorical", "choices": [1, 3]}


def _genome_of(trial: optuna.trial.FrozenTrial) -> Any:
    from spaces import make_family

    options = {k: v for k, v in GENOME.items() if k != "family"}
    return make_family("stack", **options).from_params(
        {k: v for k, v in trial.params.items() if k.startswith("genome.")}
    )


@pytest.mark.unit
def test_an_own_loop_gets_its_params_and_only_ranks_and_prune_keys_reach_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the loop imports from where `search run` runs
    driver, events = _mpi_driver(
        tmp_path,
        {"ranks": RANKS, "prune_target": {"type": "float", "low": 0.1, "high": 0.5}},
        own_loop=True,
        prune={"target": 0.3, "start_epoch": 2, "end_epoch": 3, "steps": 2},
    )
    _, run = driver._submit(RunCounts(target=9))  # noqa: SLF001
    ((func, (spec,), kwargs),) = driver.client.submitted
    trial = driver.study.trials[run.trial.number]
    assert func is run_trial_on_worker and set(trial.params) == {"lr", "ranks", "prune_target"}
    assert spec["own_loop"] == {
        "function": "examples.own_loop.train:train",
        "params": trial.params,
        "sys_path": [str(tmp_path.resolve())],
    }
    ranks = trial.params["ranks"]
    # the user's lr is the loop's (session.params), not the built-in trainer's setting
    assert spec["config"]["lr"] == driver.sf.training.lr != trial.params["lr"]
    assert spec["config"]["ranks"] == ranks and kwargs["resources"] == {MPI: ranks}
    assert spec["config"]["prune"]["target"] == trial.params["prune_target"]
    assert run.ranks == ranks and trial.user_attrs[WIDTH_ATTR] == ranks
    assert "genome" not in trial.user_attrs and spec["config"]["genome"] is None
    assert events == [("started", trial.number, 9)]  # the run's own counts, to the display


@pytest.mark.unit
def test_an_own_loops_genome_reaches_its_params_and_is_recorded(tmp_path: Path) -> None:
    driver, _ = _mpi_driver(tmp_path, {"genome": GENOME}, own_loop=True)
    _, run = driver._submit(RunCounts())  # noqa: SLF001
    ((_, (spec,), _),) = driver.client.submitted
    trial = driver.study.trials[run.trial.number]
    genome = _genome_of(trial)
    assert spec["own_loop"]["params"] == {"lr": trial.params["lr"], "genome": genome.to_dict()}
    assert spec["config"]["genome"] is None  # the loop builds its own model
    assert (
        trial.user_attrs["genome"],
        trial.user_attrs["genome_key"],
        trial.user_attrs["genome_summary"],
    ) == (genome.canonical_json, genome.key, genome.summary())


@pytest.mark.unit
def test_a_genome_reaches_the_built_in_trainers_config_and_is_recorded(tmp_path: Path) -> None:
    driver, _ = _mpi_driver(tmp_path, {"genome": GENOME, "ranks": RANKS}, own_loop=False)
    _, run = driver._submit(RunCounts())  # noqa: SLF001
    ((_, (spec,), kwargs),) = driver.client.submitted
    trial = driver.study.trials[run.trial.number]
    genome = _genome_of(trial)
    assert spec["own_loop"] is None and spec["config"]["genome"] == genome.to_dict()
    assert spec["config"]["lr"] == trial.params["lr"]  # the built-in trainer's own setting
    assert spec["config"]["ranks"] == trial.params["ranks"] == run.ranks
    assert (
        trial.user_attrs["genome"],
        trial.user_attrs["genome_key"],
        trial.user_attrs["genome_summary"],
    ) == (genome.canonical_json, genome.key, genome.summary())


@pytest.mark.unit
def test_a_duplicate_is_failed_quietly(tmp_path: Path) -> None:
    """Told FAIL as a state, not as a missing value (Optuna warns of that one)."""
    import warnings

    driver, _ = _driver(tmp_path)
    for _ in range(2):
        driver.study.enqueue_trial(
            {"lr": 0.02}, user_attrs={TRANSFERRED_FROM: "src#3"}, skip_if_exists=False
        )
    driver._submit(RunCounts())  # noqa: SLF001
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert driver._submit(RunCounts()) is None  # noqa: SLF001
    assert driver.study.trials[1].state is TrialState.FAIL


def _function_driver(tmp_path: Path, objective: str) -> tuple[Driver, list[tuple]]:
    sf = parse_study(
        {
            "name": "f",
            "objective": objective,
            "metric": "y",
            "direction": "minimize",
            "pruner": "none",
            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        }
    )
    url = str(tmp_path / "f.journal")
    study = open_study(sf, optuna.storages.InMemoryStorage(), url=url)
    events: list[tuple] = []

    def on_event(kind: str, trial: Any, counts: RunCounts, result: Any) -> None:
        events.append((kind, trial.number, counts.target))

    return Driver(sf, study, _Client(), storage_url=url, on_event=on_event), events


@pytest.mark.unit
def test_a_function_trials_start_is_shown_with_the_runs_counts(tmp_path: Path) -> None:
    driver, events = _function_driver(tmp_path, "math:fabs")
    driver._submit(RunCounts(target=5))  # noqa: SLF001
    assert events == [("started", 0, 5)]


@pytest.mark.unit
def test_a_simulated_workload_charges_the_drivers_measured_work_by_default(
    tmp_path: Path,
) -> None:
    simulated, _ = _function_driver(tmp_path, "simulated:sweep")
    assert simulated.simulated and simulated.clock.service == "measured"
    plain, _ = _function_driver(tmp_path, "math:fabs")
    assert plain.clock.service == 0.0


@pytest.mark.unit
def test_a_trial_that_cannot_be_built_fails_alone_with_the_reason(tmp_path: Path) -> None:
    driver, events = _driver(tmp_path)
    # a resume point whose writer is not in the study: its curve cannot be copied
    driver.study.enqueue_trial(
        {"lr": 0.01}, user_attrs={RESUME_FROM_ATTR: {"id": "ck", "epoch": 1, "trial": 42}}
    )
    counts = RunCounts(target=3)
    assert driver._submit(counts) is None  # noqa: SLF001
    trial = driver.study.trials[0]
    reason = trial.user_attrs["exit_reason"]
    assert trial.state is TrialState.FAIL and reason.startswith("could not build the trial: ")
    assert counts.failed == 1 and counts.failures == [f"trial 0: {reason.splitlines()[0]}"]
    assert events == [("failed", 0, {"exit_reason": reason})]
    assert driver.client.submitted == []  # nothing ran, and the study goes on
    assert driver.study.get_trials(states=(TrialState.WAITING,)) == []  # not re-queued


class _PoolClient(_Client):
    """A client whose one worker, tcp://w1, runs nothing now."""

    def processing(self) -> dict[str, tuple[str, ...]]:
        return {"tcp://w1": ()}


def _warm_continuation(tmp_path: Path, client: _Client) -> tuple[dict, dict]:
    """A continuation on warm pools ([resize]), its parent run on tcp://w1: its spec and the
    rest of what the driver asks Dask for."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sf = parse_study(
        {
            "name": "w",
            "metric": "val_loss",
            "budget": {"trials": 4, "trial_timeout": 90},
            "pruner": {"name": "asha", "promote": True, "min_epochs": 1},
            "training": {"dataset": "digits", "epochs": 4, "ranks": 2},
            "resize": {"factor": 2, "max_ranks": 4},
            "launcher": {"command": "mpirun -np {ranks} --bind-to none", "warm": True},
            "space": {"lr": {"type": "float", "low": 0.001, "high": 0.1}},
        }
    )
    url = str(tmp_path / "w.journal")
    study = open_study(sf, optuna.storages.InMemoryStorage(), url=url)
    driver = Driver(sf, study, client, storage_url=url)
    parent = study.ask()
    parent.set_user_attr("dask_worker", "tcp://w1")  # its pool holds the paused state
    parent.report(0.5, 1)
    study.tell(parent, state=TrialState.PRUNED)
    study.enqueue_trial({"lr": 0.01}, user_attrs={RESUME_OF_ATTR: 0, LINEAGE_ATTR: 0})
    driver._submit(RunCounts())  # noqa: SLF001
    ((_, (spec,), kwargs),) = client.submitted
    return spec, kwargs


@pytest.mark.unit
def test_a_trial_carries_the_study_files_launcher_timeout_and_objective(tmp_path: Path) -> None:
    spec, kwargs = _warm_continuation(tmp_path, _PoolClient())
    assert spec["objectives"] == ["val_loss"] and spec["timeout_s"] == 90
    assert spec["launcher"] == "mpirun -np {ranks} --bind-to none" and spec["warm"] is True
    assert spec["pool_ranks"] == 4
    # a continuation goes back to the idle worker whose pool ran its parent
    assert kwargs["workers"] == ["tcp://w1"] and kwargs["allow_other_workers"] is True


@pytest.mark.unit
def test_a_continuation_goes_anywhere_when_the_scheduler_cannot_say_who_is_idle(
    tmp_path: Path,
) -> None:
    spec, kwargs = _warm_continuation(tmp_path, _Client())  # no processing(): it raises
    assert spec["warm"] is True and spec["pool_ranks"] == 4
    assert "workers" not in kwargs and "allow_other_workers" not in kwargs


@pytest.mark.unit
def test_a_multi_objective_continuation_starts_with_its_writers_epoch_vectors(
    tmp_path: Path,
) -> None:
    from training.session import VECTOR_ATTR

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sf = parse_study(
        {
            "name": "m",
            "metric": ["val_accuracy", "n_params"],
            "pruner": "none",
            "checkpoints": {"every": 1},
            "training": {"dataset": "digits", "epochs": 4, "ranks": 2},
            "space": {"lr": {"type": "float", "low": 0.001, "high": 0.1}},
        }
    )
    url = str(tmp_path / "m.journal")
    study = open_study(sf, optuna.storages.InMemoryStorage(), url=url)
    driver = Driver(sf, study, _Client(), storage_url=url)
    writer = study.ask()
    for epoch in (1, 2, 3):
        writer.set_user_attr(f"{VECTOR_ATTR}{epoch}", [0.1 * epoch, 100])
    study.tell(writer, state=TrialState.FAIL)
    study.enqueue_trial(
        {"lr": 0.01}, user_attrs={RESUME_FROM_ATTR: {"id": "ck", "epoch": 2, "trial": 0}}
    )
    _, run = driver._submit(RunCounts())  # noqa: SLF001
    t = study.trials[run.trial.number]
    vectors = {k: v for k, v in t.user_attrs.items() if k.startswith(VECTOR_ATTR)}
    assert vectors == {f"{VECTOR_ATTR}1": [0.1, 100], f"{VECTOR_ATTR}2": [0.2, 100]}
    assert t.intermediate_values == {}


@pytest.mark.unit
def test_without_resize_a_queued_width_is_ignored(tmp_path: Path) -> None:
    driver, _ = _driver(tmp_path)  # no [resize]: every trial runs on the study's 2 ranks
    study = driver.study
    parent = study.ask()
    parent.report(0.5, 1)
    study.tell(parent, state=TrialState.PRUNED)
    study.enqueue_trial(
        {"lr": 0.01},
        user_attrs={
            RESUME_OF_ATTR: 0,
            LINEAGE_ATTR: 0,
            WIDTH_ATTR: 4,
            RESUME_FROM_ATTR: {"id": "ck", "epoch": 1, "trial": 0},
        },
    )
    _, run = driver._submit(RunCounts())  # noqa: SLF001
    ((_, (spec,), kwargs),) = driver.client.submitted
    assert spec["config"]["ranks"] == 2 == run.ranks and kwargs["resources"] == {MPI: 2}


class _BrokenSpace:
    """A space whose sampler fails (a bad condition, a sampler's own error)."""

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        raise ValueError("no value for x")


@pytest.mark.unit
def test_a_function_trial_that_cannot_be_built_fails_alone_with_the_reason(
    tmp_path: Path,
) -> None:
    driver, events = _function_driver(tmp_path, "math:fabs")
    driver.space = _BrokenSpace()
    counts = RunCounts(target=4)
    assert driver._submit(counts) is None  # noqa: SLF001
    trial = driver.study.trials[0]
    reason = "could not build the trial: no value for x"
    assert trial.state is TrialState.FAIL and trial.user_attrs["exit_reason"] == reason
    assert counts.failed == 1 and counts.failures == [f"trial 0: {reason}"]
    assert events == [("failed", 0, 4)] and driver.client.submitted == []


@pytest.mark.unit
def test_a_function_trials_genome_is_recorded(tmp_path: Path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sf = parse_study(
        {
            "name": "fg",
            "objective": "math:fabs",
            "metric": "y",
            "direction": "minimize",
            "pruner": "none",
            "space": {"genome": GENOME},
        }
    )
    url = str(tmp_path / "fg.journal")
    study = open_study(sf, optuna.storages.InMemoryStorage(), url=url)
    driver = Driver(sf, study, _Client(), storage_url=url)
    _, run = driver._submit(RunCounts())  # noqa: SLF001
    ((_, (task,), _),) = driver.client.submitted
    trial = study.trials[run.trial.number]
    genome = _genome_of(trial)
    assert task["params"]["genome"] == genome
    assert (
        trial.user_attrs["genome"],
        trial.user_attrs["genome_key"],
        trial.user_attrs["genome_summary"],
    ) == (genome.canonical_json, genome.key, genome.summary())


def _counting(driver: Driver) -> list[tuple]:
    seen: list[tuple] = []

    def on_event(kind: str, trial: Any, counts: RunCounts, result: Any) -> None:
        seen.append(
            (
                kind,
                counts.paused,
                counts.pruned,
                counts.continuations,
                counts.failed,
                counts.complete,
            )
        )

    driver.on_event = on_event
    return seen


@pytest.mark.unit
def test_a_lost_pause_adds_to_the_runs_counts(tmp_path: Path) -> None:
    driver, _ = _driver(tmp_path)
    seen = _counting(driver)
    study = driver.study
    for value in (0.9, 0.8):
        ahead = study.ask()
        ahead.report(value, 1)
        study.tell(ahead, state=TrialState.PRUNED)
    behind = study.ask()
    behind.suggest_float("lr", 0.001, 0.1)
    behind.set_user_attr(RESUME_OF_ATTR, 0)
    behind.report(0.1, 1)
    behind.set_user_attr(CHECKPOINT_ATTR, {"id": "ck", "epoch": 1, "store": "x"})
    counts = RunCounts(paused=2, pruned=3, continuations=4, failed=1)
    lost = {"state": "failed", "exit_reason": "Dask worker lost: KilledWorker", "lost": True}
    driver._finish(Running(behind, 2, continuation=True), lost, counts)  # noqa: SLF001
    assert study.trials[behind.number].state is TrialState.PRUNED
    assert seen == [("pruned", 3, 4, 5, 1, 0)]


@pytest.mark.unit
def test_a_failure_is_told_quietly_and_each_failures_log_is_kept(tmp_path: Path) -> None:
    """Told FAIL as a state (Optuna warns of a missing value); the logs' directory is made
    once and used again."""
    import warnings

    driver, _ = _driver(tmp_path)
    seen = _counting(driver)
    counts = RunCounts(failed=2)
    paths = []
    for _ in range(2):
        trial = driver.study.ask()
        trial.suggest_float("lr", 0.001, 0.1)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            driver._finish(  # noqa: SLF001
                Running(trial, 2),
                {"state": "failed", "exit_reason": "exit 1", "log": "out"},
                counts,
            )
        t = driver.study.trials[trial.number]
        assert t.state is TrialState.FAIL
        paths.append(Path(t.user_attrs["log_path"]))
    assert [p.read_text() for p in paths] == ["out", "out"] and paths[0] != paths[1]
    assert seen == [("failed", 0, 0, 0, 3, 0), ("failed", 0, 0, 0, 4, 0)]


@pytest.mark.unit
def test_with_resize_each_segment_of_a_lineage_is_recorded(tmp_path: Path) -> None:
    from search.driver._resize import SEGMENTS_ATTR

    driver, _ = _driver(tmp_path, resize={"factor": 2, "max_ranks": 4})
    earlier = {"trial": 0, "ranks": 2, "epochs": 1, "rank_seconds": 3.0}
    trial = driver.study.ask()
    trial.suggest_float("lr", 0.001, 0.1)
    trial.set_user_attr(SEGMENTS_ATTR, [earlier])  # inherited from the segment it continues
    result = {"state": "paused", "start_epoch": 2, "epochs_run": 2, "ranks": 4, "rank_seconds": 8.5}
    driver._finish(Running(trial, 2, continuation=True), result, RunCounts())  # noqa: SLF001
    assert driver.study.trials[trial.number].user_attrs[SEGMENTS_ATTR] == [
        earlier,
        {"trial": trial.number, "ranks": 4, "epochs": 2, "rank_seconds": 8.5},
    ]
    # a job that did not say its width ran on the width it was given; no time measured: 0
    first = driver.study.ask()
    first.suggest_float("lr", 0.001, 0.1)
    result = {"state": "pruned", "epochs_run": 3, "rank_seconds": None}
    driver._finish(Running(first, 2), result, RunCounts())  # noqa: SLF001
    assert driver.study.trials[first.number].user_attrs[SEGMENTS_ATTR] == [
        {"trial": first.number, "ranks": 2, "epochs": 3, "rank_seconds": 0.0}
    ]
    plain, _ = _driver(tmp_path / "plain")  # without [resize]: no segments
    other = plain.study.ask()
    other.suggest_float("lr", 0.001, 0.1)
    plain._finish(Running(other, 2), result, RunCounts())  # noqa: SLF001
    assert SEGMENTS_ATTR not in plain.study.trials[other.number].user_attrs


@pytest.mark.unit
def test_a_continuation_that_completes_or_pauses_adds_to_the_runs_counts(tmp_path: Path) -> None:
    driver, _ = _driver(tmp_path)
    seen = _counting(driver)
    counts = RunCounts(complete=1, pruned=2, paused=3, continuations=4)
    for result in (
        {"state": "complete", "values": {"val_accuracy": 0.8}, "epochs_run": 1},
        {"state": "paused", "start_epoch": 2, "epochs_run": 1},
    ):
        trial = driver.study.ask()
        trial.suggest_float("lr", 0.001, 0.1)
        driver._finish(Running(trial, 2, continuation=True), result, counts)  # noqa: SLF001
    assert seen == [("complete", 3, 2, 5, 0, 2), ("pruned", 4, 3, 6, 0, 2)]
    assert [t.state for t in driver.study.trials] == [TrialState.COMPLETE, TrialState.PRUNED]


@pytest.mark.unit
def test_a_multi_objective_trial_is_told_all_its_values(tmp_path: Path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sf = parse_study(
        {
            "name": "mo",
            "metric": ["val_accuracy", "n_params"],
            "pruner": "none",
            "training": {"dataset": "digits", "epochs": 2, "ranks": 2},
            "space": {"lr": {"type": "float", "low": 0.001, "high": 0.1}},
        }
    )
    url = str(tmp_path / "mo.journal")
    study = open_study(sf, optuna.storages.InMemoryStorage(), url=url)
    driver = Driver(sf, study, _Client(), storage_url=url)
    trial = study.ask()
    trial.suggest_float("lr", 0.001, 0.1)
    result = {"state": "complete", "values": {"val_accuracy": 0.8, "n_params": 1200.0}}
    counts = RunCounts()
    driver._finish(Running(trial, 2), result, counts)  # noqa: SLF001
    t = study.trials[0]
    assert t.state is TrialState.COMPLETE and t.values == [0.8, 1200.0] and counts.complete == 1


class _Clock:
    """search.driver._driver's time module, its monotonic clock held still."""

    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0


class _Pending:
    """A future that has not ended (the driver may cancel it)."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def _timed_out(driver: Driver, monkeypatch: pytest.MonkeyPatch, age: float) -> bool:
    """Which of one running trial of ``age`` seconds ``_collect`` stops at its timeout."""
    import search.driver._driver as module

    monkeypatch.setattr(module, "time", _Clock(1000.0))
    driver._ended_now = lambda timeout=0.5: []  # type: ignore[method-assign]  # nothing ended
    trial = driver.study.ask()
    future = _Pending()
    running = {future: Running(trial, 2, started=1000.0 - age)}
    out = driver._collect(running)  # type: ignore[arg-type]  # noqa: SLF001
    if out:
        ((_, _, result),) = out
        assert result == {"state": "failed", "exit_reason": "trial_timeout of 10 s reached"}
    assert future.cancelled == bool(out) and bool(running) != bool(out)
    return bool(out)


@pytest.mark.unit
def test_an_mpi_trial_gets_30_s_past_its_timeout_to_stop_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sf = parse_study(
        {
            "name": "t",
            "budget": {"trials": 4, "trial_timeout": 10},
            "pruner": "none",
            "training": {"dataset": "digits", "epochs": 2, "ranks": 2},
            "space": {"lr": {"type": "float", "low": 0.001, "high": 0.1}},
        }
    )
    url = str(tmp_path / "t.journal")
    study = open_study(sf, optuna.storages.InMemoryStorage(), url=url)
    driver = Driver(sf, study, _Client(), storage_url=url)
    # the job stops itself at trial_timeout; the driver steps in only 30 s later
    assert _timed_out(driver, monkeypatch, 39.0) is False
    assert _timed_out(driver, monkeypatch, 40.0) is False  # strictly past
    assert _timed_out(driver, monkeypatch, 40.5) is True


@pytest.mark.unit
def test_a_function_trial_is_stopped_right_past_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sf = parse_study(
        {
            "name": "tf",
            "objective": "math:fabs",
            "metric": "y",
            "direction": "minimize",
            "pruner": "none",
            "budget": {"trials": 4, "trial_timeout": 10},
            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        }
    )
    url = str(tmp_path / "tf.journal")
    study = open_study(sf, optuna.storages.InMemoryStorage(), url=url)
    driver = Driver(sf, study, _Client(), storage_url=url)
    assert _timed_out(driver, monkeypatch, 10.0) is False
    assert _timed_out(driver, monkeypatch, 10.5) is True


@pytest.mark.unit
def test_the_loop_waits_at_most_half_a_second_for_a_trial_to_end(tmp_path: Path) -> None:
    """Then it looks at timeouts, the cluster and the heartbeat again; every future that has
    ended by then is taken at once."""
    import queue

    class _Ends:
        def __init__(self, ready: list[str]) -> None:
            self.ready, self.waits = ready, []

        def get(self, timeout: float) -> str:
            self.waits.append(timeout)
            if not self.ready:
                raise queue.Empty
            return self.ready.pop(0)

        def get_nowait(self) -> str:
            if not self.ready:
                raise queue.Empty
            return self.ready.pop(0)

    driver, _ = _driver(tmp_path)
    driver._ended = _Ends([])  # type: ignore[assignment]  # noqa: SLF001
    assert driver._ended_now() == [] and driver._ended.waits == [0.5]  # noqa: SLF001
    driver._ended = _Ends(["a", "b", "c"])  # type: ignore[assignment]  # noqa: SLF001
    assert driver._ended_now() == ["a", "b", "c"]  # noqa: SLF001


def _paused_at_rung_1(driver: Driver) -> None:
    trial = driver.study.ask()
    trial.suggest_float("lr", 0.001, 0.1)
    trial.report(0.5, 1)
    trial.set_user_attr(PAUSED_ATTR, 1)
    trial.set_user_attr(WIDTH_ATTR, 2)  # it ran on 2 ranks
    trial.set_user_attr(CHECKPOINT_ATTR, {"id": "ck", "epoch": 1, "store": "x"})
    driver.study.tell(trial, state=TrialState.PRUNED)


@pytest.mark.unit
def test_once_the_budget_is_spent_each_rungs_best_is_promoted(tmp_path: Path) -> None:
    """Budget of 2: one configuration paused alone at rung 1 (no top half of one), the other
    running or ended but not told. No new configuration will come, so the rung's best goes on
    (with [resize], twice as wide)."""
    resize = {"factor": 2, "max_ranks": 4}
    for i, (untold, policy, width) in enumerate(((0, None, 2), (1, None, 2), (1, resize, 4))):
        (tmp_path / str(i)).mkdir()  # the budget's lock file goes beside the storage
        driver, _ = _driver(tmp_path / str(i), resize=policy)
        _paused_at_rung_1(driver)
        other = driver.study.ask()
        other.suggest_float("lr", 0.001, 0.1)
        running = {} if untold else {_Pending(): Running(other, 2)}
        seen = _counting(driver)
        counts = RunCounts(pruned=1, paused=1, promoted=3)
        fill = driver._fill  # noqa: SLF001
        fill(running, counts, concurrency=4, trials=2, untold=untold)  # type: ignore[arg-type]
        ((_, (spec,), _),) = driver.client.submitted  # the continuation, nothing more
        assert spec["resume_from"] == "ck" and counts.promoted == 4
        assert seen == [("started", 1, 1, 0, 0, 0)]
        assert spec["config"]["ranks"] == width
        assert counts.running == len(running) == 2 - untold


@pytest.mark.unit
def test_another_drivers_running_configurations_count_against_the_budget(
    tmp_path: Path,
) -> None:
    driver, _ = _driver(tmp_path)
    for _ in range(2):  # started by another driver of the study: not in this run's counts
        driver.study.ask()
    counts = RunCounts(running=5)
    driver._fill({}, counts, concurrency=4, trials=2)  # noqa: SLF001
    assert driver.client.submitted == [] and counts.running == 0
    driver._fill({}, counts, concurrency=4, trials=3)  # noqa: SLF001
    assert len(driver.client.submitted) == 1 and counts.running == 1


def _widened(tmp_path: Path, concurrency: int, mine: list[int], theirs: list[int]) -> list[Any]:
    """The widths idle slots give (WIDEN_ATTR) to this driver's running trials (``mine``: their
    ranks; the first is the furthest along) and another driver's (``theirs``, best first), at
    the study's end, with workers of 8 slots ([resize] max_ranks 8)."""
    from search.driver._resize import WIDEN_ATTR

    tmp_path.mkdir()  # the budget's lock file goes beside the storage
    driver, _ = _driver(tmp_path, resize={"factor": 2, "max_ranks": 8})
    study = driver.study
    trials = []
    for i, width in enumerate(mine + theirs):
        trial = study.ask()
        trial.set_user_attr(WIDTH_ATTR, width)
        curve = (0.5, 0.6) if i == 0 else (0.9 - 0.1 * i,)
        for epoch, value in enumerate(curve, 1):
            trial.report(value, epoch)
        trials.append(trial)
    running = {_Pending(): Running(t, w) for t, w in zip(trials, mine, strict=False)}
    counts = RunCounts(complete=1)  # the budget of 1 is spent: nothing more starts
    fill = driver._fill  # noqa: SLF001
    fill(running, counts, concurrency=concurrency, trials=1)  # type: ignore[arg-type]
    assert driver.client.submitted == []
    return [study.trials[t.number].system_attrs.get(WIDEN_ATTR) for t in trials]


@pytest.mark.unit
def test_at_the_studys_end_idle_slots_widen_the_running_trials(tmp_path: Path) -> None:
    # 12 idle slots (a free worker's 8, 4 beside this driver's trial): 4 widen it to 8, 7 the
    # other driver's better trial to 8, the last one its other trial to 2
    assert _widened(tmp_path / "a", 2, [4], [1, 1]) == [8, 8, 2]
    # 4 idle slots (none beside a trial on 8 ranks already): all to the furthest along
    assert _widened(tmp_path / "b", 2, [4, 8], [1]) == [8, None, None]


# --- the loop (Driver.run) on a client that answers at once: no worker, no wait ------------


class _Instant(_Client):
    """Each submitted function trial has ended when submit returns, with ``answer(x)``'s
    result (a dict, or an exception: a lost worker)."""

    def __init__(self, answer: Any) -> None:
        super().__init__()
        self.answer = answer

    def submit(self, func: Any, *args: Any, **kwargs: Any) -> Future:
        self.submitted.append((func, args, kwargs))
        future: Future = Future()
        result = self.answer(args[0]["params"]["x"])
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)
        return future


def _instant(tmp_path: Path, answer: Any, **options: Any) -> Driver:
    driver, _ = _function_driver(tmp_path, "math:fabs")
    return Driver(
        driver.sf, driver.study, _Instant(answer), storage_url=driver.storage_url, **options
    )


def _complete(x: float) -> dict[str, Any]:
    return {"state": "complete", "values": {"y": x}}


@pytest.mark.unit
def test_a_run_counts_the_trials_finished_before_it_against_the_budget(tmp_path: Path) -> None:
    driver = _instant(tmp_path, _complete)
    for _ in range(2):  # an earlier run's
        trial = driver.study.ask()
        trial.suggest_float("x", 0.0, 1.0)
        driver.study.tell(trial, 0.5)
    counts = driver.run(trials=5, concurrency=1, timeout=None)
    assert (counts.finished_before, counts.target, counts.complete) == (2, 5, 3)
    assert [t.state for t in driver.study.trials] == [TrialState.COMPLETE] * 5
    assert counts.stopped_because == "" and counts.running == 0


def _kinds(events: list[str]) -> Any:
    def on_event(kind: str, *_: Any) -> None:
        events.append(kind)

    return on_event


@pytest.mark.unit
def test_with_two_workers_the_next_trial_starts_before_the_ended_ones_are_told(
    tmp_path: Path,
) -> None:
    """Workers never wait for the bookkeeping; one at a time, the tell comes first."""
    kinds = {}
    for concurrency in (1, 2):
        events: list[str] = []
        (tmp_path / str(concurrency)).mkdir()  # the budget's lock file goes beside the storage
        driver = _instant(tmp_path / str(concurrency), _complete, on_event=_kinds(events))
        driver.run(trials=3, concurrency=concurrency, timeout=None)
        kinds[concurrency] = [k for k in events if k != "tick"]
    assert kinds[1] == ["started", "complete"] * 3
    assert kinds[2] == ["started", "started", "started", "complete", "complete", "complete"]


@pytest.mark.unit
def test_a_timeout_ends_the_run_only_once_strictly_past(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import search.driver._driver as module

    monkeypatch.setattr(module, "time", _Clock(1000.0))  # no time passes
    counts = _instant(tmp_path, _complete).run(trials=2, concurrency=1, timeout=0.0)
    assert counts.complete == 2 and counts.stopped_because == ""


@pytest.mark.unit
def test_ctrl_c_while_the_first_trial_is_submitted_stops_the_run_as_ctrl_c(
    tmp_path: Path,
) -> None:
    def interrupted(x: float) -> dict[str, Any]:
        raise KeyboardInterrupt

    driver = _instant(tmp_path, interrupted)
    with pytest.raises(KeyboardInterrupt):
        driver.run(trials=2, concurrency=1, timeout=None)


class _Later(_Instant):
    """Trials with x >= 0.5 end only when ``finish`` is called (the watch calls it)."""

    def __init__(self) -> None:
        super().__init__(_complete)
        self.pending: list[tuple[Future, float]] = []
        self.handed: list[Future] = []  # the futures that did not end at once

    def submit(self, func: Any, *args: Any, **kwargs: Any) -> Future:
        x = args[0]["params"]["x"]
        if x < 0.5:
            return super().submit(func, *args, **kwargs)
        self.submitted.append((func, args, kwargs))
        future: Future = Future()
        self.pending.append((future, x))
        self.handed.append(future)
        return future

    def finish(self) -> None:
        while self.pending:
            future, x = self.pending.pop()
            future.set_result(_complete(x))


@pytest.mark.unit
def test_the_cluster_watch_is_told_whether_trials_still_run(tmp_path: Path) -> None:
    waiting: list[bool] = []
    client = _Later()

    def watch(**kwargs: bool) -> None:
        waiting.append(kwargs["waiting"])
        client.finish()

    driver, _ = _function_driver(tmp_path, "math:fabs")
    driver = Driver(driver.sf, driver.study, client, storage_url=driver.storage_url, watch=watch)
    for x in (0.2, 0.8):  # one ends at once, the other when the watch has looked
        driver.study.enqueue_trial({"x": x})
    driver.run(trials=2, concurrency=2, timeout=None)
    assert waiting == [True, False]


@pytest.mark.unit
def test_the_heartbeat_is_written_once_30_s_have_strictly_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import search.driver._driver as module
    from search.driver._study import driver_beat_key

    clock = _Clock(1000.0)
    monkeypatch.setattr(module, "time", clock)
    beats = []
    for step in (30.0, 30.5):  # the time a trial takes, on the held clock

        def on_event(kind: str, *_: Any, step: float = step) -> None:
            if kind == "started":
                clock.now += step

        (tmp_path / str(step)).mkdir()  # the budget's lock file goes beside the storage
        driver = _instant(tmp_path / str(step), _complete, on_event=on_event)
        driver.run(trials=1, concurrency=1, timeout=None)
        beats.append(driver.study.user_attrs.get(driver_beat_key(driver.owner)))
    assert beats == [None, clock.time()]


class _InstantJobs(_Client):
    """Each submitted MPI trial has ended when submit returns, complete."""

    def submit(self, func: Any, *args: Any, **kwargs: Any) -> Future:
        self.submitted.append((func, args, kwargs))
        future: Future = Future()
        future.set_result({"state": "complete", "values": {"val_accuracy": 0.7}, "epochs_run": 4})
        return future


@pytest.mark.unit
def test_ended_untold_configurations_spend_the_budget_for_the_next_start(tmp_path: Path) -> None:
    """Budget of 3: one configuration paused alone at rung 1 before this run, two more start
    and end. Before they are told, the budget counts as spent: the paused one, its rung's best,
    is promoted at once rather than after the tells."""
    driver, _ = _driver(tmp_path)
    _paused_at_rung_1(driver)
    events: list[str] = []
    driver = Driver(
        driver.sf,
        driver.study,
        _InstantJobs(),
        storage_url=driver.storage_url,
        on_event=_kinds(events),
    )
    driver.run(trials=3, concurrency=2, timeout=None)
    assert [k for k in events if k != "tick"] == ["started"] * 3 + ["complete"] * 3
    assert driver.study.trials[-1].user_attrs[RESUME_OF_ATTR] == 0  # the promoted one


@pytest.mark.unit
def test_a_cluster_failure_tells_the_ended_trials_and_requeues_the_running_ones(
    tmp_path: Path,
) -> None:
    import warnings

    from search.clusters._watch import ClusterFailed

    client = _Later()

    def watch(**kwargs: bool) -> None:
        raise ClusterFailed("cluster", "no worker came")

    driver, _ = _function_driver(tmp_path, "math:fabs")
    driver = Driver(driver.sf, driver.study, client, storage_url=driver.storage_url, watch=watch)
    for x in (0.2, 0.8):  # one has ended, the other still runs when the cluster fails
        driver.study.enqueue_trial({"x": x})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # each told as a state, not as a missing value
        with pytest.raises(ClusterFailed):
            driver.run(trials=2, concurrency=2, timeout=None)
    ended, running, retry = driver.study.trials
    assert ended.state is TrialState.COMPLETE and ended.value == 0.2
    assert running.state is TrialState.FAIL and running.user_attrs["exit_reason"].startswith(
        "cluster failed: cluster: no worker came; parameters re-queued"
    )
    assert retry.state is TrialState.WAITING and retry.system_attrs["fixed_params"] == {"x": 0.8}
    assert [f.cancelled() for f in client.handed] == [True]  # its job is stopped


@pytest.mark.unit
def test_the_display_ticks_each_turn_with_the_trials_still_running(tmp_path: Path) -> None:
    client = _Later()
    ticks: list[tuple[Any, ...]] = []

    def on_event(kind: str, trial: Any, counts: RunCounts, result: Any) -> None:
        if trial is None:
            ticks.append((kind, counts.running, result))

    driver, _ = _function_driver(tmp_path, "math:fabs")
    driver = Driver(
        driver.sf,
        driver.study,
        client,
        storage_url=driver.storage_url,
        on_event=on_event,
        watch=lambda **_: client.finish(),
    )
    for x in (0.2, 0.8):  # one ends at once, the other a turn later
        driver.study.enqueue_trial({"x": x})
    driver.run(trials=2, concurrency=2, timeout=None)
    assert ticks == [("tick", 1, None), ("tick", 0, None)]


@pytest.fixture(scope="module")
def sim_client() -> Any:
    """An in-process Dask client: the simulated clock waits on real futures."""
    from distributed import Client

    with Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as c:
        yield c


def test_an_interrupt_tells_an_ended_simulated_trial_as_the_simulation_ended_it(
    sim_client: Any,
) -> None:
    """The pruner stopped it at its first simulated epoch: that is what is told, not the
    workload's whole answer."""
    from search.clusters._watch import ClusterFailed

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sf = parse_study(
        {
            "name": "sim",
            "objective": "simulated:sweep",
            "metric": "loss",
            "direction": "minimize",
            "pruner": "none",
            "strategy": {"name": "random", "seed": 5},
            "space": {"x": {"type": "float", "low": 0, "high": 1}},
        }
    )
    study = open_study(sf, optuna.storages.InMemoryStorage())
    study.pruner = optuna.pruners.ThresholdPruner(upper=-1.0)  # stops every trial at once

    def watch(**kwargs: bool) -> None:
        raise ClusterFailed("cluster", "gone")

    driver = Driver(sf, study, sim_client, storage_url="", watch=watch)
    with pytest.raises(ClusterFailed):
        driver.run(trials=1, concurrency=1, timeout=None)
    (trial,) = study.trials
    assert trial.state is TrialState.PRUNED and trial.user_attrs["epochs_run"] == 1
