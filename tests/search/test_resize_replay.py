"""The width policy (search.driver._resize) on the replay of recorded curves: the driver's own
``next_start`` plans each continuation's width; slots are never overcommitted; a trial that
passes a rung narrow pauses to be widened; epochs on wide jobs take the model's time."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from optuna.trial import TrialState

from search.driver._resize import WIDTH_ATTR, WidenOnPromotion, ran_on
from search.pruners._promotion import RESUME_OF_ATTR, PromotingHalving
from search.pruners._replay import ReplayRun, replay

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

EPOCHS = 9


def _curves(n: int = 40) -> list[list[float]]:
    rng = np.random.default_rng(0)
    finals = rng.uniform(0.5, 0.95, n)
    return [[float(f * (1 - 0.5 ** (e + 1))) for e in range(EPOCHS)] for f in finals]


def _run(policy: WidenOnPromotion | None, slots: int = 8,
         epoch_time: Callable[[int], float] | None = None) -> ReplayRun:
    pruner = PromotingHalving(1, 3, max_resource=EPOCHS,
                              widen_until=policy.max_ranks if policy else 0)
    return replay(_curves(), pruner, concurrency=slots, order=range(40), epochs=EPOCHS,
                  resize=policy, epoch_time=epoch_time)


def test_the_policy_widens_by_its_factor_up_to_its_cap() -> None:
    policy = WidenOnPromotion(factor=3, max_ranks=8)
    assert [policy.width(r) for r in (1, 3, 8, 9)] == [3, 8, 8, 9]
    with pytest.raises(ValueError, match="factor: expected an integer >= 1, got 0"):
        WidenOnPromotion(factor=0)


def test_each_promotion_runs_twice_as_wide_as_its_parent_ran() -> None:
    run = _run(WidenOnPromotion(factor=2, max_ranks=4))
    assert run.study is not None
    trials = {t.number: t for t in run.study.get_trials(deepcopy=False)}
    continuations = [t for t in trials.values() if RESUME_OF_ATTR in t.user_attrs]
    assert continuations and run.complete > 0
    for t in continuations:
        parent = trials[t.user_attrs[RESUME_OF_ATTR]]
        assert ran_on(t) == min(4, 2 * ran_on(parent))
    for t in trials.values():
        if RESUME_OF_ATTR not in t.user_attrs:
            assert t.user_attrs[WIDTH_ATTR] == 1
    # Every completed trial climbed the rungs 1 and 3 on widths 1 -> 2 -> 4: a trial that was
    # in its rung's top paused too, to be widened (plain promotion would let it train on).
    for t in trials.values():
        if t.state is TrialState.COMPLETE:
            assert ran_on(t) == 4
    assert sorted(set(run.widths)) == [1, 2, 4]
    # Without the policy nothing widens, and a top trial trains through its rungs.
    fixed = _run(None)
    assert fixed.study is not None
    assert set(fixed.widths) == {1}
    fixed_continuations = [t for t in fixed.study.get_trials(deepcopy=False)
                           if RESUME_OF_ATTR in t.user_attrs]
    assert len(fixed_continuations) < len(continuations)


def test_slots_are_never_overcommitted() -> None:
    run = _run(WidenOnPromotion(factor=4, max_ranks=8), slots=6)  # 1 -> 4 -> 8, 6 slots
    assert sorted(set(run.widths)) == [1, 4, 6]  # the widest capped at the slots there are
    assert run.rank_time <= 6 * run.time + 1e-9


def test_epochs_on_wide_jobs_take_the_models_time() -> None:
    policy = WidenOnPromotion(factor=2, max_ranks=4)
    slow = _run(policy)
    fast = _run(policy, epoch_time=lambda w: 1.0 / w)  # perfect scaling: the same slot-time
    assert fast.time < slow.time
    assert fast.rank_time == pytest.approx(
        sum(1.0 for _ in range(fast.epochs)), rel=1e-9)  # each epoch costs 1 slot-unit
