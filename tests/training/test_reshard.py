"""training.state._reshard's rule on plain state dicts (no MPI): what each of Q ranks restores from a
checkpoint of P ranks, and which checkpoints may change width at all."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.contract import TrainConfig
from training.state._checkpoint import CheckpointMismatch, check_compatible
from training.state._reshard import reshard, sources

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def _state(rank: int) -> dict:
    return {
        "model": {"w": torch.full((3,), float(rank)), "n": torch.tensor(rank)},
        "optimizer": {"state": {0: {"momentum_buffer": torch.full((3,), 10.0 * rank)}},
                      "param_groups": [{"lr": 0.1 + rank}]},
        "algorithm": {"steps": 100 + rank, "rng": np.random.default_rng(rank).bit_generator.state},
        "torch_rng": torch.Generator().manual_seed(rank).get_state(),
        "steps": 100 + rank,
    }


def test_sources_merge_by_residue_when_shrinking_and_copy_when_growing() -> None:
    assert sources(5, 2) == [[0, 2, 4], [1, 3]]
    assert sources(3, 3) == [[0], [1], [2]]
    assert sources(2, 5) == [[0], [1], [0], [1], [0]]
    with pytest.raises(ValueError, match="rank counts"):
        sources(0, 2)


def test_shrinking_averages_float_tensors_and_keeps_the_lowest_ranks_counters() -> None:
    out = reshard([_state(r) for r in range(4)], 2, algorithm="localsgd", seed=0, epoch=3)
    assert len(out) == 2
    assert torch.equal(out[0]["model"]["w"], torch.full((3,), 1.0))  # mean of ranks 0 and 2
    assert torch.equal(out[1]["model"]["w"], torch.full((3,), 2.0))  # mean of ranks 1 and 3
    assert torch.equal(out[1]["optimizer"]["state"][0]["momentum_buffer"], torch.full((3,), 20.0))
    assert int(out[1]["model"]["n"]) == 1 and out[1]["steps"] == 101  # rank 1's own
    assert out[1]["optimizer"]["param_groups"][0]["lr"] == 1.1
    assert torch.equal(out[1]["torch_rng"], _state(1)["torch_rng"])  # its own stream


def test_growing_copies_and_gives_new_ranks_fresh_streams() -> None:
    old = [_state(r) for r in range(2)]
    out = reshard(old, 3, algorithm="asgd", seed=7, epoch=2)
    assert torch.equal(out[2]["model"]["w"], old[0]["model"]["w"])  # rank 2 = rank 2 % 2
    assert out[2]["steps"] == 100
    assert not torch.equal(out[2]["torch_rng"], old[0]["torch_rng"])  # no repeated dropout
    assert out[2]["algorithm"]["rng"] != old[0]["algorithm"]["rng"]  # nor peer choices
    assert torch.equal(out[1]["torch_rng"], old[1]["torch_rng"])
    again = reshard(old, 3, algorithm="asgd", seed=7, epoch=2)  # seeded: the same every time
    assert torch.equal(again[2]["torch_rng"], out[2]["torch_rng"])


def test_sync_takes_rank_0s_one_state_on_every_rank_without_averaging() -> None:
    old = [_state(0), _state(0), _state(0)]
    old[1]["torch_rng"] = _state(1)["torch_rng"]
    third = torch.full((3,), 1 / 3)
    for i, s in enumerate(old):  # rank 0's is the state; any other rank's drift is not
        s["model"]["w"] = third + 1e-3 * i
    out = reshard(old, 2, algorithm="sync", seed=0, epoch=1)
    assert all(torch.equal(s["model"]["w"], third) for s in out)
    assert torch.equal(out[1]["torch_rng"], old[1]["torch_rng"])


def test_the_same_width_restores_every_rank_its_own_state() -> None:
    old = [_state(r) for r in range(3)]
    assert reshard(old, 3, algorithm="asgd", seed=0, epoch=1) == old


def test_only_the_trainers_checkpoints_change_width() -> None:
    config = TrainConfig(dataset="digits", ranks=2).model_dump()
    trainer = {"format": 1, "ranks": 2, "config": config, "reshard": True}
    check_compatible(trainer, {**config, "ranks": 3}, 3)
    own_loop = {"format": 1, "ranks": 2, "config": config}  # a user's states: no rule applies
    with pytest.raises(CheckpointMismatch, match="written by 2 ranks; this job has 3"):
        check_compatible(own_loop, config, 3)
