"""A conditional space's exact rules: every mistake in ``when`` listed (not only those before the
first of some kind) with its message word for word, cycles found whatever the order of a
condition's keys and each reported once, int conditions on a grid that does not start at 0, and
the combinations ``reachable`` lists on such a grid."""

from __future__ import annotations

import pytest

from spaces import Categorical, CellFamily, Float, Int, Space, condition_problems

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def test_refusals_word_for_word() -> None:
    dims = {"a": Int(low=0, high=3), "b": Int(low=0, high=3), "genome": CellFamily()}
    assert condition_problems(dims, {"b": {}}) == [
        ("b", 'must name at least one dimension, e.g. { algorithm = "asgd" }')
    ]
    assert condition_problems(dims, {"genome": {"a": 1}}) == [
        ("genome", "only a float, int or categorical dimension can have a condition")
    ]
    assert condition_problems(dims, {"z": {"a": 1}}) == [
        ("z", "not a dimension of the space (dimensions: a, b, genome)")
    ]


def test_mistakes_after_an_unknown_or_unconditionable_dimension_are_still_listed() -> None:
    dims = {"a": Int(low=0, high=3), "b": Int(low=0, high=3), "genome": CellFamily()}
    problems = condition_problems(dims, {"z": {"a": 1}, "genome": {"a": 1}, "b": {"a": 7}})
    assert [name for name, _ in problems] == ["z", "genome", "b"]
    assert problems[2] == ("b", "7 is not a value of a (an int from 0 to 3)")


def test_a_cycle_is_found_behind_a_parent_without_a_condition() -> None:
    # a's first parent (x) has no condition of its own; the cycle runs through its second.
    dims = {"x": Int(low=0, high=3), "a": Int(low=0, high=3), "b": Int(low=0, high=3)}
    problems = condition_problems(dims, {"a": {"x": 1, "b": 1}, "b": {"x": 2, "a": 1}})
    assert problems == [("a", "conditions form a cycle: a -> b -> a")]


def test_two_cycles_are_each_reported_once() -> None:
    dims = {n: Int(low=0, high=3) for n in ("a", "c", "b", "d")}
    problems = condition_problems(
        dims, {"a": {"b": 1}, "b": {"a": 1}, "c": {"d": 1}, "d": {"c": 1}}
    )
    assert problems == [
        ("a", "conditions form a cycle: a -> b -> a"),
        ("c", "conditions form a cycle: c -> d -> c"),
    ]


def test_an_int_condition_on_a_grid_counts_from_low() -> None:
    dims = {"n": Int(low=1, high=10, step=3), "x": Float(low=0, high=1)}
    assert condition_problems(dims, {"x": {"n": [4, 7]}}) == []
    assert condition_problems(dims, {"x": {"n": 6}}) == [
        ("x", "6 is not a value of n (an int from 1 to 10 in steps of 3)")
    ]
    space = Space(dims, when={"x": {"n": [4, 7]}})
    assert space.is_active("x", {"n": 7}) and not space.is_active("x", {"n": 1})


def test_reachable_follows_an_int_grid() -> None:
    space = Space(
        {"n": Int(low=1, high=10, step=3), "act": Categorical(("relu", "tanh"))},
        when={"act": {"n": 4}},
    )
    assert space.reachable(["act"]) == [
        {"n": 1},
        {"n": 4, "act": "relu"},
        {"n": 4, "act": "tanh"},
        {"n": 7},
        {"n": 10},
    ]


def test_reachable_lists_up_to_100_000_combinations_by_default() -> None:
    assert len(Space({"n": Int(low=0, high=99_999)}).reachable(["n"]) or []) == 100_000
    assert Space({"n": Int(low=0, high=100_000)}).reachable(["n"]) is None
