"""The Session's rules on one rank (training/session/_session.py): what ``report`` records and
returns, the outcome of each way a loop can end, checkpoints due and saved, the reductions,
and every misuse named in one line. The agreement between ranks and whole own loops run under
mpiexec (tests/training/test_own_loop.py); the trainer's use of the session in
tests/training/test_one_core.py."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytest
import torch
from mpi4py import MPI

from training.session._decisions import CONTINUE, PAUSE, STOP
from training.session._session import Session, describe_device, pick_device
from training.storage import CheckpointPlan

pytestmark = pytest.mark.unit


class _Says:
    """A reporter that answers each epoch from a table (default continue) and keeps the rows."""

    def __init__(self, **by_epoch: str) -> None:
        self.by_epoch = {int(k.removeprefix("e")): v for k, v in by_epoch.items()}
        self.rows: list[Mapping[str, float]] = []

    def decide(self, epoch: int, row: Mapping[str, float]) -> str:
        self.rows.append(dict(row))
        return self.by_epoch.get(epoch, CONTINUE)


class _Store:
    """A checkpointer that keeps what it is given (one rank)."""

    def __init__(self, every: int = 0, resume: Any = None) -> None:
        self.plan = CheckpointPlan(store="/nowhere", every=every)
        self.saved: list[tuple[dict, dict]] = []
        self.resume = resume

    def save(self, header: dict, state: dict) -> str:
        self.saved.append((header, state))
        return f"artifact-{len(self.saved)}"

    def load(self, artifact: str, identity: dict) -> Any:
        return self.resume


def _session(**kw: Any) -> Session:
    return Session(comm=MPI.COMM_SELF, **kw)


def test_report_records_rows_and_returns_the_reporters_decision() -> None:
    says = _Says(e2=STOP)
    s = _session(reporter=says, objectives=["val_accuracy"])
    assert s.report(1, {"val_accuracy": 0.5, "val_loss": 2}) == CONTINUE
    assert s.report(2, {"val_accuracy": 0.6}) == STOP
    assert s.reports == 2 and s.last_epoch == 2 and s.start_epoch == 1
    assert [r["epoch"] for r in s.history] == [1, 2] and s.history[0]["val_loss"] == 2.0
    assert "train_time_s" in says.rows[0] and says.rows[0]["train_time_s"] >= 0.0
    assert s.outcome() == ("pruned", "pruned after epoch 2")


def test_a_report_without_the_study_metric_or_with_a_non_number_is_one_line() -> None:
    s = _session(objectives=["val_accuracy"])
    with pytest.raises(ValueError, match=r"^report\(epoch=1\) has no 'val_accuracy', the "
                       r"study's metric \(reported: \['loss'\]\)$"):
        s.report(1, {"loss": 1.0})
    s = _session(objectives=["val_accuracy"])
    with pytest.raises(ValueError, match=r"reported: nothing\)$"):
        s.report(1, {})
    s = _session()
    with pytest.raises(TypeError, match=r"^report\(epoch=1\): metric 'acc' is 'high', not a "
                       "number$"):
        s.report(1, {"acc": "high"})
    with pytest.raises(TypeError, match=r"metrics must be a dict of numbers, got list"):
        _session().report(1, [0.5])  # type: ignore[arg-type]
    for bad in (True, 1.5, "2"):
        with pytest.raises(TypeError, match="report: epoch must be an int"):
            _session().report(bad, {"a": 1.0})  # type: ignore[arg-type]


def test_a_pause_without_a_checkpoint_store_is_a_stop() -> None:
    s = _session(reporter=_Says(e1=PAUSE))
    assert s.report(1, {"a": 1.0}) == STOP and s.decision == STOP
    assert s.checkpoint_due() is False


def test_a_paused_trial_that_saved_is_paused_and_one_that_did_not_is_pruned() -> None:
    store = _Store()
    s = _session(reporter=_Says(e3=PAUSE), checkpointer=store)
    s.report(3, {"a": 1.0})
    assert s.decision == PAUSE and s.checkpoint_due() is True
    assert s.outcome() == ("pruned", "pruned after epoch 3: the pruner paused it but train() "
                                      "returned without session.save_checkpoint")
    s.save_checkpoint({"w": torch.zeros(2)})
    assert s.outcome() == ("paused", "paused after epoch 3")
    header, state = store.saved[0]
    assert header["epoch"] == 3 and header["ranks"] == 1 and "reshard" not in header
    assert header["history"] == s.history and header["train_time_s"] >= 0.0
    assert s.checkpoint == {"id": "artifact-1", "epoch": 3} and s.saved_after == 1


def test_checkpoints_are_due_every_n_epochs_after_a_report_only() -> None:
    s = _session(checkpointer=_Store(every=2))
    assert s.checkpoint_due() is False  # nothing reported yet
    s.report(1, {"a": 1.0})
    assert s.checkpoint_due() is False
    s.report(2, {"a": 1.0})
    assert s.checkpoint_due() is True


def test_the_outcome_of_each_ending() -> None:
    assert _session().outcome() == (
        "failed", "train() returned without calling session.report: no values")
    s = _session(objectives=["val_loss"])
    s.report(1, {"val_loss": 1.0})
    s.report(2, {"val_loss": 0.5})
    assert s.outcome() == ("complete", "completed: 2 report(s), last epoch 2")
    bad = _session(objectives=["val_loss", "val_accuracy"])
    bad.report(4, {"val_loss": math.nan, "val_accuracy": math.inf})
    assert bad.outcome() == ("failed", "diverged: val_accuracy, val_loss not finite at epoch 4")
    other = _session(objectives=["val_loss"])
    other.report(1, {"val_loss": 1.0, "extra": math.nan})  # only the study's metrics count
    assert other.outcome()[0] == "complete"


def test_save_checkpoint_needs_a_store_and_a_dict() -> None:
    with pytest.raises(RuntimeError, match="^save_checkpoint: this trial has no checkpoint "
                       "store"):
        _session().save_checkpoint({})
    s = _session(checkpointer=_Store())
    with pytest.raises(TypeError, match="state must be a dict, got list"):
        s.save_checkpoint([])  # type: ignore[arg-type]


def test_a_resharded_checkpoint_names_the_one_algorithm() -> None:
    store = _Store()
    s = _session(checkpointer=store, identity={"algorithm": "asgd", "lr": 0.1})
    s.report(1, {"a": 1.0})
    s.save_checkpoint({"w": torch.zeros(1)}, reshard=True)
    assert store.saved[0][0]["reshard"] is True and store.saved[0][0]["algorithm"] == "asgd"
    assert store.saved[0][0]["config"] == {"algorithm": "asgd", "lr": 0.1}
    own = _session(checkpointer=_Store())
    own.report(1, {"a": 1.0})
    with pytest.raises(ValueError, match=r"needs exactly one algorithm: wrap the optimizer "
                       r"first \(wrapped: none\)"):
        own.save_checkpoint({}, reshard=True)
    model = torch.nn.Linear(2, 1)
    own.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), algorithm="sync")
    own.save_checkpoint({}, reshard=True)


def test_a_resumed_session_continues_after_the_checkpoints_epoch() -> None:
    header = {"epoch": 4, "history": [{"epoch": 4, "a": 1.0}], "train_time_s": 12.5}
    store = _Store(resume=(header, {"w": 1, "detol_pruned": {"widths": [1]}}))
    s = _session(checkpointer=store, resume_from="artifact-9")
    assert s.start_epoch == 5 and s.last_epoch == 4 and s.history == header["history"]
    assert s.load_checkpoint() == {"w": 1}  # what the loop saved, not our pruning record
    assert s.train_time_s() >= 12.5
    with pytest.raises(ValueError, match=r"^report\(epoch=4\): this trial resumed from the "
                       "checkpoint of epoch 4"):
        s.report(4, {"a": 1.0})
    s.report(5, {"a": 2.0})
    assert [r["epoch"] for r in s.history] == [4, 5] and s.start_epoch == 5
    with pytest.raises(ValueError, match="resume_from is set but the trial has no checkpoint"):
        _session(resume_from="x")
    assert _session().load_checkpoint() is None


def test_reduce_sums_then_divides_and_names_a_bad_pair() -> None:
    s = _session()
    assert s.reduce({"acc": (3, 4), "none": (5.0, 0)}) == {"acc": 0.75, "none": 5.0}
    assert s.mean({"loss": 2.0}, weight=3) == {"loss": 2.0}
    with pytest.raises(TypeError, match=r"reduce: 'acc' must be a \(sum, count\) pair"):
        s.reduce({"acc": 0.5})  # type: ignore[dict-item]


def test_the_clock_counts_from_start_clock() -> None:
    s = _session()
    s._started -= 100.0  # noqa: SLF001 - as if set-up took 100 s
    assert s.train_time_s() >= 100.0
    s.start_clock()
    assert s.train_time_s() < 50.0


def test_the_agreement_timeout_must_be_positive() -> None:
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match="agree_timeout_s must be > 0"):
            _session(agree_timeout_s=bad)


def test_a_session_after_a_disagreement_refuses_every_control_call() -> None:
    s = _session()
    s._broken = "ranks disagree"  # noqa: SLF001 - what a failed agreement leaves
    with pytest.raises(Exception, match="ranks disagree"):
        s.report(1, {"a": 1.0})


def test_finish_ends_every_wrapped_algorithm() -> None:
    s = _session()
    model = torch.nn.Linear(2, 1)
    _, opt = s.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), algorithm="sync")
    s.report(1, {"a": 1.0})
    s.finish()
    assert opt.algorithm.allreduce._buckets[0].persistent is None  # noqa: SLF001 - released


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU here: pick_device chooses it")
def test_one_rank_on_the_cpu_is_described_as_such() -> None:
    assert pick_device(MPI.COMM_SELF) == torch.device("cpu")
    assert describe_device(torch.device("cpu")) == "cpu"


class _TwoRanks:
    """The data communicator of rank ``rank`` of two: an allreduce doubles what it is given (the
    other rank had the same sums); the session's own calls go to a real one-rank control."""

    def __init__(self, rank: int = 0) -> None:
        self.rank, self.size = rank, 2
        self.allreduced: list[tuple[Any, Any, Any]] = []
        self.dups = 0

    def Allreduce(self, inplace: Any, buf: Any, op: Any) -> None:  # noqa: N802
        self.allreduced.append((inplace, buf.copy(), op))
        buf *= 2

    def Dup(self) -> Any:  # noqa: N802
        self.dups += 1
        return MPI.COMM_SELF.Dup()


