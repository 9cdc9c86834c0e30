"""Feature maps of labelled DAGs: one-hot op per slot, BANANAS path encoding, Weisfeiler-Lehman
subtree counts. Pure numpy; each map returns ``(values, names)`` of a length fixed by the family.

A DAG here is a list of node labels and, per node, the indices of its inputs (earlier nodes);
node 0 is the network's input, the last node its output. Labels that cannot be listed in advance
(WL subtrees after the first iteration, macro paths) go into a fixed number of hashed buckets.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

Dag = tuple[list[str], list[tuple[int, ...]]]  # labels, inputs per node
Features = tuple[np.ndarray, list[str]]
BUCKETS = 64  # hashed buckets per WL iteration (and for macro paths)


def bucket(text: str, buckets: int = BUCKETS) -> int:
    """A stable bucket for ``text`` (Python's ``hash`` changes between processes)."""
    return int.from_bytes(hashlib.sha1(text.encode()).digest()[:8], "big") % buckets


def exact_counts(labels: Sequence[str], vocabulary: Sequence[str], what: str) -> Features:
    """How often each label of ``vocabulary`` occurs; a label outside it is an error."""
    index = {label: i for i, label in enumerate(vocabulary)}
    out = np.zeros(len(vocabulary))
    for label in labels:
        if label not in index:
            raise ValueError(f"{what}: label {label!r} is not in the family ({list(vocabulary)})")
        out[index[label]] += 1
    return out, [f"{what}={v}" for v in vocabulary]


def wl_features(dag: Dag, vocabulary: Sequence[str], iterations: int, what: str) -> Features:
    """Weisfeiler-Lehman subtree counts: iteration 0 counts the node labels (exactly, over
    ``vocabulary``), iteration ``t`` the labels ``(own label, sorted input labels)`` of the
    previous iteration, hashed into :data:`BUCKETS`. Renumbering nodes cannot change them."""
    labels, inputs = dag
    values, names = exact_counts(labels, vocabulary, f"{what}.wl0")
    parts, all_names = [values], names
    current = list(labels)
    for t in range(1, iterations + 1):
        current = [
            short(current[k], sorted(current[i] for i in inputs[k])) for k in range(len(labels))
        ]
        counts = np.zeros(BUCKETS)
        for label in current:
            counts[bucket(label)] += 1
        parts.append(counts)
        all_names += [f"{what}.wl{t}#{b}" for b in range(BUCKETS)]
    return np.concatenate(parts), all_names


def short(label: str, inputs: list[str]) -> str:
    return hashlib.sha1(repr((label, inputs)).encode()).hexdigest()[:16]


def paths(dag: Dag) -> list[tuple[str, ...]]:
    """Every input -> output path as the labels of its inner nodes (input and output left out)."""
    labels, inputs = dag
    last = len(labels) - 1
    found: list[list[tuple[str, ...]]] = [[] for _ in labels]  # paths from the input to node k
    found[0] = [()]
    for k in range(1, len(labels)):
        here = () if k == last else (labels[k],)
        found[k] = [p + here for i in inputs[k] for p in found[i]]
    return found[last]


def path_index(path: Sequence[str], alphabet: Sequence[str]) -> int:
    """Position of ``path`` among all label sequences, shorter ones first (mixed radix)."""
    k = len(alphabet)
    offset = sum(k**m for m in range(1, len(path)))
    position = 0
    for label in path:
        position = position * k + alphabet.index(label)
    return offset + position


def path_features(
    dag: Dag, alphabet: Sequence[str], max_length: int, longest: int, what: str
) -> Features:
    """BANANAS path encoding, as counts: one feature per label sequence of length 1..
    ``max_length`` over ``alphabet``; paths longer than that are counted by their length
    (``max_length + 1 .. longest``)."""
    k = len(alphabet)
    exact = sum(k**m for m in range(1, max_length + 1))
    values = np.zeros(exact + max(0, longest - max_length))
    for path in paths(dag):
        if 1 <= len(path) <= max_length:
            values[path_index(path, alphabet)] += 1
        elif len(path) > max_length:
            values[exact + len(path) - max_length - 1] += 1
    names = [
        f"{what}.path=" + ">".join(seq)
        for m in range(1, max_length + 1)
        for seq in _sequences(alphabet, m)
    ] + [f"{what}.paths_of_length{m}" for m in range(max_length + 1, longest + 1)]
    return values, names


def _sequences(alphabet: Sequence[str], m: int) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = [()]
    for _ in range(m):
        out = [s + (a,) for s in out for a in alphabet]
    return out


def hashed_path_features(dag: Dag, longest: int, what: str) -> Features:
    """Path encoding for label sets too large to list: paths hashed into :data:`BUCKETS`, plus
    the number of paths of each length ``0..longest``."""
    values = np.zeros(BUCKETS + longest + 1)
    for path in paths(dag):
        values[bucket(">".join(path))] += 1
        values[BUCKETS + min(len(path), longest)] += 1
    names = [f"{what}.path#{b}" for b in range(BUCKETS)] + [
        f"{what}.paths_of_length{m}" for m in range(longest + 1)
    ]
    return values, names


def depths(dag: Dag) -> list[int]:
    """Longest distance from the input, per node."""
    _, inputs = dag
    out = [0] * len(inputs)
    for k in range(1, len(inputs)):
        out[k] = 1 + max(out[i] for i in inputs[k])
    return out
