"""[resize] with an own loop (issue 31): a checkpoint saved with ``reshard=True`` widens like
the built-in trainer's; one saved without it restores on its own rank count only, so its lineage
keeps its width (with the reason), pauses for no widening and takes no idle slots."""

from __future__ import annotations

import textwrap
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from search._errors import StudyError
from search.driver._resize import KEPT_ATTR, WIDTH_ATTR, WidenOnPromotion, next_width
from search.driver._segments import widen_idle
from search.pruners._promotion import RESUME_OF_ATTR, PromotingHalving
from search.studyfile._study_file import parse_study
from tests.cli_helpers import run_search
from training.contract import CHECKPOINT_ATTR, open_storage

POLICY = WidenOnPromotion(factor=2, max_ranks=4)


def _paused(reshard: bool | None, **attrs: object) -> optuna.trial.FrozenTrial:
    checkpoint = {"id": "a", "epoch": 2, "store": "s", "ranks": 1}
    if reshard is not None:  # None: recorded before the flag existed (the built-in trainer's)
        checkpoint["reshard"] = reshard
    return optuna.trial.create_trial(
        state=TrialState.PRUNED, value=0.5, intermediate_values={1: 0.4, 2: 0.5},
        user_attrs={WIDTH_ATTR: 1, CHECKPOINT_ATTR: checkpoint, **attrs})


@pytest.mark.unit
def test_a_continuation_widens_only_where_its_checkpoint_restores_on_another_width() -> None:
    assert next_width(POLICY, _paused(True))[WIDTH_ATTR] == 2
    assert next_width(POLICY, _paused(None))[WIDTH_ATTR] == 2
    kept = next_width(POLICY, _paused(False))
    assert kept[WIDTH_ATTR] == 1
    assert "restores on 1 rank(s) only" in kept[KEPT_ATTR]
    assert "reshard=True" in kept[KEPT_ATTR]
    assert KEPT_ATTR not in next_width(POLICY, _paused(True))
    # The lineage's later segments (its checkpoints saved the same way) keep the reason.
    assert next_width(POLICY, _paused(True, **{KEPT_ATTR: "why"}))[KEPT_ATTR] == "why"


@pytest.mark.unit
def test_a_kept_lineage_pauses_for_no_widening_and_takes_no_idle_slot() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = PromotingHalving(1, 2, max_resource=8, widen_until=4)  # rungs 1, 2, 4
    study = optuna.create_study(direction="maximize", pruner=pruner)
    free, kept = study.ask(), study.ask()
    kept.set_user_attr(KEPT_ATTR, "its loop saves without reshard=True")
    for trial in (free, kept):
        trial.set_user_attr(WIDTH_ATTR, 1)
    free.report(0.9, 1)  # alone at rung 1: in its top half
    assert free.should_prune()  # promoted, narrower than widen_until: pauses to widen
    kept.report(0.95, 1)  # the best at rung 1: in its top half too
    assert not kept.should_prune()  # it could not go wider: trains on in its job
    # At the study's end idle slots go to the trials whose checkpoints can widen only.
    for trial in (free, kept):
        trial.report(0.95, 3)
    unsaved = study.ask()
    unsaved.set_user_attr(WIDTH_ATTR, 1)
    unsaved.report(0.99, 3)  # the most promising: no checkpoint yet, so none says it cannot
    narrow_only = study.ask()
    narrow_only.set_user_attr(WIDTH_ATTR, 1)
    narrow_only.set_user_attr(CHECKPOINT_ATTR, {"id": "b", "epoch": 3, "reshard": False})
    narrow_only.report(0.999, 3)
    marked = widen_idle(study, pruner, budget_spent=True, resize=POLICY, idle=8)
    assert sorted(marked) == sorted([free.number, unsaved.number])


