"""The driver's per-trial path: what it reads and writes per trial, on a real LocalCluster and a
real journal file (speed itself is measured in benchmarks/scale.py, not here)."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from distributed import Client, LocalCluster
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from search.driver._driver import Driver, RunCounts
from search.driver._run import Display
from search.driver._study import DRIVER_ATTR, HEARTBEAT_ATTR, driver_beat_key, open_study
from search.studyfile._study_file import load_study_file


class CountingJournal(JournalStorage):
    """The real journal storage, counting the best-trial reads the progress display makes."""

    def __init__(self, path: str) -> None:
        super().__init__(JournalFileBackend(path))
        self.best_reads = 0

    def get_best_trial(self, study_id: int) -> optuna.trial.FrozenTrial:
        self.best_reads += 1
        return super().get_best_trial(study_id)


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    # More threads than trials run at once: a timed-out trial's thread sleeps on.
    with (LocalCluster(n_workers=1, threads_per_worker=16, processes=False,
                       dashboard_address=None) as cluster, Client(cluster) as c):
        yield c


def _study_file(tmp_path: Path, *, module: str, trials: int, sleep: float,
                extra: str = "") -> Path:
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(f"""\
        import time


        def objective(params):
            time.sleep({sleep} if params["x"] > 0.5 else 0.0)
            return params["x"]
        """))
    path = tmp_path / "study.toml"
    path.write_text(textwrap.dedent(f"""\
        name = "hot"
        objective = "{module}:objective"
        metric = "y"
        direction = "minimize"
        pruner = "none"
        [strategy]
        name = "random"
        seed = 3
        [budget]
        trials = {trials}
        concurrency = 4
        {extra}
        [space]
        x = {{ type = "float", low = 0, high = 1 }}
        """))
    return path


def _drive(tmp_path: Path, client: Client, storage: optuna.storages.BaseStorage,
           **kwargs: object) -> tuple[Driver, RunCounts, optuna.Study]:
    old = os.getcwd()
    os.chdir(tmp_path)  # "module:objective" imports from the working directory, as `search run`
    try:
        sf = load_study_file(_study_file(tmp_path, **kwargs))  # type: ignore[arg-type]
        study = open_study(sf, storage)
        driver = Driver(sf, study, client, storage_url=str(tmp_path / "s.journal"))
        counts = driver.run(trials=sf.budget.trials, concurrency=4, timeout=None)
    finally:
        os.chdir(old)
    return driver, counts, study


def test_every_trial_is_told_and_claimed_by_its_driver(tmp_path: Path, client: Client) -> None:
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "s.journal")))
    driver, counts, study = _drive(tmp_path, client, storage, module="hot_quick", trials=24,
                                   sleep=0.05)
    trials = study.get_trials()
    assert counts.complete == 24 and counts.failed == 0
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 24
    assert {t.user_attrs.get(DRIVER_ATTR) for t in trials} == {driver.owner}
    assert all(t.value == t.params["x"] for t in trials)


def test_a_function_trial_past_its_timeout_fails_and_the_rest_go_on(
    tmp_path: Path, client: Client
) -> None:
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "s.journal")))
    _, counts, study = _drive(tmp_path, client, storage, module="hot_slow", trials=8, sleep=3.0,
                              extra="trial_timeout = 1\nmax_failures = 8")
    by_state = {s: [t for t in study.get_trials() if t.state is s] for s in TrialState}
    slow = [t for t in study.get_trials() if t.params["x"] > 0.5]
    assert slow, "seed 3 should draw some x > 0.5"
    assert by_state[TrialState.FAIL] == slow
    assert all("trial_timeout of 1 s" in t.user_attrs["exit_reason"] for t in slow)
    assert counts.complete == len(by_state[TrialState.COMPLETE]) == 8  # failures do not count
    assert counts.failed == len(slow)


@pytest.mark.unit
@pytest.mark.parametrize("show_bar", [False, True])
def test_progress_reads_the_best_value_only_when_a_trial_completes(
    tmp_path: Path, show_bar: bool
) -> None:
    storage = CountingJournal(str(tmp_path / "s.journal"))
    study = optuna.create_study(study_name="bar", storage=storage)
    display = Display(study, 10, show_bar=show_bar)
    reads = storage.best_reads
    counts = RunCounts(target=10)
    for value in (3.0, 2.0, 1.0):
        trial = study.ask()
        display("started", trial, counts, None)
        display("tick", None, counts, None)
        study.tell(trial, value)
        counts.complete += 1
        display("complete", trial, counts, {"state": "complete", "values": {"value": value}})
        display("tick", None, counts, None)
    # Started trials and loop turns do not change the best value: no read for them (a bar
    # that is not drawn needs none at all).
    assert storage.best_reads - reads == (3 if show_bar else 0)
    if show_bar:
        assert display.best == "best 1"


def test_the_heartbeat_is_one_write_per_driver_not_one_per_running_trial(
    tmp_path: Path, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("search.driver._driver.HEARTBEAT_S", 0.1)
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "s.journal")))
    driver, counts, study = _drive(tmp_path, client, storage, module="hot_beat", trials=12,
                                   sleep=0.4)
    assert counts.complete == 12
    beat = study.user_attrs[driver_beat_key(driver.owner)]
    assert isinstance(beat, float)
    assert not [t.number for t in study.get_trials() if HEARTBEAT_ATTR in t.user_attrs]