def test_reduce_over_two_ranks_sums_sums_and_counts_in_place_in_float64() -> None:
    comm = _TwoRanks()
    s = Session(comm=comm)  # type: ignore[arg-type]
    assert comm.dups == 1 and s.size == 2
    assert s.reduce({"acc": (3, 4), "loss": (1.0, 2.0)}) == {"acc": 0.75, "loss": 0.5}
    ((inplace, buf, op),) = comm.allreduced
    assert inplace is MPI.IN_PLACE and op is MPI.SUM
    assert buf.dtype.name == "float64" and buf.tolist() == [3.0, 4.0, 1.0, 2.0]
    assert s.mean({"x": 4.0}) == {"x": 4.0}  # weight 1 on each rank
    assert comm.allreduced[-1][1].tolist() == [4.0, 1.0]


def test_a_given_control_communicator_is_used_as_it_is() -> None:
    comm = _TwoRanks()
    Session(comm=comm, control=MPI.COMM_SELF.Dup())  # type: ignore[arg-type]
    assert comm.dups == 0


def test_a_new_sessions_state_before_any_call() -> None:
    params = {"width": 3}
    s = _session(params=params)
    params["width"] = 4
    assert s.params == {"width": 3} and s.epochs == 10 and s.decision == CONTINUE
    assert (s.reports, s.last_epoch, s.start_epoch) == (0, 0, None)
    assert s.saved_after is None and s.checkpoint is None and s.resumed_header is None
    assert s.train_time_s() < 1.0
    store = _Store()
    keyed = _session(params=params, checkpointer=store)
    keyed.report(1, {"a": 1.0})
    keyed.save_checkpoint({})
    assert store.saved[0][0]["config"] == {"params": {"width": 4}}  # the default identity


