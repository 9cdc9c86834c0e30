"""A study on a real PostgreSQL server: driver and every trial's rank 0 share it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.cli_helpers import search_command
from training.contract import open_storage

pytestmark = pytest.mark.mpi


def test_study_on_postgresql(postgres_url: str, write_study: Callable[..., Path]) -> None:
    study_file = write_study(
        top='pruner = "none"\nstrategy = "random"',
        training={"epochs": "2", "ranks": "1", "hidden": "16"},
        tail="[budget]\ntrials = 2\nconcurrency = 2",
    )
    done = subprocess.run([*search_command(), "run", str(study_file), "--storage", postgres_url,
                           "--no-progress"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    password = postgres_url.split(":")[2].split("@")[0]
    assert password not in done.stdout + done.stderr  # the URL is shown redacted
    study = optuna.load_study(study_name="t", storage=open_storage(postgres_url))
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    for t in trials:
        assert sorted(t.intermediate_values) == [1, 2]  # reported by rank 0 into PostgreSQL
        assert password not in str(t.user_attrs)


def test_wrong_password_is_a_clear_error_without_the_password(postgres_url: str) -> None:
    bad = postgres_url.replace("pg-secret-123", "wrong-pass-456")
    with pytest.raises(ValueError) as info:
        open_storage(bad)
    message = str(info.value)
    assert "cannot connect to" in message and "password authentication failed" in message
    assert "wrong-pass-456" not in message


def _clients_ask_and_tell(url: str, name: str, trials: int) -> int:
    """One client process: ``trials`` ask + report + tell on the shared study."""
    study = optuna.load_study(study_name=name, storage=open_storage(url))
    for _ in range(trials):
        trial = study.ask()
        x = trial.suggest_float("x", 0, 1)
        trial.report(x, step=0)
        study.tell(trial, x)
    return trials


def test_four_concurrent_clients_fifty_trials_each(postgres_url: str) -> None:
    import multiprocessing

    name = "concurrent-clients"
    optuna.create_study(study_name=name, storage=open_storage(postgres_url))
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        done = pool.starmap(_clients_ask_and_tell, [(postgres_url, name, 50)] * 4)
    assert done == [50] * 4  # no client raised (no lock or serialization error)
    trials = optuna.load_study(study_name=name, storage=open_storage(postgres_url)).get_trials()
    assert len(trials) == 200
    assert all(t.state is TrialState.COMPLETE for t in trials)
    assert sorted(t.number for t in trials) == list(range(200))  # numbers unique, none skipped
    assert all(t.intermediate_values == {0: t.value} for t in trials)


# ~20 s: in the slow tier (default run time); four clients racing on one PostgreSQL study run
# by default (test_four_concurrent_clients_fifty_trials_each, test_study_on_postgresql, and two
# drivers in test_two_drivers.py and test_multinode.py).
@pytest.mark.slow
def test_search_run_four_workers_two_hundred_trials(postgres_url: str, tmp_path: Path) -> None:
    (tmp_path / "quick.py").write_text("def objective(params):\n    return params['x'] ** 2\n")
    (tmp_path / "study.toml").write_text(
        'name = "pg-four-workers"\nobjective = "quick:objective"\nmetric = "y"\n'
        'direction = "minimize"\npruner = "none"\n[strategy]\nname = "random"\nseed = 0\n'
        "[budget]\ntrials = 200\nconcurrency = 4\n"
        '[space]\nx = { type = "float", low = -1, high = 1 }\n'
    )
    done = subprocess.run([*search_command(), "run", "study.toml", "--storage", postgres_url,
                           "--no-progress"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    password = postgres_url.split(":")[2].split("@")[0]
    assert password not in done.stdout + done.stderr
    study = optuna.load_study(study_name="pg-four-workers", storage=open_storage(postgres_url))
    trials = study.get_trials()
    assert len(trials) == 200 and all(t.state is TrialState.COMPLETE for t in trials)
    assert all(t.value == t.params["x"] ** 2 for t in trials)
    stored = json.dumps([t.user_attrs for t in trials] + [study.user_attrs], default=str)
    assert password not in stored


def test_ask_reads_the_queue_without_reloading_every_running_trial(postgres_url: str) -> None:
    storage = open_storage(postgres_url)
    study = optuna.create_study(study_name="ask-queue", storage=storage,
                                sampler=optuna.samplers.RandomSampler(seed=0))
    running = [study.ask() for _ in range(20)]
    study.enqueue_trial({"x": 0.25})
    cache = storage._inner  # noqa: SLF001 - Optuna's cache over the database
    reloads = []
    sync = cache._read_trials_from_remote_storage  # noqa: SLF001
    cache._read_trials_from_remote_storage = lambda sid: (reloads.append(sid), sync(sid))[1]
    queued = study.ask()
    fresh = study.ask()
    assert reloads == []  # before: one reload of all 20 RUNNING trials per ask
    assert queued.suggest_float("x", 0, 1) == 0.25  # the queued trial comes first, as before
    assert queued.number == 20 and fresh.number == 21
    for trial in [*running, queued, fresh]:
        study.tell(trial, 0.0)
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 22
    assert reloads  # the cache is still used for everything else


def _open_at_once(url: str, barrier, errors) -> None:  # a forked process
    barrier.wait()
    try:
        open_storage(url)
    except Exception as exc:  # noqa: BLE001 - what a driver would have stopped with
        errors.put(f"{type(exc).__name__}: {exc}")
    else:
        errors.put("")


def test_processes_that_open_a_new_database_at_once_all_get_it(postgres_url: str) -> None:
    """Found by the crash soak: two processes opening an empty database at the same moment both
    made Optuna's tables, and the later stopped with "cannot connect ...: duplicate key value
    violates unique constraint "pg_type_typname_nsp_index"" (two drivers started together; red
    in 5 rounds of 5 before the fix)."""
    import multiprocessing
    import os

    from tests.pg_server import PASSWORD, pg_bin

    base, _, _ = postgres_url.rpartition("/")
    port = base.rsplit(":", 1)[1]
    ctx = multiprocessing.get_context("fork")
    for round_ in range(2):  # each round on a database no one has opened
        name = f"fresh_{os.getpid()}_{round_}"
        subprocess.run([pg_bin("createdb"), "-h", "127.0.0.1", "-p", port, "-U", "detol", name],
                       check=True, env={**os.environ, "PGPASSWORD": PASSWORD}, timeout=60)
        barrier, errors = ctx.Barrier(4), ctx.Queue()
        openers = [ctx.Process(target=_open_at_once, args=(f"{base}/{name}", barrier, errors))
                   for _ in range(4)]
        for p in openers:
            p.start()
        found = [errors.get(timeout=120) for _ in openers]
        for p in openers:
            p.join()
        assert found == [""] * 4, found
