"""The REINFORCE controller's exact rules (search.strategies._reinforce), in process and small: the
arms of each kind of decision, where a draw lands, one update's numbers (baseline, scale, clip,
entropy bonus, importance weight), the replay of a study's history (direction, order, fallbacks)
and what a proposal records."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

import spaces
from search.strategies import Policy, ReinforceSampler, candidate_key
from search.strategies._reinforce import LOGP_ATTR, rank_reward

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

CAT = CategoricalDistribution(("a", "b", "c"))
INT8 = IntDistribution(1, 8)  # 8 values: one arm each with 8 bins
INT9 = IntDistribution(1, 9)  # 9 values: 8 bins
FLOAT = FloatDistribution(0.0, 8.0)  # 8 bins of width 1
STEPPED = FloatDistribution(0.0, 0.5, step=0.1)  # 6 values
LOGF = FloatDistribution(1e-4, 1.0, log=True)  # 8 bins of half a decade
SETTINGS = {"learning_rate": 0.5, "entropy_weight": 0.0, "baseline_decay": 0.5}


@pytest.fixture(autouse=True)
def _quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def _favour(policy: Policy, name: str, dist: Any, arm: int) -> None:
    """Logits that put (almost) all the probability on one arm."""
    z = np.full(len(policy.probabilities(name, dist)), -50.0)
    z[arm] = 0.0
    policy.logits[name] = z


# -- arms ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dist", "arms"),
    [
        (CAT, 3),
        (INT8, 8),
        (INT9, 8),
        (IntDistribution(0, 10, step=2), 6),
        (IntDistribution(1, 4, log=True), 8),  # a log scale is binned, however few its values
        (STEPPED, 6),
        (FloatDistribution(0.0, 0.9, step=0.1), 8),  # 10 values: binned
        (IntDistribution(2, 5), 4),
        (FloatDistribution(0.2, 0.5, step=0.1), 4),
        (FLOAT, 8),
        (LOGF, 8),
    ],
)
def test_arms_per_kind_of_decision(dist: Any, arms: int) -> None:
    policy = Policy(8)
    p = policy.probabilities("d", dist)
    assert len(p) == arms
    np.testing.assert_allclose(p, 1 / arms)  # a decision starts uniform
    assert list(policy.logits) == ["d"]


def test_exactly_bins_values_are_one_arm_each() -> None:
    # at the limit each value is its own arm: the favoured arm gives its value, never a
    # neighbour (a bin of the range would round to either)
    rng = np.random.default_rng(3)
    for dist, bins, arm, value in [(INT8, 8, 2, 3), (STEPPED, 6, 1, 0.1), (STEPPED, 6, 5, 0.5)]:
        policy = Policy(bins)
        _favour(policy, "d", dist, arm)
        assert {policy.choose(rng, "d", dist) for _ in range(60)} == {value}


def test_bins_option_sets_how_many_arms_a_range_gets() -> None:
    assert len(Policy(3).probabilities("d", FLOAT)) == 3
    assert len(Policy(3).probabilities("d", INT8)) == 3  # 8 values > 3 bins
    assert len(Policy(3).probabilities("d", IntDistribution(1, 3))) == 3


def test_a_changed_distribution_starts_its_decision_afresh() -> None:
    policy = Policy(8)
    policy.logits["d"] = policy.probabilities("d", CAT) * 0 + np.array([2.0, 0.0, 0.0])
    assert policy.probabilities("d", CAT)[0] > 0.5  # same distribution: logits kept
    wider = CategoricalDistribution(("a", "b", "c", "d"))
    np.testing.assert_allclose(policy.probabilities("d", wider), 0.25)
    np.testing.assert_allclose(policy.probabilities("d", CAT), 1 / 3)  # and back: afresh too


def test_probabilities_survive_huge_logits() -> None:
    policy = Policy(8)
    policy.probabilities("d", CAT)
    policy.logits["d"] = np.array([1000.0, 999.0, -1000.0])
    p = policy.probabilities("d", CAT)
    np.testing.assert_allclose(p, [math.e / (1 + math.e), 1 / (1 + math.e), 0.0], atol=1e-12)


# -- where a draw lands ----------------------------------------------------------------------


def test_choose_takes_the_favoured_arm_of_each_kind() -> None:
    rng = np.random.default_rng(0)
    policy = Policy(8)
    for name, dist, arm, expected in [
        ("c", CAT, 1, "b"),
        ("i", INT8, 5, 6),
        ("i2", IntDistribution(0, 10, step=2), 4, 8),
        ("s", STEPPED, 3, 0.3),
    ]:
        _favour(policy, name, dist, arm)
        got = [policy.choose(rng, name, dist) for _ in range(5)]
        assert got == [pytest.approx(expected)] * 5, name
        assert all(type(g) is type(expected) for g in got), name


def test_choose_draws_uniformly_inside_a_bin() -> None:
    rng = np.random.default_rng(1)
    policy = Policy(8)
    _favour(policy, "f", FLOAT, 3)
    values = np.array([policy.choose(rng, "f", FLOAT) for _ in range(400)])
    assert values.min() >= 3.0 and values.max() < 4.0
    assert values.min() < 3.1 and values.max() > 3.9  # the whole bin, not one point
    assert abs(values.mean() - 3.5) < 0.05
    _favour(policy, "l", LOGF, 0)  # the first of 8 log bins: 1e-4 to 1e-4 * 10 ** 0.5
    logs = np.log10([policy.choose(rng, "l", LOGF) for _ in range(200)])
    assert logs.min() >= -4.0 and logs.max() < -3.5 and logs.max() > -3.6
    _favour(policy, "n", INT9, 7)  # the last of 8 bins over 1..9
    assert {policy.choose(rng, "n", INT9) for _ in range(50)} <= {8, 9}


def test_choose_follows_the_probabilities() -> None:
    rng = np.random.default_rng(2)
    policy = Policy(8)
    policy.probabilities("c", CAT)
    policy.logits["c"] = np.log(np.array([0.6, 0.3, 0.1]))
    draws = [policy.choose(rng, "c", CAT) for _ in range(3000)]
    shares = [draws.count(c) / 3000 for c in "abc"]
    np.testing.assert_allclose(shares, [0.6, 0.3, 0.1], atol=0.03)


@pytest.mark.parametrize(
    ("dist", "value", "arm"),
    [
        (CAT, "c", 2),
        (CAT, "z", None),  # not a choice
        (INT8, 1, 0),
        (INT8, 8, 7),
        (IntDistribution(0, 10, step=2), 6, 3),
        (STEPPED, 0.3, 3),
        (STEPPED, 0.5, 5),
        (FLOAT, 0.0, 0),
        (FLOAT, 2.999, 2),
        (FLOAT, 3.0, 3),
        (FLOAT, 8.0, 7),  # the top of the range is in the last bin
        (INT9, 9, 7),
        (INT9, 1, 0),
        (LOGF, 1e-2, 4),
        (LOGF, 1.0, 7),
    ],
)
def test_the_arm_a_value_came_from(dist: Any, value: Any, arm: int | None) -> None:
    policy = Policy(8)
    assert policy.arm("d", dist, value) == arm
    logp = policy.log_probability("d", dist, value)
    if arm is None:
        assert logp is None
    else:
        assert logp == pytest.approx(-math.log(len(policy.probabilities("d", dist))))
    assert list(policy.logits) == ["d"]  # no decision but the one asked about


def test_log_probability_is_of_the_value_arm_and_finite_at_zero() -> None:
    policy = Policy(8)
    policy.probabilities("c", CAT)
    policy.logits["c"] = np.array([0.0, math.log(3.0), -1000.0])
    assert policy.log_probability("c", CAT, "b") == pytest.approx(math.log(0.75))
    assert policy.log_probability("c", CAT, "a") == pytest.approx(math.log(0.25))
    assert policy.log_probability("c", CAT, "c") == pytest.approx(math.log(1e-300))


# -- one update ------------------------------------------------------------------------------


def test_the_first_result_only_sets_the_baseline() -> None:
    policy = Policy(8)
    policy.update({"c": (CAT, "a")}, 5.0, **SETTINGS)
    assert (policy.baseline, policy.updates, policy.variance) == (5.0, 1, 0.0)
    np.testing.assert_array_equal(policy.probabilities("c", CAT), np.full(3, 1 / 3))


def test_the_second_result_moves_the_taken_arm_by_one_scaled_advantage() -> None:
    # diff 2, variance 4: the scaled advantage is exactly +1; softmax gradient (1 - p, -p, -p)
    policy = Policy(8)
    policy.update({"c": (CAT, "a")}, 1.0, **SETTINGS)
    policy.update({"c": (CAT, "a"), "i": (INT8, 3)}, 3.0, **SETTINGS)
    np.testing.assert_allclose(policy.logits["c"], 0.5 * np.array([2 / 3, -1 / 3, -1 / 3]))
    expected = np.full(8, -0.5 / 8)
    expected[2] += 0.5
    np.testing.assert_allclose(policy.logits["i"], expected)
    assert policy.variance == 4.0 and policy.updates == 2
    assert policy.baseline == pytest.approx(0.5 * 1.0 + 0.5 * 3.0)
    # a worse result moves the taken arm down by the same rule (advantage -1 once scaled)
    worse = Policy(8)
    worse.update({"c": (CAT, "b")}, 1.0, **SETTINGS)
    worse.update({"c": (CAT, "b")}, -9.0, **SETTINGS)
    np.testing.assert_allclose(worse.logits["c"], -0.5 * np.array([-1 / 3, 2 / 3, -1 / 3]))
    assert set(policy.logits) == {"c", "i"} and set(worse.logits) == {"c"}


def test_a_step_follows_the_current_probabilities() -> None:
    # from p = (1/2, 1/4, 1/4), an advantage of +1 on "b": lr * (-1/2, 3/4, -1/4)
    policy = Policy(8)
    policy.probabilities("c", CAT)
    z0 = np.log(np.array([2.0, 1.0, 1.0]))
    policy.logits["c"] = z0.copy()
    policy.update({}, 1.0, **SETTINGS)
    policy.update({"c": (CAT, "b")}, 3.0, **SETTINGS)
    np.testing.assert_allclose(policy.logits["c"] - z0, 0.5 * np.array([-0.5, 0.75, -0.25]))


def test_the_advantage_is_scaled_by_the_moving_deviation_and_clipped_at_3() -> None:
    policy = Policy(8)
    decay = 0.75
    settings = {"learning_rate": 1.0, "entropy_weight": 0.0, "baseline_decay": decay}
    policy.update({}, 0.0, **settings)
    policy.update({}, 2.0, **settings)  # diff 2: variance 4, baseline 0.5
    assert (policy.variance, policy.baseline) == (4.0, pytest.approx(0.5))
    policy.update({"c": (CAT, "a")}, 1.5, **settings)  # diff 1: variance 0.75 * 4 + 0.25
    assert policy.variance == pytest.approx(3.25)
    np.testing.assert_allclose(
        policy.logits["c"], 1 / math.sqrt(3.25) * np.array([2 / 3, -1 / 3, -1 / 3])
    )
    assert policy.baseline == pytest.approx(0.75 * 0.5 + 0.25 * 1.5)
    policy.update({"d": (CAT, "a")}, policy.baseline + 2.0, **settings)
    assert policy.variance == pytest.approx(0.75 * 3.25 + 0.25 * 4)
    np.testing.assert_allclose(
        policy.logits["d"], 2 / math.sqrt(3.4375) * np.array([2 / 3, -1 / 3, -1 / 3])
    )
    # with a slow decay a far result's scaled advantage would pass 3: it is clipped there
    slow = {"learning_rate": 1.0, "entropy_weight": 0.0, "baseline_decay": 0.99}
    for sign_, name in ((1.0, "e"), (-1.0, "f")):
        far = Policy(8)
        far.update({}, 0.0, **slow)
        far.update({}, 1.0, **slow)  # variance 1
        far.update({name: (CAT, "a")}, far.baseline + sign_ * 100.0, **slow)
        np.testing.assert_allclose(
            far.logits[name], sign_ * 3.0 * np.array([2 / 3, -1 / 3, -1 / 3])
        )


def test_an_equal_result_moves_nothing() -> None:
    policy = Policy(8)
    policy.update({"c": (CAT, "a")}, 2.0, **SETTINGS)
    policy.update({"c": (CAT, "a")}, 2.0, **SETTINGS)  # no difference, no variance: no step
    np.testing.assert_array_equal(policy.logits["c"], np.zeros(3))
    assert policy.updates == 2 and policy.baseline == 2.0


def test_the_importance_weight_scales_the_step_but_not_the_baseline() -> None:
    plain, weighted = Policy(8), Policy(8)
    for policy, weight in ((plain, 1.0), (weighted, 2.5)):
        policy.update({"c": (CAT, "a")}, 1.0, **SETTINGS, weight=weight)
        policy.update({"c": (CAT, "a")}, 3.0, **SETTINGS, weight=weight)
    np.testing.assert_allclose(weighted.logits["c"], 2.5 * plain.logits["c"])
    assert weighted.baseline == plain.baseline and weighted.variance == plain.variance


def test_the_entropy_bonus_is_the_gradient_of_the_entropy() -> None:
    def entropy(z: np.ndarray) -> float:
        p = np.exp(z - z.max())
        p /= p.sum()
        return float(-(p * np.log(p)).sum())

    z0 = np.array([1.0, 0.0, -0.5])
    policy = Policy(8)
    policy.probabilities("c", CAT)
    policy.logits["c"] = z0.copy()
    policy.update({}, 1.0, **SETTINGS)
    policy.update(
        {"c": (CAT, "a")}, 1.0, learning_rate=0.1, entropy_weight=2.0, baseline_decay=0.5
    )  # no advantage: only the entropy term moves the logits
    numeric = np.array(
        [(entropy(z0 + 1e-6 * e) - entropy(z0 - 1e-6 * e)) / 2e-6 for e in np.eye(3)]
    )
    np.testing.assert_allclose(policy.logits["c"] - z0, 0.1 * 2.0 * numeric, rtol=1e-5)
    assert entropy(policy.logits["c"]) > entropy(z0)


def test_a_value_outside_the_distribution_is_skipped() -> None:
    policy = Policy(8)
    policy.update({"c": (CAT, "a")}, 0.0, **SETTINGS)
    policy.update({"c": (CAT, "zz"), "d": (CAT, "b")}, 1.0, **SETTINGS)
    assert policy.probabilities("c", CAT).tolist() == [1 / 3] * 3
    assert policy.probabilities("d", CAT)[1] > 1 / 3
    assert policy.updates == 2


# -- the sampler -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"learning_rate": 0.0}, r"^learning_rate: must be > 0, got 0.0$"),
        ({"learning_rate": float("nan")}, r"^learning_rate: must be > 0, got nan$"),
        ({"entropy_weight": -0.1}, r"^entropy_weight: must be >= 0, got -0.1$"),
        ({"entropy_weight": float("nan")}, r"^entropy_weight: must be >= 0, got nan$"),
        ({"baseline_decay": 1.0}, r"^baseline_decay: must be in \[0, 1\), got 1.0$"),
        ({"baseline_decay": -0.1}, r"^baseline_decay: must be in \[0, 1\), got -0.1$"),
        ({"bins": 1}, r"^bins: must be >= 2, got 1$"),
    ],
)
def test_bad_options_are_one_line_errors(options: dict[str, Any], message: str) -> None:
    space = spaces.Space({"x": spaces.Float(low=0.0, high=1.0)})
    with pytest.raises(ValueError, match=message):
        ReinforceSampler(space=space, **options)


def test_the_edges_of_the_options_are_accepted() -> None:
    space = spaces.Space({"x": spaces.Float(low=0.0, high=1.0)})
    sampler = ReinforceSampler(
        space=space, learning_rate=1e-9, entropy_weight=0.0, baseline_decay=0.0, bins=2, seed=0
    )
    study = optuna.create_study(sampler=sampler)
    for _ in range(3):
        trial = study.ask()
        study.tell(trial, space.suggest(trial)["x"])
    assert len(sampler.policy(study).probabilities("x", FloatDistribution(0.0, 1.0))) == 2


SPACE = spaces.Space(
    {"c": spaces.Categorical(("a", "b", "c")), "x": spaces.Float(low=0.0, high=8.0)}
)
REWARD = {"a": 0.0, "b": 1.0, "c": 3.0}


def _study(direction: str = "maximize", **options: Any) -> tuple[optuna.Study, ReinforceSampler]:
    sampler = ReinforceSampler(space=SPACE, seed=0, **options)
    return optuna.create_study(sampler=sampler, direction=direction), sampler


def test_the_defaults_are_the_documented_ones() -> None:
    # learning_rate 0.3, no entropy bonus, baseline decay 0.7, 8 bins, no importance weights
    study, sampler = _study()
    values = [0.0, 2.0, 1.0, 5.0]
    for v in values:
        study.enqueue_trial({"c": "c", "x": v})
        trial = study.ask()
        SPACE.suggest(trial)
        study.tell(trial, v)
    policy = sampler.policy(study)
    expected, seen = Policy(8), []
    for v in values:
        expected.update(
            {"c": (CAT, "c"), "x": (FLOAT, v)},
            rank_reward(seen, v),  # the value's rank among the results so far
            learning_rate=0.3,
            entropy_weight=0.0,
            baseline_decay=0.7,
        )
    assert policy.baseline == pytest.approx(expected.baseline)
    np.testing.assert_allclose(policy.logits["c"], expected.logits["c"])
    np.testing.assert_allclose(policy.logits["x"], expected.logits["x"])
    assert len(policy.logits["x"]) == 8
    proposed = study.ask()  # a proposal records no log-probabilities by default
    SPACE.suggest(proposed)
    assert not any(LOGP_ATTR in t.system_attrs for t in study.trials)


def _tell(study: optuna.Study, params: dict[str, Any], value: float) -> None:
    study.enqueue_trial(params)
    trial = study.ask()
    SPACE.suggest(trial)
    study.tell(trial, value)


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_the_better_choice_gains_in_either_direction(direction: str) -> None:
    study, sampler = _study(direction)
    s = 1.0 if direction == "maximize" else -1.0
    for choice in "abcabc":
        _tell(study, {"c": choice, "x": 1.0}, s * REWARD[choice])
    p = sampler.policy(study).probabilities("c", CAT)
    assert p[2] > p[1] > p[0]
    assert sampler.policy(study).updates == 6


def test_failed_pruned_and_nan_trials_teach_nothing() -> None:
    study, sampler = _study()
    _tell(study, {"c": "a", "x": 1.0}, 0.0)
    _tell(study, {"c": "c", "x": 1.0}, 3.0)
    before = sampler.policy(study).logits["c"].copy()
    for state in (optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED):
        study.enqueue_trial({"c": "a", "x": 2.0})
        trial = study.ask()
        SPACE.suggest(trial)
        study.tell(trial, state=state)
    _tell(study, {"c": "b", "x": 2.0}, float("nan"))
    policy = sampler.policy(study)
    assert policy.updates == 2
    np.testing.assert_array_equal(policy.logits["c"], before)


def test_a_history_that_changed_order_is_replayed_from_the_start() -> None:
    # Another process told a trial that finished before the ones this sampler replayed: the
    # order of the history changed, so the cached policy is not extended but rebuilt.
    import datetime

    study, sampler = _study()
    for choice in "abc":
        _tell(study, {"c": choice, "x": 1.0}, REWARD[choice])
    assert sampler.policy(study).updates == 3
    first = study.trials[0]
    study.add_trial(
        optuna.trial.FrozenTrial(
            number=0,
            trial_id=0,
            state=optuna.trial.TrialState.COMPLETE,
            value=None,
            values=[2.0],
            datetime_start=first.datetime_start - datetime.timedelta(seconds=2),
            datetime_complete=first.datetime_start - datetime.timedelta(seconds=1),
            params={"c": "b", "x": 7.5},
            distributions=first.distributions,
            user_attrs={},
            system_attrs={},
            intermediate_values={},
        )
    )
    SPACE.suggest(study.ask())  # the next ask replays the history it reads
    policy = sampler.policy(study)
    fresh = ReinforceSampler(space=SPACE, seed=0).policy(study)
    assert policy.updates == fresh.updates == 4
    assert policy.baseline == pytest.approx(fresh.baseline)
    np.testing.assert_allclose(policy.logits["c"], fresh.logits["c"])
    np.testing.assert_allclose(policy.logits["x"], fresh.logits["x"])


def test_proposals_come_from_the_policy_and_avoid_repeats() -> None:
    space = spaces.Space({"c": spaces.Categorical(("a", "b", "c"))})
    sampler = ReinforceSampler(space=space, learning_rate=5.0, seed=0)
    study = optuna.create_study(sampler=sampler, direction="maximize")
    for choice in "abc":
        study.enqueue_trial({"c": choice})
        trial = study.ask()
        study.tell(trial, REWARD[space.suggest(trial)["c"]])
    assert sampler.policy(study).probabilities("c", CAT)[2] > 0.9
    # every candidate was tried: the proposal is a repeat, drawn from the policy (mostly "c")
    asked = []
    for _ in range(6):
        trial = study.ask()
        asked.append(space.suggest(trial)["c"])
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    assert asked.count("c") >= 5
    # with "a" and "b" untried, the policy's favourite is skipped for an unseen candidate
    space2 = spaces.Space({"c": spaces.Categorical(("a", "b", "c", "d"))})
    sampler2 = ReinforceSampler(space=space2, learning_rate=5.0, seed=0)
    study2 = optuna.create_study(sampler=sampler2, direction="maximize")
    for choice, value in (("c", 3.0), ("d", 0.0)):
        study2.enqueue_trial({"c": choice})
        trial = study2.ask()
        study2.tell(trial, value + 0.0 * len(space2.suggest(trial)))
    pending = [study2.ask() for _ in range(2)]
    got = {space2.suggest(t)["c"] for t in pending}
    assert got == {"a", "b"}


def test_a_proposal_records_its_policy_log_probabilities() -> None:
    study, sampler = _study(importance_weights=True)
    _tell(study, {"c": "a", "x": 1.0}, 0.0)
    _tell(study, {"c": "c", "x": 6.5}, 3.0)
    policy = sampler.policy(study)
    trial = study.ask()
    params = SPACE.suggest(trial)
    logp = study.trials[-1].system_attrs[LOGP_ATTR]
    assert set(logp) == {"c", "x"}
    assert logp["c"] == pytest.approx(policy.log_probability("c", CAT, params["c"]))
    assert logp["x"] == pytest.approx(policy.log_probability("x", FLOAT, params["x"]))
    assert logp["c"] != pytest.approx(-math.log(3))  # the learned policy, not a uniform one
    # the enqueued (not proposed) trials carry none
    assert all(LOGP_ATTR not in t.system_attrs for t in study.trials[:2])


def _fake(trial: optuna.trial.FrozenTrial, logp: Any) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(
        params=trial.params,
        distributions=trial.distributions,
        value=0.0,
        system_attrs={LOGP_ATTR: logp},
    )


def test_the_importance_weight_reads_only_what_it_can() -> None:
    study, sampler = _study()
    _tell(study, {"c": "a", "x": 1.0}, 0.0)
    _tell(study, {"c": "c", "x": 6.5}, 3.0)
    policy = sampler.policy(study)
    t = study.trials[-1]
    taken = {n: (t.distributions[n], v) for n, v in t.params.items()}
    now_c = policy.log_probability("c", CAT, "c")
    now_x = policy.log_probability("x", FLOAT, 6.5)
    assert now_c is not None and now_x is not None
    weight = ReinforceSampler._weight  # noqa: SLF001
    assert weight(policy, taken, t) == 1.0  # nothing recorded: weight 1
    assert weight(policy, taken, _fake(t, [0.0])) == 1.0  # not a mapping
    # "x" recorded as text is skipped: the ratio over "c" alone
    w = weight(policy, taken, _fake(t, {"c": now_c - 0.5, "x": "bad"}))
    assert w == pytest.approx(math.exp(0.5))
    w = weight(policy, taken, _fake(t, {"c": now_c - 0.5}))  # "x" not recorded
    assert w == pytest.approx(math.exp(0.5))
    w = weight(policy, taken, _fake(t, {"c": now_c - 0.25, "x": now_x - 0.5}))  # both count
    assert w == pytest.approx(math.exp(0.75))
    w = weight(policy, taken, _fake(t, {"c": 0, "x": now_x}))  # an int is a number too
    assert w == pytest.approx(math.exp(now_c))
    # a value the policy cannot place counts for nothing
    odd = {"c": (CAT, "zz"), "x": taken["x"]}
    assert weight(policy, odd, _fake(t, {"c": -9.0, "x": now_x - 0.5})) == pytest.approx(
        math.exp(0.5)
    )
    assert weight(policy, taken, _fake(t, {"c": now_c - 1e6})) == 3.0  # clipped
    assert weight(policy, taken, _fake(t, {"c": now_c + 1e6})) == pytest.approx(1 / 3)
    assert weight(policy, taken, _fake(t, {"c": now_c - 1.0})) == pytest.approx(math.e)


def test_importance_weights_reach_the_update_only_when_asked_for() -> None:
    # The third trial's draw is recorded as one the proposing policy found most unlikely
    # (weight clipped at 3): weighted, its step is 3 times the plain one; a sampler without
    # importance weights ignores the record (a study resumed with them turned off).
    steps = {}
    for weights in (False, True):
        study, sampler = _study(importance_weights=weights)
        _tell(study, {"c": "a", "x": 1.0}, 0.0)
        _tell(study, {"c": "b", "x": 1.0}, 1.0)
        trial = study.ask()
        SPACE.suggest(trial)
        study._storage.set_trial_system_attr(  # noqa: SLF001
            trial._trial_id, LOGP_ATTR, {"c": -1e6}
        )  # noqa: SLF001
        study.tell(trial, 5.0)
        before, seen = Policy(8), []
        for choice, value in (("a", 0.0), ("b", 1.0)):
            before.update(
                {"c": (CAT, choice)},
                rank_reward(seen, value),
                learning_rate=0.3,
                entropy_weight=0.0,
                baseline_decay=0.7,
            )
        plain = Policy(8)
        plain.logits, plain.dists = dict(before.logits), dict(before.dists)
        plain.baseline, plain.variance, plain.updates = (
            before.baseline,
            before.variance,
            before.updates,
        )
        plain.update(
            {"c": (CAT, study.trials[-1].params["c"])},
            rank_reward(seen, 5.0),
            learning_rate=0.3,
            entropy_weight=0.0,
            baseline_decay=0.7,
        )
        steps[weights] = (
            sampler.policy(study).logits["c"] - before.logits["c"],
            plain.logits["c"] - before.logits["c"],
        )
    np.testing.assert_allclose(steps[False][0], steps[False][1])
    np.testing.assert_allclose(steps[True][0], 3.0 * steps[True][1])
    assert np.abs(steps[True][1]).max() > 0.05


def test_a_proposal_gives_up_after_50_policy_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every draw repeats the one seen candidate: the ask stops after 50 draws of the
    # policy and takes the repeat (so an exhausted space costs a bounded ask).
    space = spaces.Space({"c": spaces.Categorical(("a", "b"))})
    sampler = ReinforceSampler(space=space, seed=0)
    study = optuna.create_study(sampler=sampler, direction="maximize")
    study.enqueue_trial({"c": "a"})
    trial = study.ask()
    study.tell(trial, float(space.suggest(trial)["c"] == "a"))
    policy = sampler.policy(study)
    policy.probabilities("c", CategoricalDistribution(("a", "b")))
    policy.logits["c"] = np.array([0.0, -1000.0])  # "b" is never drawn
    calls = []
    choose = Policy.choose

    def counted(self: Policy, *args: Any) -> Any:
        calls.append(1)
        return choose(self, *args)

    monkeypatch.setattr(Policy, "choose", counted)
    trial = study.ask()
    assert space.suggest(trial)["c"] == "a"
    assert len(calls) == 50


def test_concurrent_proposals_are_distinct_candidates() -> None:
    study, _ = _study()
    _tell(study, {"c": "a", "x": 1.0}, 0.0)
    _tell(study, {"c": "c", "x": 6.5}, 3.0)
    pending = [study.ask() for _ in range(6)]
    keys = {candidate_key(SPACE, SPACE.suggest(t) and t.params) for t in pending}
    assert len(keys) == 6


def test_the_reward_is_the_results_rank_so_a_diverged_run_is_only_the_worst() -> None:
    seen: list[float] = []
    assert rank_reward(seen, 2.0) == 0.0  # the first: the median
    assert rank_reward(seen, 3.0) > 0 > rank_reward(seen, -1e30)
    assert rank_reward(seen, 2.0) == 0.0 and seen == [-1e30, 2.0, 2.0, 3.0]  # a tie: mid-rank
    # a loss 1e6x the others moves the policy exactly as a loss merely worse than all does
    logits = []
    for outlier in (-1e6, -4.0):
        study, sampler = _study()
        for choice, value in (("a", 0.0), ("b", 1.0), ("c", 3.0), ("a", outlier), ("c", 2.5),
                              ("b", 0.5)):
            _tell(study, {"c": choice, "x": 1.0}, value)
        logits.append(sampler.policy(study).logits["c"])
    np.testing.assert_allclose(logits[0], logits[1])
