"""DistinctTPESampler's rules (issue 33): what it refuses, how a repeat moves to an unseen
neighbour, what its ``proposals`` counter says, the running trials it keeps apart from, a
trial continued in another thread, its window's edges and the parameters TPE leaves out."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.storages import InMemoryStorage
from optuna.trial import TrialState, create_trial

import spaces
from search.strategies._base import candidate_key
from search.strategies._tpe import DistinctTPESampler, _only_values

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

X = IntDistribution(0, 9)
XY = spaces.Space({"x": spaces.Int(low=0, high=9), "y": spaces.Float(low=0.0, high=1.0)})
ONLY_X = spaces.Space({"x": spaces.Int(low=0, high=9)})
A, B = "nor_conv_3x3", "skip_connect"
CELL3 = spaces.Space({"genome": spaces.CellFamily(nodes=3, ops=(A, B))})  # 3 edges, 8 cells


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna's experimental and fallback warnings
        yield


def _tpe(space: spaces.Space, **kw: Any) -> DistinctTPESampler:
    options = {"seed": 0, "n_startup_trials": 2, "multivariate": True, "group": True} | kw
    return DistinctTPESampler(space=space, **options)


def _add(
    study: optuna.Study, n: int, *, state: TrialState = TrialState.COMPLETE, seed: int = 0
) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(n):
        study.add_trial(
            create_trial(
                params={"x": int(rng.integers(10)), "y": float(rng.random())},
                distributions={"x": X, "y": FloatDistribution(0.0, 1.0)},
                state=state,
                value=float(rng.normal()) if state == TrialState.COMPLETE else None,
            )
        )


def test_a_bad_space_or_a_window_below_50_is_refused_with_its_value() -> None:
    with pytest.raises(TypeError, match=r"^space: expected a spaces\.Space, got dict$"):
        DistinctTPESampler(space={"x": 1})  # type: ignore[arg-type]
    with pytest.raises(
        ValueError,
        match=r"^window: must be >= 50 \(or 0 for every trial\), "
        r"got 49$",
    ):
        DistinctTPESampler(space=XY, window=49)
    study = optuna.create_study()
    _add(study, 51)
    windowed = DistinctTPESampler(space=XY, window=50)._windowed(study)  # 50 is allowed
    assert len(windowed._get_trials(deepcopy=False)) == 50
    for whole in (None, 0):  # every trial, as the refusal says
        assert DistinctTPESampler(space=XY, window=whole)._windowed(study) is study


def test_parameters_only_pruned_trials_hold_are_modelled_as_optunas_grouped_tpe_does() -> None:
    study = optuna.create_study()
    for i in range(4):
        study.add_trial(create_trial(params={"x": i}, distributions={"x": X}, value=float(i)))
    for i in range(4):
        study.add_trial(
            create_trial(
                params={"x": i, "y": i / 4},
                state=TrialState.PRUNED,
                distributions={"x": X, "y": FloatDistribution(0.0, 1.0)},
            )
        )
    trial = study._storage.get_trial(study._storage.create_new_trial(study._study_id))
    theirs = optuna.samplers.TPESampler(multivariate=True, group=True)
    expected = theirs.infer_relative_search_space(study, trial)
    assert "y" in expected  # the pruned trials' parameter is in Optuna's groups
    assert _tpe(XY).infer_relative_search_space(study, trial) == expected


def test_every_relative_proposal_is_counted_keyed_or_unkeyed_and_each_move_once() -> None:
    # Both values of x are in the study: each proposal repeats one and is moved (to itself:
    # nothing unseen is left), so it is counted as keyed and as moved, every time.
    space = spaces.Space({"x": spaces.Int(low=0, high=1)})
    sampler = _tpe(space)
    study = optuna.create_study(sampler=sampler)
    for x in (0, 1):
        study.add_trial(
            create_trial(
                params={"x": x}, distributions={"x": IntDistribution(0, 1)}, value=float(x)
            )
        )
    for _ in range(3):
        trial = study.ask()
        space.suggest(trial)
        study.tell(trial, 0.5)
    assert dict(sampler.proposals) == {"keyed": 3, "moved": 3}
    # A space that gained y: the finished trials hold x only, so a proposal is not a whole
    # candidate (unkeyed) and cannot be checked (the asks stay running: no trial with y ends).
    sampler = _tpe(XY)
    study = optuna.create_study(sampler=sampler)
    for x in range(4):
        study.add_trial(create_trial(params={"x": x}, distributions={"x": X}, value=float(x)))
    for _ in range(3):
        XY.suggest(study.ask())
    assert dict(sampler.proposals) == {"unkeyed": 3}


def test_concurrent_asks_avoid_what_tpe_proposed_for_a_trial_that_has_not_suggested_yet() -> None:
    # Optuna's defaults (constant liar on, multivariate unset) with group=True: a trial that has
    # made its relative proposal (Optuna does at its first suggest) but holds no parameter yet
    # is known by the liar's record; eight such asks propose eight different values.
    sampler = DistinctTPESampler(space=ONLY_X, seed=0, n_startup_trials=2, group=True)
    study = optuna.create_study(sampler=sampler)
    for x in (0, 1):
        study.add_trial(create_trial(params={"x": x}, distributions={"x": X}, value=float(-x)))
    proposed = []
    for _ in range(8):
        trial = study.ask()
        proposed.append(trial.relative_params["x"])
        assert trial.params == {}
    assert len(set(proposed)) == 8 and not {0, 1} & set(proposed), proposed


def test_a_trial_asked_in_one_thread_samples_its_other_parameters_in_another() -> None:
    # Ask and the first suggest in the main thread, the rest of the objective in a worker
    # thread (whose per-call state the first never set): y, which no finished trial has, is
    # sampled there from TPE's model without an error.
    sampler = _tpe(XY)
    study = optuna.create_study(sampler=sampler)
    for x in range(5):
        study.add_trial(create_trial(params={"x": x}, distributions={"x": X}, value=float(x)))
    trial = study.ask()
    trial.suggest_int("x", 0, 9)
    out: dict[str, Any] = {}

    def rest() -> None:
        try:
            out["y"] = trial.suggest_float("y", 0.0, 1.0)
        except Exception as err:  # noqa: BLE001 - reported below
            out["error"] = repr(err)

    worker = threading.Thread(target=rest)
    worker.start()
    worker.join()
    assert "error" not in out, out
    assert 0.0 <= out["y"] <= 1.0


def _cell(edges: tuple[str, ...]) -> dict[str, Any]:
    return CELL3["genome"].to_params(spaces.CellGenome(nodes=3, edges=edges), prefix="genome")


def _edges(params: dict[str, Any]) -> tuple[str, ...]:
    return CELL3["genome"].from_params(params, prefix="genome").edges


def test_a_repeat_moves_one_mutation_away_then_two_when_every_neighbour_is_taken() -> None:
    sampler = _tpe(CELL3)
    start = (A, A, A)
    ones = [(B, A, A), (A, B, A), (A, A, B)]
    key = lambda edges: candidate_key(CELL3, _cell(edges))  # noqa: E731
    moved = [_edges(sampler._neighbour(_cell(start), {key(start)})) for _ in range(30)]
    assert set(moved) == set(ones)  # one step away, any of the three
    seen = {key(start), *map(key, ones)}
    twice = [_edges(sampler._neighbour(_cell(start), seen)) for _ in range(10)]
    assert all(sum(a != b for a, b in zip(e, start, strict=True)) == 2 for e in twice), twice
    everything = {key((a, b, c)) for a in (A, B) for b in (A, B) for c in (A, B)}
    assert sampler._neighbour(_cell(start), everything) == _cell(start)  # nothing unseen left


def test_moved_proposals_are_the_same_for_the_same_seed() -> None:
    # One EI candidate per proposal: a repeat is common and each is moved to a neighbour that
    # the sampler's seeded generator picks.
    def asked() -> tuple[list[int], int]:
        sampler = _tpe(ONLY_X, n_ei_candidates=1)
        study = optuna.create_study(sampler=sampler)
        for _ in range(8):
            trial = study.ask()
            study.tell(trial, -abs(ONLY_X.suggest(trial)["x"] - 6))
        return [t.params["x"] for t in study.trials], sampler.proposals["moved"]

    first, moves = asked()
    assert moves >= 2  # the comparison below covers moved proposals
    assert asked() == (first, moves)


def _liar(window: int) -> DistinctTPESampler:
    return DistinctTPESampler(space=XY, window=window, constant_liar=True, seed=0)


def _numbers(study: Any, state: TrialState) -> list[int]:
    return [t.number for t in study._get_trials(deepcopy=False, states=(state,))]


def test_window_edges_with_the_constant_liar() -> None:
    # Exactly `window` trials, running ones included: TPE sees them all (every running one).
    study = optuna.create_study()
    _add(study, 40)
    _add(study, 10, state=TrialState.RUNNING)
    assert _numbers(_liar(50)._windowed(study), TrialState.RUNNING) == list(range(40, 50))
    # Running trials older than the finished ones: the most recently asked running ones, never
    # a finished trial counted as running.
    study = optuna.create_study()
    _add(study, 30, state=TrialState.RUNNING)
    _add(study, 120)
    windowed = _liar(100)._windowed(study)
    assert _numbers(windowed, TrialState.RUNNING) == list(range(20, 30))
    assert len(_numbers(windowed, TrialState.COMPLETE)) == 100


def test_the_window_reads_running_trials_fresh_and_the_rest_from_the_asks_snapshot() -> None:
    # A trial another thread asked after this thread's snapshot (taken at its ask) is running
    # for the liar all the same; the finished trials are read from storage once per proposal.
    reads: list[Any] = []

    class Counting(InMemoryStorage):
        def get_all_trials(
            self, study_id: int, deepcopy: bool = True, states: Any = None
        ) -> list[optuna.trial.FrozenTrial]:
            reads.append(None if states is None else tuple(states))
            return super().get_all_trials(study_id, deepcopy=deepcopy, states=states)

    study = optuna.create_study(storage=Counting())
    _add(study, 60)
    sampler = _liar(50)
    study._thread_local.cached_all_trials = None  # as ask() leaves it
    study._get_trials(deepcopy=False, use_cache=True)  # this thread's snapshot
    worker = threading.Thread(target=study.ask)
    worker.start()
    worker.join()
    reads.clear()
    windowed = sampler._windowed(study)
    assert _numbers(windowed, TrialState.RUNNING) == [60]
    assert None not in reads and all(TrialState.COMPLETE not in r for r in reads), reads


def test_one_sampler_keeps_a_window_per_study() -> None:
    sampler = DistinctTPESampler(space=XY, window=50, seed=0)
    storage = InMemoryStorage()  # one storage: the studies' ids differ
    first, second = (optuna.create_study(storage=storage) for _ in range(2))
    _add(first, 80, seed=1)
    _add(second, 80, seed=2)
    sampler._windowed(first)
    got = _numbers(sampler._windowed(second), TrialState.COMPLETE)
    best = sorted(second.trials, key=lambda t: t.value)[:5]  # gamma(80) = 8: includes these
    assert {t.number for t in best} <= set(got)
    fresh = DistinctTPESampler(space=XY, window=50, seed=0)._windowed(second)
    assert got == _numbers(fresh, TrialState.COMPLETE)


def test_dimensions_with_one_value_only_values_every_proposal_so_none_repeats() -> None:
    # Optuna leaves a one-value dimension out of TPE's relative search space; without it no
    # proposal was a whole candidate and TPE repeated 7 networks in 30 proposals here.
    assert _only_values(
        {
            "x": X,
            "lr": FloatDistribution(0.5, 0.5),
            "k": IntDistribution(3, 3),
            "opt": CategoricalDistribution(("adam",)),
            "free": FloatDistribution(0.0, 1.0),
        }
    ) == {"lr": 0.5, "k": 3, "opt": "adam"}
    space = spaces.Space(
        {
            "genome": spaces.CellFamily(ops=(A, B, "avg_pool_3x3")),
            "opt": spaces.Categorical(("adam",)),
            "k": spaces.Int(low=3, high=3),
        }
    )
    sampler = _tpe(space, n_startup_trials=10)
    study = optuna.create_study(sampler=sampler, direction="maximize")
    keys = []
    for _ in range(40):
        trial = study.ask()
        edges = space.suggest(trial)["genome"].edges
        keys.append(candidate_key(space, trial.params))
        study.tell(trial, edges.count(A) + 0.5 * edges.count(B))
    assert len(set(keys)) == 40
    assert dict(sampler.proposals) == {"keyed": 30}  # TPE's next-best EI candidate, no moves