@pytest.mark.unit
def test_resize_is_accepted_for_an_own_loop_and_refused_for_a_function_objective() -> None:
    base = {"name": "r", "pruner": {"name": "asha", "promote": True},
            "resize": {"factor": 2, "max_ranks": 4}}
    study = parse_study({**base, "objective": "mpi:examples.own_loop.train:train",
                         "training": {"ranks": 2}})
    assert study.max_ranks == 4
    with pytest.raises(StudyError, match="resize.max_ranks: is 4, narrower than trials start"):
        parse_study({**base, "objective": "mpi:examples.own_loop.train:train",
                     "training": {"ranks": 8}})
    with pytest.raises(StudyError, match="resize: needs MPI trials .* a function objective "
                                         "has no ranks to widen"):
        parse_study({**base, "objective": "examples.own_loop.train:train"})


LOOP = '''\
import torch
from torch import nn


def train(session):
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=session.params["lr"], momentum=0.9)
    model, opt = session.wrap(model, opt, algorithm="sync")
    state, start = session.load_checkpoint(), 1
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["epoch"] + 1
    x = torch.linspace(-1, 1, 64).reshape(16, 4)
    for epoch in range(start, session.epochs + 1):
        opt.zero_grad()
        loss = ((model(x) - 1.0) ** 2).mean()
        loss.backward()
        opt.step()
        decision = session.report(epoch, {"score": session.params["lr"] * epoch})
        if session.checkpoint_due():
            session.save_checkpoint({"model": model.state_dict(), "opt": opt.state_dict(),
                                     "epoch": epoch}, reshard=RESHARD)
        if decision != "continue":
            return
'''


@pytest.mark.mpi
@pytest.mark.timeout(900)
@pytest.mark.parametrize("reshard", [
    True, pytest.param(False, marks=pytest.mark.slow)], ids=["reshard", "own-width"])
def test_an_own_loops_promoted_trials_widen_when_its_checkpoints_reshard(
    tmp_path: Path, reshard: bool
) -> None:
    (tmp_path / "myloop.py").write_text(LOOP.replace("RESHARD", str(reshard)))
    (tmp_path / "s.toml").write_text(textwrap.dedent("""\
        name = "own-wide"
        objective = "mpi:myloop:train"
        metric = "score"
        direction = "maximize"
        [budget]
        trials = 3
        concurrency = 1
        [strategy]
        name = "random"
        seed = 0
        [pruner]
        name = "asha"
        promote = true
        min_epochs = 1
        reduction_factor = 3
        [resize]
        factor = 2
        max_ranks = 2
        [training]
        epochs = 3
        ranks = 1
        [space]
        lr = { type = "float", low = 0.01, high = 0.1 }
        [launcher]
        warm = true
        """))
    code, out, err = run_search("run", "s.toml", "--storage", "s.journal", "--no-progress",
                                cwd=tmp_path, timeout=600)
    assert code == 0, out + err
    trials = optuna.load_study(study_name="own-wide",
                               storage=open_storage(str(tmp_path / "s.journal"))).trials
    continuations = [t for t in trials if RESUME_OF_ATTR in t.user_attrs]
    assert continuations, [(t.number, t.state.name, t.user_attrs.get("exit_reason"))
                           for t in trials]
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials), [
        (t.number, t.state.name, t.user_attrs.get("exit_reason")) for t in trials]
    for t in continuations:
        # Ran (the job's own rank count) as wide as the policy and the checkpoint allow.
        assert t.user_attrs["ranks"] == t.user_attrs[WIDTH_ATTR] == (2 if reshard else 1)
        assert (KEPT_ATTR in t.user_attrs) is (not reshard)
        parent = next(p for p in trials if p.number == t.user_attrs[RESUME_OF_ATTR])
        assert parent.user_attrs[CHECKPOINT_ATTR]["reshard"] is reshard  # as the loop saved
    if not reshard:  # no segment of the study ran wider than it started
        assert all(t.user_attrs[WIDTH_ATTR] == 1 for t in trials)
