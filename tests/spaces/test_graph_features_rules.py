"""Graph feature maps value by value on two small DAGs: the paths found, each node's depth, the
BANANAS path counts (exact sequences up to ``max_length``, longer ones by length), hashed paths
and Weisfeiler-Lehman subtree counts. The hashed buckets are pinned: a predictor's features (and
a model fitted on them in another process) depend on them staying the same."""

from __future__ import annotations

import re

import numpy as np
import pytest

from spaces._graph_features import (
    BUCKETS,
    bucket,
    depths,
    exact_counts,
    hashed_path_features,
    path_features,
    paths,
    wl_features,
)

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

# Paths input -> output: conv; pool>conv; conv>pool>conv; pool; conv>pool; and the direct edge.
A = (["in", "conv", "pool", "conv", "out"], [(), (0,), (0, 1), (2,), (1, 3, 2, 0)])
# Two identical branches: conv, conv.
B = (["in", "conv", "conv", "out"], [(), (0,), (0,), (1, 2)])
ALPHABET = ["conv", "pool"]


def _nonzero(values: np.ndarray, names: list[str]) -> dict[str, float]:
    assert len(values) == len(names)
    return {name: float(v) for name, v in zip(names, values, strict=True) if v}


def test_paths_and_depths() -> None:
    assert paths(A) == [
        ("conv",),
        ("pool", "conv"),
        ("conv", "pool", "conv"),
        ("pool",),
        ("conv", "pool"),
        (),
    ]
    assert depths(A) == [0, 1, 2, 3, 4]
    assert depths(B) == [0, 1, 1, 2]


def test_path_counts_up_to_max_length_then_by_length() -> None:
    values, names = path_features(A, ALPHABET, 1, 3, "g")
    assert names == ["g.path=conv", "g.path=pool", "g.paths_of_length2", "g.paths_of_length3"]
    assert values.tolist() == [1, 1, 2, 1]  # the direct edge (no inner node) is not counted

    values, names = path_features(A, ALPHABET, 2, 4, "g")
    assert names == [
        "g.path=conv",
        "g.path=pool",
        "g.path=conv>conv",
        "g.path=conv>pool",
        "g.path=pool>conv",
        "g.path=pool>pool",
        "g.paths_of_length3",
        "g.paths_of_length4",
    ]
    assert values.tolist() == [1, 1, 0, 1, 1, 0, 1, 0]

    values, names = path_features(A, ALPHABET, 3, 3, "g")
    assert len(values) == 2 + 4 + 8
    assert _nonzero(values, names) == {
        "g.path=conv": 1,
        "g.path=pool": 1,
        "g.path=conv>pool": 1,
        "g.path=pool>conv": 1,
        "g.path=conv>pool>conv": 1,
    }


def test_path_counts_with_no_exact_sequences_count_every_path_by_length() -> None:
    values, names = path_features(A, ALPHABET, 0, 3, "g")
    assert names == ["g.paths_of_length1", "g.paths_of_length2", "g.paths_of_length3"]
    assert values.tolist() == [2, 2, 1]


def test_repeated_paths_are_counted() -> None:
    values, names = path_features(B, ALPHABET, 1, 2, "g")
    assert _nonzero(values, names) == {"g.path=conv": 2}
    values, names = path_features(B, ["pool"], 0, 1, "g")
    assert _nonzero(values, names) == {"g.paths_of_length1": 2}


def test_hashed_paths_are_pinned_buckets_and_lengths() -> None:
    assert [bucket(s) for s in ["", "skip", "conv>pool", "a"]] == [13, 49, 37, 60]
    values, names = hashed_path_features(A, 2, "g")
    assert len(values) == len(names) == BUCKETS + 3
    assert names[:2] == ["g.path#0", "g.path#1"]
    assert names[BUCKETS:] == ["g.paths_of_length0", "g.paths_of_length1", "g.paths_of_length2"]
    # "" and "conv" share bucket 13; the path of length 3 counts as the longest, 2
    assert _nonzero(values, names) == {
        "g.path#13": 2,
        "g.path#19": 1,
        "g.path#37": 1,
        "g.path#47": 1,
        "g.path#62": 1,
        "g.paths_of_length0": 1,
        "g.paths_of_length1": 2,
        "g.paths_of_length2": 3,
    }
    values, names = hashed_path_features(B, 2, "g")
    assert _nonzero(values, names) == {"g.path#13": 2, "g.paths_of_length1": 2}


def test_weisfeiler_lehman_counts_are_pinned() -> None:
    values, names = wl_features(B, ["in", "conv", "out"], 2, "g")
    assert len(values) == len(names) == 3 + 2 * BUCKETS
    assert names[:3] == ["g.wl0=in", "g.wl0=conv", "g.wl0=out"]
    assert names[3] == "g.wl1#0" and names[-1] == f"g.wl2#{BUCKETS - 1}"
    # the two conv nodes have the same subtree at every iteration
    assert _nonzero(values, names) == {
        "g.wl0=in": 1,
        "g.wl0=conv": 2,
        "g.wl0=out": 1,
        "g.wl1#13": 1,
        "g.wl1#18": 1,
        "g.wl1#35": 2,
        "g.wl2#14": 1,
        "g.wl2#15": 2,
        "g.wl2#51": 1,
    }
    assert len(wl_features(B, ["in", "conv", "out"], 0, "g")[0]) == 3


def test_exact_counts_and_an_unknown_label() -> None:
    values, names = exact_counts(["a", "c", "a", "a"], ["a", "b", "c"], "ops")
    assert values.tolist() == [3, 0, 1]
    assert names == ["ops=a", "ops=b", "ops=c"]
    message = "ops: label 'relu' is not in the family (['a', 'b'])"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        exact_counts(["a", "relu"], ["a", "b"], "ops")