def test_rows_time_the_training_from_the_sessions_start() -> None:
    s = _session()
    s._started -= 30.0  # noqa: SLF001 - as if it started 30 s ago
    s.report(1, {"a": 1.0})
    assert 30.0 <= s.history[0]["train_time_s"] < 60.0
    timed = _session()
    timed.report(1, {"a": 1.0, "train_time_s": 7.0})  # a loop's own figure is kept
    assert timed.history[0]["train_time_s"] == 7.0


def test_a_reporter_that_fails_on_rank_0_raises_its_own_error() -> None:
    class _Broken:
        def decide(self, epoch: int, row: Mapping[str, float]) -> str:
            raise KeyError("storage gone")

    s = _session(reporter=_Broken())
    with pytest.raises(KeyError, match="storage gone"):
        s.report(1, {"a": 1.0})


def test_a_study_metric_that_is_missing_from_the_last_row_is_not_a_divergence() -> None:
    s = _session(objectives=["val_accuracy"])
    s.report(1, {"val_accuracy": 0.5})
    s.history[-1].pop("val_accuracy")  # what an outcome reads: the last row
    assert s.outcome() == ("complete", "completed: 1 report(s), last epoch 1")
    s.history.clear()
    s.reports, s._objectives = 1, ["epoch"]  # noqa: SLF001 - the row's own key is no value
    assert s.outcome()[0] == "complete"


