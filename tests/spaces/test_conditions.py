"""Conditional dimensions: a dimension applies only when others have given values; sampled
define-by-run (conditions first), so a trial's params hold exactly the dimensions that applied."""

from __future__ import annotations

import optuna
import pytest

from spaces import Categorical, CellFamily, Float, Int, Space, condition_problems

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

ALGORITHMS = ("sync", "asgd", "localsgd")


def algorithm_space() -> Space:
    # Given in an order that puts dimensions before their conditions.
    return Space(
        {
            "send_every": Int(low=1, high=8),
            "local_steps": Int(low=2, high=16, step=2),
            "algorithm": Categorical(ALGORITHMS),
            "ranks": Int(low=1, high=4),
            "lr": Float(low=1e-3, high=1e-1, log=True),
        },
        when={
            "send_every": {"algorithm": "asgd"},
            "local_steps": {"algorithm": ["localsgd"]},
            "algorithm": {"ranks": [2, 3, 4]},
        },
    )


def test_conditions_come_first_and_others_keep_their_order() -> None:
    assert list(algorithm_space()) == ["ranks", "algorithm", "send_every", "local_steps", "lr"]


def test_suggest_asks_only_for_the_dimensions_whose_condition_holds() -> None:
    space = algorithm_space()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(80):
        trial = study.ask()
        params = space.suggest(trial)
        assert trial.params == params  # nothing asked that is not returned
        algorithm = params.get("algorithm")
        assert ("algorithm" in params) == (params["ranks"] >= 2)
        assert ("send_every" in params) == (algorithm == "asgd")
        assert ("local_steps" in params) == (algorithm == "localsgd")
        assert "lr" in params
        assert space.active(params) == list(params)
        seen.add(algorithm)
        study.tell(trial, params["lr"])
    assert seen == {None, *ALGORITHMS}  # every branch was taken, one rank included


def test_a_condition_holds_only_when_its_own_condition_does() -> None:
    space = algorithm_space()
    # A stale value (left by a mutation that switched algorithm off) does not count.
    assert not space.is_active("send_every", {"ranks": 1, "algorithm": "asgd"})
    assert space.is_active("send_every", {"ranks": 2, "algorithm": "asgd"})
    assert space.condition("algorithm") == {"ranks": (2, 3, 4)}
    assert space.condition("lr") == {}


def test_several_keys_must_all_hold() -> None:
    space = Space(
        {"a": Categorical(("x", "y")), "b": Int(low=0, high=3), "c": Float(low=0, high=1)},
        when={"c": {"a": "x", "b": [1, 2]}},
    )
    assert space.is_active("c", {"a": "x", "b": 2})
    assert not space.is_active("c", {"a": "x", "b": 0})
    assert not space.is_active("c", {"a": "y", "b": 1})


def test_true_is_not_one() -> None:
    space = Space(
        {"flag": Categorical((True, False)), "n": Categorical((0, 1)), "x": Float(low=0, high=1)},
        when={"x": {"flag": True}},
    )
    assert space.is_active("x", {"flag": True})
    assert not space.is_active("x", {"flag": 1})
    with pytest.raises(
        ValueError, match=r"x\.when: 1 is not a choice of flag \(one of: True, False\)"
    ):
        Space(space, when={"x": {"flag": 1}})


@pytest.mark.parametrize(
    ("dims", "when", "expected"),
    [
        ({"a": Int(low=0, high=3)}, {"a": {"b": 1}}, ("a", "'b' is not a dimension of the space")),
        ({"a": Int(low=0, high=3)}, {"z": {"a": 1}}, ("z", "not a dimension of the space")),
        (
            {"a": Categorical(("x", "y")), "b": Int(low=0, high=3)},
            {"b": {"a": "w"}},
            ("b", "'w' is not a choice of a (one of: x, y)"),
        ),
        (
            {"a": Int(low=1, high=8, step=2), "b": Int(low=0, high=3)},
            {"b": {"a": 4}},
            ("b", "4 is not a value of a (an int from 1 to 8 in steps of 2)"),
        ),
        (
            {"a": Int(low=1, high=8), "b": Int(low=0, high=3)},
            {"b": {"a": 9}},
            ("b", "9 is not a value of a (an int from 1 to 8)"),
        ),
        (
            {"a": Int(low=1, high=8), "b": Int(low=0, high=3)},
            {"b": {"a": "2"}},
            ("b", "'2' is not a value of a"),
        ),
        (
            {"a": Float(low=0, high=1), "b": Int(low=0, high=3)},
            {"b": {"a": 0.5}},
            ("b", "a cannot be a condition: only a categorical or int dimension can"),
        ),
        (
            {"a": Int(low=0, high=3), "b": Int(low=0, high=3)},
            {"b": {}},
            ("b", "must name at least one dimension"),
        ),
        (
            {"a": Int(low=0, high=3), "b": Int(low=0, high=3)},
            {"b": {"a": []}},
            ("b", "a: needs at least one value"),
        ),
        ({"a": Int(low=0, high=3)}, {"a": {"a": 1}}, ("a", "a cannot depend on itself")),
        (
            {"a": Int(low=0, high=3), "genome": CellFamily()},
            {"genome": {"a": 1}},
            ("genome", "only a float, int or categorical dimension can have a condition"),
        ),
        (
            {"a": Int(low=0, high=3), "genome": CellFamily()},
            {"a": {"genome": 1}},
            ("a", "genome cannot be a condition"),
        ),
    ],
)
def test_mistakes_in_when_say_what_is_wrong(dims: dict, when: dict, expected: tuple) -> None:
    name, fragment = expected
    problems = condition_problems(dims, when)
    assert len(problems) == 1, problems
    assert problems[0][0] == name and fragment in problems[0][1], problems
    with pytest.raises(ValueError, match=rf"^{name}\.when: "):
        Space(dims, when=when)


def test_a_cycle_is_reported_once_with_its_path() -> None:
    dims = {
        "a": Int(low=0, high=3),
        "b": Int(low=0, high=3),
        "c": Int(low=0, high=3),
        "d": Int(low=0, high=3),
    }
    problems = condition_problems(
        dims, {"a": {"c": 1}, "b": {"a": 1}, "c": {"b": 1}, "d": {"a": 2}}
    )
    assert problems == [("a", "conditions form a cycle: a -> c -> b -> a")]


def test_every_problem_is_listed_not_only_the_first() -> None:
    dims = {"a": Categorical(("x", "y")), "b": Int(low=0, high=3), "c": Int(low=0, high=3)}
    problems = condition_problems(dims, {"b": {"a": "w"}, "c": {"nope": 1, "a": ["x", "v"]}})
    assert [name for name, _ in problems] == ["b", "c", "c"]


def test_reachable_lists_the_combinations_a_trial_can_have() -> None:
    space = algorithm_space()
    combos = space.reachable(["algorithm"])  # ranks comes along: algorithm's condition names it
    assert combos is not None
    assert {"ranks": 1} in combos and {"ranks": 1, "algorithm": "asgd"} not in combos
    assert {"ranks": 3, "algorithm": "asgd"} in combos
    assert len(combos) == 1 + 3 * 3
    assert space.reachable(["lr"]) is None  # a float has no finite list of values
    assert space.reachable(["send_every"], limit=20) is None  # 1 + 3 * (2 + 8) > 20
    assert Space({}).reachable([]) == [{}]
