"""Real pause-and-promote studies against the replay (issue 28, items 7 and 8): a study the
driver ran makes the same decisions when its recorded curves are replayed (one rule), also when
the driver was SIGKILLed between a pause and its promotion and the study was resumed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from search.pruners._promotion import PAUSED_ATTR, RESUME_OF_ATTR, PromotingHalving, lineage
from search.pruners._replay import replay
from tests.cli_helpers import run_search
from training.contract import open_storage

EPOCHS = 4


def _study_file(directory: Path, trials: int = 6, extra: str = "") -> Path:
    path = directory / "study.toml"
    path.write_text(textwrap.dedent(f"""\
        name = "one-rule"
        [budget]
        trials = {trials}
        concurrency = 1
        [strategy]
        name = "random"
        seed = 3
        [pruner]
        name = "asha"
        promote = true
        min_epochs = 1
        reduction_factor = 2
        [training]
        dataset = "digits"
        epochs = {EPOCHS}
        ranks = 1
        {extra}
        [space]
        lr = {{ type = "float", low = 3e-3, high = 0.1, log = true }}
        hidden = {{ type = "int", low = 4, high = 32 }}
        """))
    return path


def _decisions(trials: list[optuna.trial.FrozenTrial]) -> tuple[list, list[list[float]]]:
    """(configuration, first epoch trained, last epoch, state) per trial in number order, and
    each configuration's curve (its lineage's values, padded with the last one: epochs that
    the run never trained must not be trained by the replay either)."""
    starts = sorted({lineage(t) for t in trials})
    index = {n: i for i, n in enumerate(starts)}
    curves: dict[int, dict[int, float]] = {}
    out = []
    for t in sorted(trials, key=lambda t: t.number):
        c = index[lineage(t)]
        curves.setdefault(c, {}).update(t.intermediate_values)
        first = int(t.user_attrs.get("start_epoch", 1))
        out.append((c, first, t.last_step, t.state.name))
    padded = []
    for c in range(len(starts)):
        values = [curves[c][e] for e in sorted(curves[c])]
        padded.append(values + [values[-1]] * (EPOCHS - len(values)))
    return out, padded


def _replayed(curves: list[list[float]]) -> list:
    run = replay(curves, PromotingHalving(1, 2, max_resource=EPOCHS), concurrency=1,
                 order=range(len(curves)))
    assert run.study is not None
    first = {}
    for c, a, b in run.segments:
        first.setdefault((c, b), a)
    return [(int(t.params["config"]), first[(int(t.params["config"]), t.last_step)],
             t.last_step, t.state.name)
            for t in sorted(run.study.get_trials(deepcopy=False), key=lambda t: t.number)]


def _check_study(storage: str) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name="one-rule", storage=open_storage(storage),
                              pruner=PromotingHalving(1, 2, max_resource=EPOCHS))
    trials = study.get_trials(deepcopy=False)
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials), [
        (t.number, t.state.name, t.user_attrs.get("exit_reason")) for t in trials]
    by_number = {t.number: t for t in trials}
    for t in trials:
        if RESUME_OF_ATTR in t.user_attrs:
            parent = by_number[t.user_attrs[RESUME_OF_ATTR]]
            assert t.user_attrs["start_epoch"] == parent.user_attrs[PAUSED_ATTR] + 1
    pruner = study.pruner
    assert isinstance(pruner, PromotingHalving)
    assert pruner.promotable(study, finishing=True) == []  # nothing left behind
    return trials


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(1500)  # a real study on a busy machine
def test_a_recorded_study_replays_to_the_same_decisions(tmp_path: Path) -> None:
    storage = str(tmp_path / "s.journal")
    code, out, err = run_search("run", str(_study_file(tmp_path)), "--storage", storage,
                                "--no-progress", cwd=tmp_path, timeout=900)
    assert code == 0, out + err
    trials = _check_study(storage)
    real, curves = _decisions(trials)
    assert any(RESUME_OF_ATTR in t.user_attrs for t in trials), "nothing was promoted"
    assert _replayed(curves) == real


_KILLER = textwrap.dedent("""\
    import os, signal, sys
    from pathlib import Path
    from search.driver._driver import Driver
    from search.driver._run import _started, plan_run

    plan = plan_run(Path(sys.argv[1]), storage=sys.argv[2], trials=None, concurrency=None)

    def on_event(kind, trial, counts, result):
        if kind == "pruned" and trial is not None and "detol:paused_at" in trial.user_attrs:
            Path(sys.argv[3]).write_text(str(trial.number))  # told paused, not yet promoted
            os.kill(os.getpid(), signal.SIGKILL)

    with _started(plan) as (cluster, study):
        Driver(plan.sf, study, cluster.client, storage_url=plan.url, on_event=on_event,
               single_node=True).run(trials=plan.target, concurrency=1, timeout=None)
    """)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(1500)  # two real studies on a busy machine
def test_a_driver_killed_between_a_pause_and_its_promotion_resumes_promoting(
    tmp_path: Path,
) -> None:
    study_file = _study_file(tmp_path)
    storage = str(tmp_path / "s.journal")
    marker = tmp_path / "paused"
    proc = subprocess.Popen([sys.executable, "-c", _KILLER, str(study_file), storage,
                             str(marker)], cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=600)
    finally:
        with contextlib.suppress(ProcessLookupError):  # its Dask workers and MPI jobs go
            os.killpg(proc.pid, signal.SIGKILL)  # with it, as with a lost machine
    assert proc.returncode == -signal.SIGKILL, output
    paused = int(marker.read_text())
    study = optuna.load_study(study_name="one-rule", storage=open_storage(storage))
    assert not [t for t in study.trials if t.user_attrs.get(RESUME_OF_ATTR) == paused]
    # Resumed with a setting a checkpoint restores across (issue 28, item 1): the parents
    # paused before the kill are promoted from checkpoints written with bucket_kb 256.
    study_file = _study_file(tmp_path, extra="bucket_kb = 128")
    code, out, err = run_search("run", str(study_file), "--storage", storage, "--no-progress",
                                cwd=tmp_path, timeout=900)
    assert code == 0, out + err
    trials = _check_study(storage)  # no continuation failed
    restored = [t for t in trials if t.user_attrs.get(RESUME_OF_ATTR, paused + 1) <= paused]
    assert restored, "no checkpoint of the first run was restored by the second"
    # The resumed run decided as one uninterrupted driver would on the same curves.
    real, curves = _decisions(trials)
    assert _replayed(curves) == real
    assert sum(RESUME_OF_ATTR not in t.user_attrs for t in trials) == 6
