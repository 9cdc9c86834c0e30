"""[resize]: a promoted trial trains wider (issue 31). The study-file checks, then one real
study whose promoted trials continue from 1-rank checkpoints on 2 ranks."""

from __future__ import annotations

import textwrap
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from search._errors import StudyError
from search.driver._resize import SEGMENTS_ATTR, WIDEN_ATTR, WIDTH_ATTR
from search.driver._study import RETRY_ATTR
from search.pruners._promotion import RESUME_OF_ATTR
from search.studyfile._study_file import parse_study
from tests.cli_helpers import run_search
from training.contract import open_storage


def _log_tail(trial: optuna.trial.FrozenTrial) -> str:
    """The end of a failed trial's kept MPI output, so a failure in CI says why."""
    path = trial.user_attrs.get("log_path")
    return Path(path).read_text(errors="replace")[-1500:] if path and Path(path).exists() else ""


def _study(**tables: dict) -> dict:
    return {"name": "r", "pruner": {"name": "asha", "promote": True},
            "resize": {"factor": 2, "max_ranks": 4}, **tables}


@pytest.mark.unit
def test_resize_widens_the_cluster_and_needs_promotion() -> None:
    assert parse_study(_study()).max_ranks == 4  # workers are sized for the widest segment
    with pytest.raises(StudyError, match=r"resize: widens a trial when it is promoted: set "
                                         r"\[pruner\] promote = true"):
        parse_study(_study(pruner={"name": "asha"}))
    with pytest.raises(StudyError, match=r"resize.max_ranks: is 2, narrower than trials start "
                                         r"\(3 ranks\)"):
        parse_study(_study(resize={"max_ranks": 2}, training={"ranks": 3}))
    with pytest.raises(StudyError, match=r"resize.factor"):
        parse_study(_study(resize={"factor": 1}))
    with pytest.raises(StudyError, match=r"resize.maximum"):
        parse_study(_study(resize={"maximum": 8}))


@pytest.mark.mpi
@pytest.mark.timeout(900)
def test_promoted_trials_continue_wider_from_their_narrow_checkpoints(tmp_path: Path) -> None:
    study_file = tmp_path / "study.toml"
    study_file.write_text(textwrap.dedent("""\
        name = "wide"
        [budget]
        trials = 4
        concurrency = 2
        [strategy]
        name = "random"
        seed = 3
        [pruner]
        name = "asha"
        promote = true
        min_epochs = 2
        reduction_factor = 2
        [resize]
        factor = 2
        max_ranks = 2
        [training]
        dataset = "digits"
        epochs = 4
        ranks = 1
        hidden = 16
        [space]
        lr = { type = "float", low = 1e-2, high = 0.3, log = true }
        """))
    storage = str(tmp_path / "s.journal")
    code, out, err = run_search("run", str(study_file), "--storage", storage, "--no-progress",
                                cwd=tmp_path, timeout=600)
    assert code == 0, out + err
    trials = optuna.load_study(study_name="wide", storage=open_storage(storage)).trials
    by_number = {t.number: t for t in trials}
    continuations = [t for t in trials if RESUME_OF_ATTR in t.user_attrs]
    assert continuations, "nothing was promoted"
    # Every trial ended COMPLETE or PRUNED, except one whose worker was lost (a loaded CI
    # machine): that one is FAIL, re-queued by design, and its retry ended so.
    retried = {t.user_attrs[RETRY_ATTR] for t in trials if RETRY_ATTR in t.user_attrs
               and t.state in (TrialState.COMPLETE, TrialState.PRUNED)}
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED)
               or (t.user_attrs.get("detol:requeued") and t.number in retried)
               for t in trials), [
        (t.number, t.state.name, t.user_attrs.get("exit_reason"), _log_tail(t)) for t in trials]
    trials = [t for t in trials if t.state != TrialState.FAIL]
    continuations = [t for t in trials if RESUME_OF_ATTR in t.user_attrs]
    for t in trials:
        if RESUME_OF_ATTR not in t.user_attrs:
            assert t.user_attrs[WIDTH_ATTR] == 1 and t.user_attrs["ranks"] == 1
    for t in continuations:
        parent = by_number[t.user_attrs[RESUME_OF_ATTR]]
        # Twice as wide as the segment that paused, capped at max_ranks, and it ran so.
        assert t.user_attrs[WIDTH_ATTR] == min(2, 2 * parent.user_attrs[WIDTH_ATTR])
        assert t.user_attrs["ranks"] == t.user_attrs[WIDTH_ATTR] == 2
        resumed_at = t.user_attrs["detol:resume_from"]["epoch"]  # a retry: its lost run's
        assert t.user_attrs["start_epoch"] == resumed_at + 1
        if RETRY_ATTR not in t.user_attrs:
            assert resumed_at == parent.user_attrs["detol:paused_at"]
        # Every segment recorded with its width, epochs and rank-seconds.
        segments = t.user_attrs[SEGMENTS_ATTR]
        assert segments[-1] == {"trial": t.number, "ranks": 2,
                                "epochs": t.user_attrs["epochs_run"],
                                "rank_seconds": pytest.approx(t.user_attrs["rank_seconds"])}
        assert segments[0]["ranks"] == 1 and segments[0]["trial"] == t.user_attrs.get(
            "detol:lineage", segments[0]["trial"])
        assert sum(s["rank_seconds"] for s in segments) == pytest.approx(
            t.user_attrs["detol:lineage_rank_seconds"])
        # Sync on 2 ranks continues the 1-rank run: the curve goes on as one rank's would.
        assert t.user_attrs["history"][-1]["val_accuracy"] > 0.5
    # The study's end (the 4th configuration started, slots idle in the workers): the running
    # 1-rank trials were marked to take them, paused between rungs (the only rung is epoch 2)
    # and went on 2 ranks wide from their checkpoints. The driver marks a trial right after
    # submitting it; a cold job's imports (seconds) come before its first report.
    marked = [t for t in trials if WIDEN_ATTR in t.system_attrs]
    assert marked and all(t.system_attrs[WIDEN_ATTR] == 2 for t in marked)
    between = [t for t in continuations
               if by_number[t.user_attrs[RESUME_OF_ATTR]].user_attrs["detol:paused_at"] != 2]
    assert between, "no trial paused between rungs to take idle slots"
    for t in between:
        assert WIDEN_ATTR in by_number[t.user_attrs[RESUME_OF_ATTR]].system_attrs
        assert t.user_attrs["ranks"] == 2
    # Cold jobs: every continuation read its checkpoint file (no warm pool holds it).
    assert all(t.user_attrs["restored_from"] == "store" for t in continuations)
