"""Issue 5's resume promise, end to end: a driver SIGKILLed mid-study, `search run` again, and
the study completes its budget with no evaluation repeated that the strategy would not repeat."""

from __future__ import annotations

import json
import os
import signal
import textwrap
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.search.test_faults import _start, _states, _trials, _wait_for
from training.contract import open_storage

OBJECTIVE = """
import time

def objective(params):
    time.sleep(0.25)
    genome = params["genome"]
    convs = sum(op == "nor_conv_3x3" for op in genome.edges)
    return convs + 0.1 * params["x"]
"""


@pytest.mark.parametrize("strategy", ["evolution", "reinforce", "tpe"])
def test_killed_driver_resumes_the_strategy(tmp_path: Path, strategy: str) -> None:
    (tmp_path / "cells.py").write_text(textwrap.dedent(OBJECTIVE))
    study = tmp_path / "study.toml"
    study.write_text(textwrap.dedent(f"""\
        name = "faults"
        objective = "cells:objective"
        metric = "score"
        direction = "maximize"
        pruner = "none"
        [strategy]
        name = "{strategy}"
        seed = 11
        [budget]
        trials = 24
        concurrency = 2
        [space]
        x = {{ type = "float", low = 0, high = 1 }}
        [space.genome]
        family = "cell"
        """))
    storage = str(tmp_path / "s.journal")
    proc = _start(study, storage, tmp_path)

    def halfway() -> bool:
        try:
            return sum(t.state is TrialState.COMPLETE for t in _trials(storage)) >= 12
        except KeyError:
            return False

    _wait_for(halfway, "12 finished trials")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    first = _trials(storage)
    orphans = [t.number for t in first if t.state is TrialState.RUNNING]

    again = _start(study, storage, tmp_path)
    out, err = again.communicate(timeout=180)
    assert again.returncode == 0, out + err
    trials = _trials(storage)
    assert _states(trials) == {"COMPLETE": 24, "FAIL": len(orphans)}
    complete = [t for t in trials if t.state is TrialState.COMPLETE]
    keys = [json.dumps(t.params, sort_keys=True) for t in complete]
    assert len(set(keys)) == len(keys), "a parameter set was evaluated twice"
    # The restarted driver went on from the stored trials instead of replaying its first ones.
    resumed = [t for t in complete if t.number >= len(first)]
    first_params = [json.dumps(t.params, sort_keys=True) for t in first[: len(resumed)]]
    assert [json.dumps(t.params, sort_keys=True) for t in resumed] != first_params
    best = optuna.load_study(study_name="faults", storage=open_storage(storage)).best_value
    assert best >= 2.0  # at least two 3x3 convolutions found in 24 trials (random: ~1.2 on average)