def test_a_disagreement_is_kept_and_refuses_every_later_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import training.session._session as module
    from training.session._agreement import RankDisagreement

    s = _session()

    def disagree(*_: Any) -> None:
        raise RankDisagreement("rank 1 returned early")

    with monkeypatch.context() as patched:
        patched.setattr(module, "agree", disagree)
        with pytest.raises(RankDisagreement, match="rank 1 returned early"):
            s.report(1, {"a": 1.0})
    with pytest.raises(RankDisagreement, match="^rank 1 returned early$"):
        s.report(2, {"a": 1.0})


def test_the_sampler_and_loader_read_this_ranks_share_from_the_next_epoch() -> None:
    s = _session()
    s.report(1, {"a": 1.0})
    sampler = s.sampler(10, 4, seed=5)
    assert sampler.epoch == 2 and sampler.batch_size == 4 and sampler.n == 10
    assert sampler.seed == 5 and sampler.shuffle is True
    assert s.sampler(list(range(6)), 3, shuffle=False).n == 6
    loader = s.shard(list(range(8)), 4, shuffle=False, seed=1, drop_last=False)
    assert loader.pin_memory is False
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert loader.batch_sampler.epoch == 3  # one pass read epoch 2
    shuffled = s.shard(list(range(8)), 8, seed=9)
    assert sorted(next(iter(shuffled)).tolist()) == list(range(8))
    assert shuffled.batch_sampler.seed == 9 and shuffled.batch_sampler.shuffle is True


X = torch.randn(2, 4)  # a pruned model's example inputs (its graph is traced on them)


def _pruned_session(**kw: Any) -> Session:
    from training.pruning import PruneConfig

    return _session(prune=PruneConfig(target=0.5, start_epoch=2, end_epoch=2, steps=1), **kw)


def _mlp() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))


def test_the_first_wrapped_model_is_pruned_on_its_schedule() -> None:
    s = _pruned_session()
    model = _mlp()
    model, opt = s.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), bucket_kb=1,
                        example=X)
    assert opt.name == "sync" and opt.pruning[1] is model  # type: ignore[index]
    assert s.prune_units(1) is False and model[0].out_features == 6
    assert s.prune_units(2) is True and model[0].out_features == 3
    other = _mlp()
    _, second = s.wrap(other, torch.optim.SGD(other.parameters(), lr=0.1))
    assert getattr(second, "pruning", None) is None  # only the first model is pruned
    assert _session().prune_units(2) is False  # no [training] prune


