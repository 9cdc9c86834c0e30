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


def test_a_group_of_mixed_precision_tensors_averages_in_the_first_members_dtype() -> None:
    group = [{"model": {"w": torch.ones(2, dtype=torch.float16)}},
             {"model": {"w": torch.full((2,), 3.0, dtype=torch.float64)}}]
    (out,) = reshard(group, 1, algorithm="asgd", seed=0, epoch=1)
    assert out["model"]["w"].dtype == torch.float16
    assert torch.equal(out["model"]["w"], torch.full((2,), 2.0, dtype=torch.float16))


def test_copies_are_deep_through_lists_and_tuples() -> None:
    state = {"model": {"w": torch.zeros(2)},
             "extra": [torch.zeros(1), (torch.zeros(1), "tag")]}
    out = reshard([state], 2, algorithm="asgd", seed=0, epoch=1)
    for copy in out:
        assert copy["extra"][1][1] == "tag" and isinstance(copy["extra"][1], tuple)
        copy["extra"][0].add_(1)
        copy["extra"][1][0].add_(1)
    assert float(state["extra"][0]) == 0.0 and float(state["extra"][1][0]) == 0.0
    assert float(out[1]["extra"][1][0]) == 1.0  # each copy its own tensors


def test_a_one_state_algorithm_keeps_each_old_ranks_own_algorithm_stream() -> None:
    old = [_state(0), _state(1), _state(2)]
    out = reshard(old, 2, algorithm="sync", seed=0, epoch=4)
    assert out[1]["algorithm"]["rng"] == old[1]["algorithm"]["rng"]  # its own, not rank 0's
    assert out[1]["algorithm"]["steps"] == old[0]["algorithm"]["steps"]  # rank 0's one state
    bare = [{**_state(r), "algorithm": {"steps": 1}} for r in range(3)]  # no stream to keep
    assert reshard(bare, 2, algorithm="sync", seed=0, epoch=4)[1]["algorithm"] == {"steps": 1}


def test_a_new_rank_gets_its_streams_from_the_seed_its_rank_and_the_epoch() -> None:
    old = [{**_state(0), "cuda_rng": torch.zeros(4, dtype=torch.uint8)}]
    out = reshard(old, 3, algorithm="asgd", seed=3, epoch=5)
    for rank in (1, 2):
        assert out[rank]["algorithm"]["rng"] == np.random.default_rng(
            [3, rank, 5, 7]).bit_generator.state
        assert out[rank]["cuda_rng"] is None  # seeded by the trainer on its own GPU
    assert torch.equal(out[0]["cuda_rng"], old[0]["cuda_rng"])
    no_cuda = reshard([_state(0)], 2, algorithm="asgd", seed=3, epoch=5)
    assert "cuda_rng" not in no_cuda[1]  # a CPU checkpoint stays one
    no_rng = reshard([{**_state(0), "algorithm": {"steps": 1}}], 2, algorithm="asgd", seed=3,
                     epoch=5)
    assert no_rng[1]["algorithm"] == {"steps": 1}
