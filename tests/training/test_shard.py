"""Each rank's share of an epoch (training.data._sampling, the one rule of the trainer and own loops) and the agreement table's reasons
(training.session._agreement): pure functions, no MPI."""

from __future__ import annotations

import numpy as np
import pytest

from training.data._sampling import GlobalBatchSlices
from training.session._agreement import FINISH, REPORT, SAVE, describe

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


@pytest.mark.parametrize("n", [8, 37, 100, 101])
@pytest.mark.parametrize("size", [1, 2, 3, 4])
@pytest.mark.parametrize("batch", [4, 9, 64])
def test_every_sample_once_per_epoch_and_the_same_steps_on_every_rank(
    n: int, size: int, batch: int
) -> None:
    shards = [GlobalBatchSlices(n, batch_size=batch, rank=r, size=size, seed=3) for r in range(size)]
    for _epoch in (1, 2):
        batches = [list(s) for s in shards]
        flat = [i for rank in batches for b in rank for i in b]
        assert sorted(flat) == list(range(n))  # every sample exactly once
        assert len({len(b) for b in batches}) == 1  # every rank takes the same number of steps
        assert all(b for rank in batches for b in rank)  # no rank gets an empty batch
        assert len(shards[0]) == len(batches[0])


def test_epochs_advance_by_themselves_and_set_epoch_replays_one() -> None:
    s = GlobalBatchSlices(50, batch_size=10, rank=0, size=2, seed=1)
    first, second = list(s), list(s)
    assert first != second
    s.set_epoch(1)
    assert list(s) == first


def test_rank_r_takes_every_size_th_row_of_each_global_batch_of_the_permutation() -> None:
    order = np.random.default_rng([0, 1]).permutation(20)
    s = GlobalBatchSlices(20, batch_size=8, rank=1, size=2, seed=0)
    assert list(s) == [order[0:8][1::2].tolist(), order[8:16][1::2].tolist(),
                       order[16:20][1::2].tolist()]
    assert [s.global_batch(i) for i in range(len(s))] == [8, 8, 4]


def test_a_last_batch_too_small_for_every_rank_joins_the_one_before() -> None:
    # 21 rows, batches of 8, 3 ranks: the last batch (5 rows) splits; 17 rows, the last has 1.
    three = [GlobalBatchSlices(21, batch_size=8, rank=r, size=3, shuffle=False) for r in range(3)]
    assert [t.global_batch(i) for t in three[:1] for i in range(len(t))] == [8, 8, 5]
    short = GlobalBatchSlices(17, batch_size=8, rank=1, size=2, shuffle=False)
    assert [short.global_batch(i) for i in range(len(short))] == [8, 9]
    assert list(short) == [[1, 3, 5, 7], [9, 11, 13, 15]]
    assert list(GlobalBatchSlices(17, batch_size=8, rank=0, size=2, shuffle=False))[-1] == [
        8, 10, 12, 14, 16]


def test_in_memory_sets_get_index_arrays() -> None:
    rows = next(iter(GlobalBatchSlices(10, batch_size=4, rank=0, size=2, arrays=True)))
    assert isinstance(rows, np.ndarray) and len(rows) == 2


def test_too_small_a_batch_or_dataset_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="batch_size 1 is smaller than the 2 ranks"):
        GlobalBatchSlices(10, batch_size=1, rank=0, size=2)
    with pytest.raises(ValueError, match="1 samples, fewer than the 2 ranks"):
        GlobalBatchSlices(1, batch_size=4, rank=0, size=2)


def test_disagreement_reasons_name_each_rank_and_what_it_did() -> None:
    same = np.array([[REPORT, 2, 2], [REPORT, 2, 2]])
    assert describe(same) is None
    early = describe(np.array([[REPORT, 2, 2], [FINISH, 1, 1], [REPORT, 2, 2]]))
    assert early is not None
    assert "ranks 0, 2 called report(epoch=2), its report #2" in early
    assert "rank 1 returned from train() after 1 report(s)" in early
    epochs = describe(np.array([[REPORT, 3, 3], [REPORT, 3, 4]]))
    assert epochs is not None and "report(epoch=3)" in epochs and "report(epoch=4)" in epochs
    save = describe(np.array([[SAVE, 2, 2], [REPORT, 3, 3]]))
    assert save is not None and "rank 0 called save_checkpoint after 2 report(s)" in save


def test_a_global_batch_smaller_than_the_ranks_is_refused_before_a_trial_starts() -> None:
    from training import TrainConfig

    with pytest.raises(ValueError, match="batch_size 2 is smaller than ranks = 4"):
        TrainConfig(batch_size=2, ranks=4)
    assert TrainConfig(batch_size=4, ranks=4).batch_size == 4
