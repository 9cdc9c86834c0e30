"""Rules of the strategies' shared base (search/strategies/_base.py), found by its full mutant
set (issue 33): the unit map that evolution's perturbation and REINFORCE's bins read, ..."""

from __future__ import annotations

import math

import pytest
from optuna.distributions import FloatDistribution, IntDistribution

from search.strategies._base import from_unit, to_unit


@pytest.mark.parametrize(
    ("dist", "value", "unit"),
    [
        (FloatDistribution(2.0, 6.0), 3.0, 0.25),  # (x - low) / (high - low)
        (FloatDistribution(2.0, 6.0), 5.0, 0.75),
        (FloatDistribution(2.0, 6.0), 9.0, 1.0),  # above the range: clipped to 1
        (FloatDistribution(2.0, 6.0), -1.0, 0.0),  # below: clipped to 0
        (FloatDistribution(1.0, 100.0, log=True), 10.0, 0.5),  # log scale
        (IntDistribution(0, 8), 2, 0.25),
        (FloatDistribution(3.0, 3.0), 3.0, 0.0),  # one value: 0, not a division by zero
    ],
)
def test_to_unit_maps_the_range_onto_zero_to_one(dist, value, unit) -> None:
    assert to_unit(dist, value) == pytest.approx(unit)


@pytest.mark.parametrize(
    "dist",
    [FloatDistribution(2.0, 6.0), FloatDistribution(1.0, 100.0, log=True), IntDistribution(0, 8),
     IntDistribution(1, 64, log=True), FloatDistribution(0.0, 1.0, step=0.25),
     FloatDistribution(2.0, 32.0, log=True), IntDistribution(3, 23, step=5),
     FloatDistribution(1.0, 2.0, step=0.25)],
)
def test_from_unit_inverts_to_unit_on_the_grid(dist) -> None:
    for u in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = from_unit(dist, u)
        assert dist.low <= x <= dist.high
        assert to_unit(dist, x) == pytest.approx(u, abs=0.05 if isinstance(dist, IntDistribution) else 1e-9)
    assert from_unit(dist, -3.0) == dist.low and from_unit(dist, 7.0) == dist.high
    assert not math.isnan(float(from_unit(dist, 0.5)))


def test_the_recorder_records_each_distribution_as_asked_and_answers_a_name_once() -> None:
    import numpy as np
    from optuna.distributions import CategoricalDistribution

    from search.strategies._base import Recorder, uniform_choice

    rec = Recorder(uniform_choice, np.random.default_rng(0))
    a = rec.suggest_float("a", 0.5, 2.0)
    rec.suggest_float("b", 0.0, 1.0, step=0.25)
    rec.suggest_float("c", 1e-3, 1.0, log=True)
    rec.suggest_int("n", 1, 9)
    rec.suggest_int("m", 2, 64, log=True)
    rec.suggest_int("s", 0, 10, step=5)
    rec.suggest_categorical("k", ["x", "y"])
    assert rec.distributions == {
        "a": FloatDistribution(0.5, 2.0),
        "b": FloatDistribution(0.0, 1.0, step=0.25),
        "c": FloatDistribution(1e-3, 1.0, log=True),
        "n": IntDistribution(1, 9),
        "m": IntDistribution(2, 64, log=True),
        "s": IntDistribution(0, 10, step=5),
        "k": CategoricalDistribution(("x", "y")),
    }
    assert list(rec.params) == ["a", "b", "c", "n", "m", "s", "k"]
    assert rec.params["b"] in (0.0, 0.25, 0.5, 0.75, 1.0) and rec.params["s"] in (0, 5, 10)
    assert rec.suggest_float("a", 0.5, 2.0) == a  # asked again: the same answer, not a new draw


# -- what the strategies read from a study -------------------------------------------------------

import numpy as np  # noqa: E402
import optuna  # noqa: E402
from optuna.trial import TrialState, create_trial  # noqa: E402

from search.strategies._base import (  # noqa: E402
    CompleteSoFar,
    KeyCache,
    LatestComplete,
    ProposalSampler,
    complete_in_order,
    seen_keys,
    sign,
    trial_seed,
)

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

_X = FloatDistribution(0.0, 10.0)


_STORAGE = optuna.storages.InMemoryStorage()  # one storage: studies get distinct ids


def _study(direction: str = "maximize") -> optuna.Study:
    return optuna.create_study(direction=direction, storage=_STORAGE,
                               sampler=optuna.samplers.RandomSampler(seed=0))


def _add(study: optuna.Study, x: float, value: float | None = None,
         state: TrialState = TrialState.COMPLETE) -> None:
    study.add_trial(create_trial(params={"x": x}, distributions={"x": _X}, value=value,
                                 state=state))


