"""Several drivers, one study (issue 27): two `search run` processes on the same study share
``budget.trials`` exactly: no trial runs twice, the finished count is the budget, both exit 0.
Journal and PostgreSQL (a real server started by the tests)."""

from __future__ import annotations

import os
import subprocess
import textwrap
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.cli_helpers import search_command
from tests.search.conftest import PostgresServer
from training.contract import open_storage

BUDGET = 6


def _study(directory: Path, name: str) -> Path:
    (directory / "slowish.py").write_text(textwrap.dedent("""\
        import time

        def objective(params):
            time.sleep(0.5)
            return params["x"]
        """))
    path = directory / "study.toml"
    path.write_text(textwrap.dedent(f"""\
        name = "{name}"
        objective = "slowish:objective"
        metric = "score"
        direction = "maximize"
        pruner = "none"
        [strategy]
        name = "random"
        seed = 3
        [budget]
        trials = {BUDGET}
        concurrency = 2
        [space]
        x = {{ type = "float", low = 0, high = 1 }}
        """))
    return path


@pytest.mark.parametrize("kind", ["journal", "postgresql"])
def test_two_drivers_share_the_budget_exactly(tmp_path: Path, kind: str,
                                              request: pytest.FixtureRequest) -> None:
    name = f"two-{uuid.uuid4().hex[:8]}"
    storage = (str(tmp_path / "s.journal") if kind == "journal"
               else request.getfixturevalue("postgres_url"))
    study = _study(tmp_path, name)
    env = {k: v for k, v in os.environ.items() if k != "DETOL_STORAGE"}
    if kind == "postgresql":  # created once, so that neither driver races to create it
        subprocess.run([*search_command(), "run", str(study), "--storage", storage,
                        "--no-progress", "--trials", "1"], cwd=tmp_path, env=env, check=True,
                       capture_output=True, timeout=180)
    first = 1 if kind == "postgresql" else 0
    drivers = [subprocess.Popen([*search_command(), "run", str(study), "--storage", storage,
                                 "--no-progress"], cwd=tmp_path, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
               for _ in range(2)]
    outputs = [d.communicate(timeout=240)[0] for d in drivers]
    assert [d.returncode for d in drivers] == [0, 0], outputs
    trials = optuna.load_study(study_name=name, storage=open_storage(storage)).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * BUDGET, outputs
    # Each trial was run by one driver, once: its driver claimed it and told it once.
    assert all(t.user_attrs.get("detol:driver") for t in trials)
    said = [line for out in outputs for line in out.splitlines() if " complete " in line
            and line.lstrip().startswith("trial")]
    assert sorted(int(line.split()[1]) for line in said) == [t.number for t in trials
                                                             if t.number >= first], said


def test_the_budget_lock_rides_out_a_postgresql_restart(postgres_server: PostgresServer) -> None:
    """Found by the crash soak: the server restarted while a driver held the budget lock, and
    the lock's release (a raw connection, not a retried storage call) took the driver down with
    a traceback; taking the lock while the server is away must wait for it, as storage calls do."""
    import threading

    from search.driver._budget import budget_lock

    url = postgres_server.url
    study = optuna.create_study(study_name=f"lock-{uuid.uuid4().hex[:8]}",
                                storage=open_storage(url))
    with budget_lock(study, url):
        postgres_server.stop()  # the lock's session dies with the server
        postgres_server.start()
    postgres_server.stop()
    back = threading.Timer(1.0, postgres_server.start)  # the server comes back while we wait
    back.start()
    try:
        with budget_lock(study, url):
            study.ask()
    finally:
        back.join()
    assert len(study.get_trials()) == 1