def test_a_pruned_models_checkpoint_keeps_its_widths_and_a_resume_restores_them_first() -> None:
    store = _Store()
    s = _pruned_session(checkpointer=store)
    model = _mlp()
    model, _ = s.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), example=X)
    s.prune_units(2)
    s.report(2, {"a": 1.0})
    s.save_checkpoint({"model": model.state_dict()})
    header, state = store.saved[0]
    assert state["detol_pruned"]["widths"] == [3]
    assert set(state["detol_pruned"]["pruning"]) == {"taylor"}
    resumed = _pruned_session(checkpointer=_Store(resume=(header, state)), resume_from="a")
    fresh = _mlp()
    fresh, _ = resumed.wrap(fresh, torch.optim.SGD(fresh.parameters(), lr=0.1), example=X)
    assert fresh[0].out_features == 3
    fresh.load_state_dict(resumed.load_checkpoint()["model"])  # the shapes fit


def test_the_messages_of_a_misused_session_in_full() -> None:
    s = _session(objectives=["a", "b"])
    with pytest.raises(ValueError, match=r"^report\(epoch=1\) has no 'a', 'b', the study's "
                       r"metric \(reported: \['c'\]\)$"):
        s.report(1, {"c": 1.0})
    with pytest.raises(RuntimeError, match=r"^save_checkpoint: this trial has no checkpoint "
                       r"store \(run it through `search run`, which gives every own-loop trial "
                       r"one\)$"):
        _session().save_checkpoint({})
    with pytest.raises(ValueError, match="^resume_from is set but the trial has no checkpoint "
                       "store$"):
        _session(resume_from="x")
    header = {"epoch": 2, "history": [], "train_time_s": 0.0}
    resumed = _session(checkpointer=_Store(resume=(header, {})), resume_from="a")
    with pytest.raises(ValueError, match=r"^report\(epoch=1\): this trial resumed from the "
                       r"checkpoint of epoch 2; continue from session.load_checkpoint\(\) and "
                       r"report the epochs after it$"):
        resumed.report(1, {"a": 1.0})


def test_an_agreement_timeout_under_a_second_is_allowed() -> None:
    assert _session(agree_timeout_s=0.5).agree_timeout_s == 0.5


def test_the_sampler_and_loader_default_to_seed_0_and_pass_loader_options_on() -> None:
    s = _session()
    assert s.sampler(8, 4).seed == 0
    loader = s.shard(list(range(8)), 4, timeout=5)
    assert loader.batch_sampler.seed == 0 and loader.timeout == 5


def test_wrap_passes_the_algorithms_options_on() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    _, opt = _session().wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), bucket_kb=1)
    assert len(opt.algorithm.allreduce.bucket_sizes) > 1  # 1 KB buckets, not one of 256 KB


def test_pruning_slices_the_optimizer_state_and_renews_the_algorithm() -> None:
    s = _pruned_session()
    model = _mlp()
    model, opt = s.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                        example=X)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    before = opt.algorithm
    assert s.prune_units(2) is True
    first = model[0].weight
    assert opt.optimizer.state[first]["momentum_buffer"].shape == first.shape == (3, 4)
    assert opt.algorithm is not before and sum(opt.algorithm.allreduce.bucket_sizes) == sum(
        p.numel() for p in model.parameters())


def test_a_resumed_pruned_model_gets_its_taylor_sums_back() -> None:
    from training.pruning import PruneConfig

    config = PruneConfig(criterion="taylor", start_epoch=2, end_epoch=3, steps=2)
    sums = {"taylor": [torch.full((6,), 2.0, dtype=torch.float64)]}
    header = {"epoch": 1, "history": [], "train_time_s": 0.0}
    state = {"detol_pruned": {"widths": [6], "pruning": sums}}
    s = _session(prune=config, checkpointer=_Store(resume=(header, state)), resume_from="a")
    model = _mlp()
    _, opt = s.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), example=X)
    pruning = opt.pruning[0]  # type: ignore[index]
    assert torch.equal(pruning.taylor[0], sums["taylor"][0])
