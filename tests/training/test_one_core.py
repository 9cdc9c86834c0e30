"""One core, two front doors: the built-in trainer is a user of training.Session, the API own
loops get. Each test would fail if the trainer reported, checkpointed, agreed or reduced its
validation sums on a private path (in-process, on COMM_SELF; the real jobs are in
test_checkpoints.py, test_own_loop.py and tests/search/test_rank_invariance.py)."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from mpi4py import MPI

import training.session._session as session_module
from training.contract import TrainConfig
from training.jobs._trainer import Trainer
from training.session import CONTINUE, PAUSE, Decision
from training.session._session import Session
from training.state._checkpoint import Checkpointer
from training.storage._artifacts import CheckpointPlan

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

CONFIG = TrainConfig(dataset="digits", epochs=4, ranks=1, hidden=16, lr=0.05, batch_size=64)


class PauseAt:
    """Rank 0's reporter: records every row, pauses the trial after ``epoch``."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.rows: list[dict[str, float]] = []

    def decide(self, epoch: int, row: Mapping[str, float]) -> Decision:
        self.rows.append(dict(row))
        return PAUSE if epoch == self.epoch else CONTINUE


def _checkpointer(store: Path) -> Checkpointer:
    store.mkdir(exist_ok=True)

    def upload(path: str, epoch: int) -> str:
        shutil.copy(path, store / f"e{epoch}")
        return f"e{epoch}"

    def download(artifact_id: str, path: str) -> None:
        shutil.copy(store / artifact_id, path)

    return Checkpointer(CheckpointPlan(store=str(store)), MPI.COMM_SELF, upload=upload,
                        download=download)


def _session(reporter: Any = None, checkpointer: Any = None, **more: Any) -> Session:
    return Session(comm=MPI.COMM_SELF, reporter=reporter, checkpointer=checkpointer,
                   identity=CONFIG.model_dump(), epochs=CONFIG.epochs, **more)


def test_the_trainer_pauses_saves_and_resumes_through_its_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int, int]] = []
    real_agree = session_module.agree

    def spy(ctrl: Any, call: int, number: int, epoch: int, timeout_s: float) -> None:
        calls.append((call, number, epoch))
        real_agree(ctrl, call, number, epoch, timeout_s)

    monkeypatch.setattr(session_module, "agree", spy)
    reporter = PauseAt(2)
    session = _session(reporter, _checkpointer(tmp_path / "store"))
    result = Trainer(CONFIG, session).train()
    assert result.state == "paused" and result.exit_reason == "paused after epoch 2"
    # the session's report: rank 0's reporter saw the trainer's rows, the session kept them
    assert [row["epoch"] for row in reporter.rows] == [1, 2] == [r["epoch"] for r in result.history]
    assert reporter.rows == session.history == result.history
    # every call went through the bounded agreement: two reports, the save, the end
    assert calls == [(1, 1, 1), (1, 2, 2), (2, 2, 2), (3, 2, 2)]
    # the pause saved through session.save_checkpoint, as a checkpoint that reshards
    assert session.checkpoint == result.checkpoint == {"id": "e2", "epoch": 2}
    saved = torch.load(tmp_path / "store" / "e2", weights_only=True)
    assert saved["reshard"] is True and saved["algorithm"] == "sync"
    assert [r["epoch"] for r in saved["history"]] == [1, 2]

    # A promotion: a new session resumes from it; the trainer takes its state and curve.
    again = _session(checkpointer=_checkpointer(tmp_path / "store"), resume_from="e2")
    resumed = Trainer(CONFIG, again).train()
    assert resumed.state == "complete" and resumed.start_epoch == 3
    assert [r["epoch"] for r in resumed.history] == [1, 2, 3, 4]
    assert again.reports == 2 and again.last_epoch == 4
    # training seconds of the paused segment are carried by the session's clock
    assert resumed.history[2]["train_time_s"] > result.history[1]["train_time_s"]