def test_sign_is_plus_one_to_maximise_and_minus_one_to_minimise() -> None:
    assert sign(_study("maximize")) == 1.0
    assert sign(_study("minimize")) == -1.0


def test_complete_in_order_keeps_finite_single_values_of_complete_trials_only() -> None:
    study = _study()
    _add(study, 1.0, 0.5)
    trial = study.ask({"x": _X})
    trial.report(0.9, 1)
    study.tell(trial, state=TrialState.PRUNED)  # a pruned trial holds its last report as value
    _add(study, 2.0, 0.7)
    assert [t.params["x"] for t in complete_in_order(study)] == [1.0, 2.0]
    two = optuna.create_study(directions=["maximize", "minimize"])
    two.add_trial(create_trial(params={"x": 1.0}, distributions={"x": _X}, values=[1.0, 2.0]))
    assert complete_in_order(two) == []
    assert CompleteSoFar()(two)[0] == [] and LatestComplete(5)(two) == []


def test_seen_keys_per_study_with_enqueued_and_waiting_trials_and_one_excluded() -> None:
    cache = KeyCache()
    key = lambda params: tuple(sorted(params.items()))  # noqa: E731
    a, b = _study(), _study()
    _add(a, 1.0, 0.1)
    _add(b, 2.0, 0.2)
    assert seen_keys(a, -1, cache, key) == {(("x", 1.0),)}
    assert seen_keys(b, -1, cache, key) == {(("x", 2.0),)}  # one cache, two studies apart
    a.enqueue_trial({"x": 3.0})  # WAITING: its values are kept aside until it is asked
    a.add_trial(create_trial(state=TrialState.WAITING, params={"x": 4.0},
                             distributions={"x": _X}))  # WAITING without fixed values
    running = a.ask({"x": _X})
    got = seen_keys(a, -1, cache, key)
    assert {(("x", 1.0),), (("x", 3.0),), (("x", 4.0),)} <= got
    excluded = seen_keys(a, running._trial_id, cache, key)  # noqa: SLF001
    assert (("x", running.params["x"]),) not in excluded and (("x", 1.0),) in excluded


def test_seen_keys_computes_a_key_once_per_trial_unless_its_parameters_grew() -> None:
    calls: list[dict] = []

    def key(params: dict) -> tuple:
        calls.append(dict(params))
        return tuple(sorted(params.items()))

    cache = KeyCache()
    study = _study()
    for x in (1.0, 2.0, 3.0):
        _add(study, x, x)
    running = study.ask()
    running.suggest_float("x", 0.0, 10.0)
    seen_keys(study, -1, cache, key)
    assert len(calls) == 4
    seen_keys(study, -1, cache, key)
    assert len(calls) == 4  # nothing changed: no key computed again
    running.suggest_float("y", 0.0, 1.0)  # define-by-run: the running trial's params grew
    fresh = study.ask()  # a new ask reads the study afresh (Optuna's per-ask snapshot)
    got = seen_keys(study, fresh._trial_id, cache, key)  # noqa: SLF001
    assert len(calls) == 5 and set(calls[-1]) == {"x", "y"}
    assert tuple(sorted(running.params.items())) in got


def test_the_complete_lists_are_kept_per_study_and_take_trials_added_later() -> None:
    so_far, latest = CompleteSoFar(), LatestComplete(2)
    a, b = _study(), _study()
    for x in (1.0, 2.0):
        _add(a, x, x)
    _add(b, 9.0, 9.0)
    assert [t.params["x"] for t in so_far(a)[1]] == [1.0, 2.0]
    assert [t.params["x"] for t in so_far(b)[1]] == [9.0]  # the other study's own list
    assert [t.params["x"] for t in latest(b)] == [9.0]
    for x in (3.0, 4.0):
        _add(a, x, x)
    a.ask()  # a new ask reads the study afresh (Optuna's per-ask snapshot)
    by_finish, by_number, fresh = so_far(a)
    assert [t.params["x"] for t in by_number] == [1.0, 2.0, 3.0, 4.0]
    assert [t.params["x"] for t in fresh] == [3.0, 4.0]
    assert [t.params["x"] for t in latest(a)] == [3.0, 4.0]  # the two most recent, in order
    _add(a, 5.0, 5.0)
    a.ask()
    assert [t.params["x"] for t in latest(a)] == [4.0, 5.0]


def test_trial_seed_masks_any_integer_seed_into_distinct_streams() -> None:
    def first(seed: int) -> int:
        return int(trial_seed(seed, 0).integers(1 << 62))

    assert first(-1) == first(2**63 - 1)  # a negative seed is taken modulo 2**63
    streams = {first(s) for s in range(200)}
    assert len(streams) == 200  # no two seeds below 200 share a stream
    assert first(7) == first(7) and int(trial_seed(7, 1).integers(1 << 62)) != first(7)


