"""The replay engine (search.pruners._replay) on synthetic curves whose right answer is known."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from search.pruners._promotion import PAUSED_ATTR, RESUME_OF_ATTR, PromotingHalving, lineage
from search.pruners._replay import best_final, replay
from search.strategies._registry import pruner_spec

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

EPOCHS = 12
N = 30
ORDERS = 20


def consistent_curves() -> list[list[float]]:
    """30 curves, ranked the same at every epoch: configuration i is the i-th best."""
    return [
        [(0.9 - 0.01 * i) * (1 - math.exp(-e / 3)) for e in range(1, EPOCHS + 1)] for i in range(N)
    ]


def crossing_curves() -> list[list[float]]:
    """27 poor curves and a leading group of 3 whose late ranks reverse their early ones:
    configuration 0 leads up to epoch 3 and ends last of the group; configuration 2, third up
    to epoch 3, ends best of all (from epoch 6 on the group's order is 2, 1, 0)."""
    curves = []
    for early, late in [(0.70, 0.85), (0.68, 0.88), (0.66, 0.90)]:
        curves.append([early + 0.005 * e if e <= 3 else late - 0.04 / e
                       for e in range(1, EPOCHS + 1)])
    for i in range(N - 3):
        top = 0.60 - 0.01 * i
        curves.append([top * (1 - math.exp(-e / 2)) for e in range(1, EPOCHS + 1)])
    return curves


def asha() -> optuna.pruners.BasePruner:
    options = {"min_epochs": 1, "reduction_factor": 3, "min_early_stopping_rate": 0}
    return pruner_spec("asha", options).build()


def promoting() -> optuna.pruners.BasePruner:
    return PromotingHalving(min_resource=1, reduction_factor=3)


def top_half() -> optuna.pruners.BasePruner:
    return pruner_spec("top-half", {"startup_trials": 3}).build()


def regrets(
    curves: list[list[float]], make: Callable[[], optuna.pruners.BasePruner], concurrency: int
) -> list[float]:
    out = []
    for k in range(ORDERS):
        order = np.random.default_rng([k]).permutation(len(curves)).tolist()
        run = replay(curves, make(), concurrency=concurrency, order=order, study_name=f"t{k}")
        assert run.regret is not None
        out.append(run.regret)
    return out


@pytest.mark.parametrize("concurrency", [1, 4])
def test_no_pruning_trains_every_epoch_and_finds_the_best(concurrency: int) -> None:
    curves = crossing_curves()
    run = replay(curves, optuna.pruners.NopPruner(), concurrency=concurrency, order=range(N))
    assert run.epochs == N * EPOCHS
    assert run.time == math.ceil(N / concurrency) * EPOCHS
    assert (run.complete, run.stopped, run.paused, run.promotions) == (N, 0, 0, 0)
    assert run.incumbent == 2
    assert run.regret == 0.0


def test_stop_form_asha_stops_trials_and_counts_only_their_epochs() -> None:
    curves = consistent_curves()
    run = replay(curves, asha(), concurrency=1, order=range(N))  # best first: the rest stop
    assert run.stopped > 0
    assert run.epochs == sum(b - a + 1 for _, a, b in run.segments) < N * EPOCHS
    assert run.regret == 0.0  # ranks never cross: the best is never stopped


@pytest.mark.parametrize("concurrency", [1, 4])
def test_top_half_keeps_the_best_of_consistent_curves_for_about_half_the_epochs(
    concurrency: int,
) -> None:
    curves = consistent_curves()
    assert regrets(curves, top_half, concurrency) == [0.0] * ORDERS
    order = np.random.default_rng([0]).permutation(N).tolist()
    run = replay(curves, top_half(), concurrency=concurrency, order=order)
    assert run.epochs < 0.75 * N * EPOCHS


@pytest.mark.parametrize("concurrency", [1, 4])
def test_promotion_resumes_paused_trials_and_beats_stopping_when_ranks_cross(
    concurrency: int,
) -> None:
    curves = crossing_curves()
    assert best_final(curves, EPOCHS) == curves[2][-1]
    stop = regrets(curves, asha, concurrency)
    promote = regrets(curves, promoting, concurrency)
    # Stop-form ASHA loses configuration 2 in the orders where it reaches a rung behind 0 or 1
    # with too few others there; the promotion form brings it back once the rung has filled.
    assert sum(r > 0 for r in stop) >= 5
    assert promote == [0.0] * ORDERS
    assert statistics.fmean(promote) < statistics.fmean(stop)


def test_a_promoted_trial_continues_its_parent_and_its_epochs_count_once() -> None:
    curves = crossing_curves()
    order = np.random.default_rng([3]).permutation(N).tolist()
    run = replay(curves, promoting(), concurrency=4, order=order)
    assert run.study is not None
    trials = run.study.get_trials(deepcopy=False)
    continuations = [t for t in trials if RESUME_OF_ATTR in t.user_attrs]
    assert run.promotions == len(continuations) > 0
    by_number = {t.number: t for t in trials}
    segments = list(run.segments)  # what the simulated workers trained: (config, first, last)
    for t in continuations:
        parent = by_number[t.user_attrs[RESUME_OF_ATTR]]
        assert parent.state is TrialState.PRUNED and PAUSED_ATTR in parent.user_attrs
        assert t.params == parent.params and lineage(t) == lineage(parent)
        paused_at = parent.user_attrs[PAUSED_ATTR]
        c = t.params["config"]
        # Continued from the checkpoint, not restarted: the worker trained from the epoch after
        # the pause (a restart would train from epoch 1) ...
        mine = (c, paused_at + 1, t.last_step)
        assert mine in segments, (mine, [s for s in segments if s[0] == c])
        segments.remove(mine)
        # ... and what it reported for its own epochs is the curve at those epochs, not its
        # first epochs again (each crossing curve's values differ from epoch to epoch).
        for e in range(paused_at + 1, t.last_step + 1):
            assert t.intermediate_values[e] == curves[c][e - 1]
            assert curves[c][e - 1] != curves[c][e - 1 - paused_at]
        assert sorted(t.intermediate_values) == list(range(1, t.last_step + 1))  # whole curve
    # Epochs trained: per configuration, the furthest any of its trials got -- never the
    # re-reported epochs of a continuation again.
    furthest: dict[int, int] = {}
    for t in trials:
        c = t.params["config"]
        furthest[c] = max(furthest.get(c, 0), t.last_step or 0)
    assert run.epochs == sum(furthest.values()) == sum(b - a + 1 for _, a, b in run.segments)
    assert run.epochs < N * EPOCHS


def test_recorded_seconds_set_the_clock() -> None:
    curves = consistent_curves()[:4]
    seconds = [[float(i + 1)] * EPOCHS for i in range(4)]
    run = replay(curves, optuna.pruners.NopPruner(), concurrency=2, order=range(4),
                 durations=seconds)
    # Worker A: configuration 0 (12 x 1 s), then 2 until 48 s; B: 1 (24 s), then 3 until 72 s.
    assert run.time == 72.0


def test_a_short_curve_fails_and_bad_input_is_refused() -> None:
    curves = consistent_curves()[:3]
    curves[0] = curves[0][:5]  # diverged after epoch 5
    run = replay(curves, optuna.pruners.NopPruner(), concurrency=1, order=range(3), epochs=EPOCHS)
    assert (run.failed, run.complete, run.epochs, run.incumbent) == (1, 2, 5 + 2 * EPOCHS, 1)
    with pytest.raises(ValueError, match="concurrency"):
        replay(curves, optuna.pruners.NopPruner(), concurrency=0, order=range(3))
    with pytest.raises(ValueError, match=r"curves\[0\]: has 5 values"):
        replay(curves, optuna.pruners.NopPruner(), concurrency=1, order=range(3), epochs=4)
