"""Resharding: the rank states of a checkpoint written by P ranks, made into Q ranks' states.

A trial may change width between two segments (a promotion that widens it, a re-run on a
smaller worker). What is restored where, by algorithm:

- **sync** (and **batch**): all ranks hold one state (the same weights, the same momentum or
  Adam moments, the same step count, because every step applies the same allreduced gradient).
  Every one of the Q ranks takes rank 0's model, optimizer and algorithm state: nothing is
  averaged, so a resized run stays exact (the global batch is fixed and split ``batch[q::Q]``,
  the epoch's order is ``(seed, epoch)``'s permutation whatever the width, so P ranks and Q
  ranks compute the same update up to the order of a float sum).
- **asgd, localsgd, simuparallel**: each rank holds its own state. The rule is
  *merge by residue, copy by residue*:

  - Q < P (shrink): rank q takes the **mean** of the ranks ``p`` with ``p % Q == q`` (weights,
    buffers, momentum and Adam moments: every floating-point tensor); step counters and the
    algorithm's other numbers are those of the lowest of them (rank q itself). Nothing one
    rank learnt is thrown away, and what is averaged is what these algorithms average anyway
    (localsgd every ``local_steps``, simuparallel and asgd at the end of training): a merge
    is one of their own averaging steps, on part of the ranks.
  - Q >= P (grow, or the same width): rank q takes rank ``q % P``'s state, unchanged. With Q =
    P every rank gets back its own state, as before resharding existed. A copy is a fresh
    replica of a trained one, as asgd's and localsgd's ranks are near-replicas after an
    average; it starts from a good point instead of a random one.

- **Random streams**: a rank that was there (q < P) keeps its own torch generator (dropout) and
  the algorithm's own generator (asgd's choice of peer). A rank that was not (q >= P) would
  otherwise repeat its source's draws, so it gets fresh streams seeded from ``(seed, q,
  epoch)``.
- **Claimed batches** (asgd, simuparallel, localsgd on several ranks: training.data._claims): a
  checkpoint is written at the end of an epoch, when every claim of the epoch is spent; the
  next epoch's counter starts at zero on any width, and a claimed batch is ``ceil(global
  batch / Q)`` rows, so the global batch stays what the study asked.

An own loop's rank states are the user's and mean nothing to us: such a checkpoint restores on
the width that wrote it only (its header says ``"reshard": False``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

# Algorithms whose ranks hold one state between steps: rank 0's is everyone's.
ONE_STATE = ("sync", "batch")
_TORCH_RNG = "torch_rng"  # the trainer's key for torch's generator state
_CUDA_RNG = "cuda_rng"  # ... for the GPU's generator (None on CPU)
_ALGORITHM = "algorithm"  # ... for the algorithm's own state, whose "rng" is a numpy generator's


def sources(p: int, q: int) -> list[list[int]]:
    """For each of ``q`` new ranks, the old ranks (of ``p``) its state comes from, lowest
    first: ``[[q % p]]`` each when growing, the residue class ``p % q == r`` when shrinking.

    >>> sources(4, 2), sources(2, 3)
    ([[0, 2], [1, 3]], [[0], [1], [0]])
    """
    if p < 1 or q < 1:
        raise ValueError(f"rank counts must be >= 1, got {p} -> {q}")
    if q >= p:
        return [[r % p] for r in range(q)]
    return [list(range(r, p, q)) for r in range(q)]


def reshard(
    states: list[dict[str, Any]], q: int, *, algorithm: str, seed: int, epoch: int
) -> list[dict[str, Any]]:
    """``q`` rank states from the ``len(states)`` of a checkpoint (the module's rule)."""
    p = len(states)
    if p == q:
        return list(states)
    if algorithm in ONE_STATE:
        out = [copy_state(states[0]) for _ in range(q)]
    else:
        out = [_merge([states[i] for i in group]) for group in sources(p, q)]
    for r, state in enumerate(out):
        if r < p:
            if algorithm in ONE_STATE:  # the one state, with this rank's own streams
                _keep_streams(state, states[r])
        else:
            _fresh_streams(state, seed=seed, rank=r, epoch=epoch)
    return out


def _merge(group: list[Any]) -> Any:
    """The group's mean for floating-point tensors; the first member's value for the rest."""
    first = group[0]
    if len(group) == 1:
        return copy_state(first)
    if isinstance(first, dict):
        return {k: _merge([g[k] for g in group]) for k in first}
    if isinstance(first, list | tuple):
        merged = [_merge([g[i] for g in group]) for i in range(len(first))]
        return type(first)(merged)
    if isinstance(first, torch.Tensor) and first.is_floating_point():
        return torch.stack([g.to(first.dtype) for g in group]).mean(dim=0)
    return copy_state(first)


def copy_state(value: Any) -> Any:
    """A deep copy of a rank state's tensors, dicts, lists and tuples (the rest is shared)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: copy_state(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(copy_state(v) for v in value)
    return value


def _keep_streams(state: dict[str, Any], own: dict[str, Any]) -> None:
    for key in (_TORCH_RNG, _CUDA_RNG):
        if key in own:
            state[key] = copy_state(own[key])
    theirs = own.get(_ALGORITHM)
    if isinstance(theirs, dict) and "rng" in theirs:
        state[_ALGORITHM]["rng"] = copy_state(theirs["rng"])


def _fresh_streams(state: dict[str, Any], *, seed: int, rank: int, epoch: int) -> None:
    if _TORCH_RNG in state:
        generator = torch.Generator().manual_seed(
            int(np.random.SeedSequence([seed, rank, epoch]).generate_state(1)[0]))
        state[_TORCH_RNG] = generator.get_state()
    if state.get(_CUDA_RNG) is not None:  # a new rank: its GPU generator as the trainer seeds it
        state[_CUDA_RNG] = None
    algorithm = state.get(_ALGORITHM)
    if isinstance(algorithm, dict) and isinstance(algorithm.get("rng"), dict):
        algorithm["rng"] = np.random.default_rng([seed, rank, epoch, 7]).bit_generator.state