class _Nothing(ProposalSampler):
    def propose(self, study, trial, rng):  # noqa: ANN001, ANN201
        return {}  # every name falls back to the random sampler


def test_a_proposal_sampler_refuses_a_non_space_and_seeds_its_fallback() -> None:
    with pytest.raises(TypeError, match="space: expected a spaces.Space, got dict"):
        _Nothing(space={}, seed=0)  # type: ignore[arg-type]
    import spaces

    space = spaces.Space({"x": spaces.Float(low=0.0, high=1.0)})

    def run(seed: int | None) -> list[float]:
        study = optuna.create_study(sampler=_Nothing(space=space, seed=seed))
        study.optimize(lambda t: space.suggest(t)["x"], n_trials=3)
        return [t.params["x"] for t in study.trials]

    assert run(3) == run(3)  # the fallback draws follow the seed
    assert len(run(None)) == 3  # no seed: one is drawn, and proposals still work
    seeds = {_Nothing(space=space, seed=None)._seed for _ in range(50)}  # noqa: SLF001
    assert len(seeds) == 50 and all(0 <= s < 2**63 for s in seeds)


def test_the_latest_complete_follow_finish_time_not_number_and_skip_infinite_values() -> None:
    import datetime

    def at(study: optuna.Study, x: float, minute: int, value: float | None = None) -> None:
        t = create_trial(params={"x": x}, distributions={"x": _X},
                         value=x if value is None else value)
        t.datetime_start = t.datetime_complete = datetime.datetime(2026, 1, 1, 0, minute)
        study.add_trial(t)

    study = _study()
    at(study, 1.0, 1)
    at(study, 2.0, 5)
    at(study, 3.0, 9)
    at(study, 4.0, 0, value=float("inf"))  # never a result: not counted, and not the end
    at(study, 5.0, 3)  # finished before trial 2 and 3, numbered after them
    at(study, 6.0, 7)
    latest, so_far = LatestComplete(3), CompleteSoFar()
    assert [t.params["x"] for t in latest(study)] == [2.0, 6.0, 3.0]
    by_finish, by_number, _ = so_far(study)
    assert [t.params["x"] for t in by_finish] == [1.0, 5.0, 2.0, 6.0, 3.0]
    assert [t.params["x"] for t in by_number] == [1.0, 2.0, 3.0, 5.0, 6.0]
    assert [t.params["x"] for t in complete_in_order(study)] == [1.0, 5.0, 2.0, 6.0, 3.0]


def test_latest_and_so_far_keep_one_list_per_study() -> None:
    latest, so_far = LatestComplete(5), CompleteSoFar()
    a, b = _study(), _study()
    _add(a, 1.0, 1.0)
    assert [t.params["x"] for t in latest(a)] == [1.0] and len(so_far(a)[0]) == 1
    _add(b, 9.0, 9.0)  # the most recent trial of the storage, but of another study
    assert [t.params["x"] for t in latest(b)] == [9.0]
    assert [t.params["x"] for t in so_far(b)[0]] == [9.0]
    a.ask()
    assert [t.params["x"] for t in latest(a)] == [1.0]
    assert [t.params["x"] for t in so_far(a)[0]] == [1.0]


def test_only_a_genome_family_is_the_genome_and_a_key_holds_every_scalar() -> None:
    import spaces
    from search.strategies._base import candidate_key, family_of, with_genome

    assert family_of(spaces.Space({"genome": spaces.Float(low=0.0, high=1.0)})) is None
    space = spaces.Space({"genome": spaces.CellFamily(), "lr": spaces.Float(low=0.1, high=1.0)})
    rng = np.random.default_rng(0)
    params = with_genome(space, {"genome.bogus": 1, "lr": 0.5}, rng)  # no valid genome: fresh
    assert "genome.bogus" not in params and params["lr"] == 0.5
    other = {**params, "lr": 0.25}
    assert candidate_key(space, params) != candidate_key(space, other)  # lr after the genome


def test_a_proposal_sampler_reseeds_and_tells_a_trial_that_asked_nothing() -> None:
    import spaces

    space = spaces.Space({"x": spaces.Float(low=0.0, high=1.0)})
    sampler = _Nothing(space=space, seed=3)
    sampler.reseed_rng()
    assert isinstance(sampler._seed, int) and 0 <= sampler._seed < 2**63  # noqa: SLF001
    assert sampler._seed != 3  # noqa: SLF001
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: 1.0, n_trials=2)  # no suggestion: nothing was proposed
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2