def test_the_trainers_rows_are_checked_by_the_session_like_an_own_loops(tmp_path: Path) -> None:
    session = _session(objectives=["val_nope"])
    with pytest.raises(ValueError, match=r"report\(epoch=1\) has no 'val_nope', the study's"):
        Trainer(CONFIG, session).train()


def test_the_trainers_validation_is_reduced_by_session_reduce(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[dict[str, tuple[float, float]]] = []
    real = Session.reduce

    def spy(self: Session, sums: Mapping[str, tuple[float, float]]) -> dict[str, float]:
        seen.append(dict(sums))
        return real(self, sums)

    monkeypatch.setattr(Session, "reduce", spy)
    config = CONFIG.model_copy(update={"epochs": 1})
    result = Trainer(config, _session()).train()
    sums = seen[0]  # the validation pass (then the test set's)
    correct, count = sums["accuracy"]
    assert count > 0 and correct == int(correct)  # whole samples, counted exactly
    assert result.values["val_accuracy"] == correct / count


def test_reduce_divides_total_sums_by_total_counts_and_names_a_bad_pair() -> None:
    session = _session()
    assert session.reduce({"a": (3, 4), "b": (0, 0)}) == {"a": 0.75, "b": 0.0}
    assert session.mean({"a": 0.5}, weight=3) == {"a": 0.5}
    with pytest.raises(TypeError, match=r"reduce: 'a' must be a \(sum, count\) pair"):
        session.reduce({"a": 0.5})  # type: ignore[dict-item]
    session.finish()


def test_a_trainer_given_a_session_refuses_its_own_reporter() -> None:
    with pytest.raises(ValueError, match="the session holds the reporter"):
        Trainer(CONFIG, _session(), reporter=PauseAt(1))



@pytest.mark.parametrize("reshard", [True, False])
def test_an_own_loops_checkpoint_saved_with_reshard_restores_on_another_rank_count(
    tmp_path: Path, reshard: bool
) -> None:
    # What the trainer's checkpoints do, an own loop gains: two asgd ranks' states written with
    # reshard=True restore on one rank as their mean (training.state._reshard); without, refused.
    identity = {"objective": "mine:train", "params": {"lr": 0.1}}
    writer = Session(comm=MPI.COMM_SELF, checkpointer=_checkpointer(tmp_path / "store"),
                     identity=identity)
    model = torch.nn.Linear(2, 1)
    writer.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), algorithm="asgd")
    writer.report(1, {"loss": 1.0})
    writer.save_checkpoint({"w": torch.zeros(3)}, reshard=reshard)
    writer.finish()
    path = tmp_path / "store" / "e1"
    saved = torch.load(path, weights_only=True)
    assert saved.get("algorithm") == ("asgd" if reshard else None)
    # as if two ranks had written it: rank 1's state is all twos
    saved.update(ranks=2, rank_states=[{"w": torch.zeros(3)}, {"w": torch.full((3,), 2.0)}])
    torch.save(saved, path)
    if not reshard:
        with pytest.raises(ValueError, match="written by 2 ranks; this job has 1"):
            Session(comm=MPI.COMM_SELF, checkpointer=_checkpointer(tmp_path / "store"),
                    identity=identity, resume_from="e1")
        return
    reader = Session(comm=MPI.COMM_SELF, checkpointer=_checkpointer(tmp_path / "store"),
                     identity=identity, resume_from="e1")
    state = reader.load_checkpoint()
    assert state is not None and torch.equal(state["w"], torch.ones(3))  # the two ranks' mean
    reader.finish()


def test_reshard_needs_the_algorithm_the_loop_wrapped_with(tmp_path: Path) -> None:
    session = Session(comm=MPI.COMM_SELF, checkpointer=_checkpointer(tmp_path / "store"),
                      identity={"objective": "mine:train", "params": {}})
    session.report(1, {"loss": 1.0})
    with pytest.raises(ValueError, match=r"reshard=True\) needs exactly one algorithm: wrap"):
        session.save_checkpoint({"w": torch.zeros(1)}, reshard=True)
