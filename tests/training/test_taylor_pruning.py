"""The taylor criterion and the cubic schedule, in one process: taylor sums Torch-Pruning's
per-batch score of each unit, it picks the units the loss does not use (where l1 would not), ranks
holding different weights agree on its summed importances, and its sums survive a checkpoint."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from torch import nn

from spaces import genome_from_dict
from training.models._genome import build_genome_model
from training.pruning._config import PruneConfig
from training.pruning._units import UnitPruning, choose

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

STACK = {"family": "stack", "layers": [
    {"kind": "conv", "width": 8, "activation": "relu", "dropout": 0.0, "kernel": 3, "pool": True},
    {"kind": "dense", "width": 12, "activation": "tanh", "dropout": 0.0},  # no dead units
]}
TAYLOR = PruneConfig(criterion="taylor", target=0.5, start_epoch=2, end_epoch=2, steps=1)
X = torch.randn(2, 64)  # example inputs: what the graph is traced on


class _Self:  # the communicator of one rank, as the pruner sees it
    size, rank = 1, 0


class _Threads:
    """``size`` ranks as threads of one process: allgather waits for every rank (a barrier)."""

    def __init__(self, size: int) -> None:
        self.size, self.slots = size, [None] * size
        self.barrier = threading.Barrier(size, timeout=60)

    def rank_view(self, rank: int) -> _Rank:
        return _Rank(self, rank)


class _Rank:
    def __init__(self, shared: _Threads, rank: int) -> None:
        self.shared, self.rank, self.size = shared, rank, shared.size

    def allgather(self, value: Any) -> list[Any]:
        self.shared.slots[self.rank] = value
        self.shared.barrier.wait()  # every rank has put its value
        out = list(self.shared.slots)
        self.shared.barrier.wait()  # every rank has read before the next round
        return out


def _stack(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return build_genome_model(genome_from_dict(STACK), (1, 8, 8), 10)


def _batches(model: nn.Module, pruning: UnitPruning, n: int, seed: int) -> None:
    """``n`` backward passes, each followed by the trainer's after-gradient call (no step)."""
    g = torch.Generator().manual_seed(seed)
    pruning.start_epoch(1)
    for _ in range(n):
        x, y = torch.randn(16, 64, generator=g), torch.randint(0, 10, (16,), generator=g)
        model.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        pruning.after_backward(model)


def test_taylor_sums_the_librarys_score_of_each_batch_per_unit() -> None:
    model = _stack()
    one = UnitPruning(TAYLOR, model, _Self(), X)
    _batches(model, one, 1, seed=3)
    first = [t.clone() for t in one.taylor]
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(16, 64, generator=g), torch.randint(0, 10, (16,), generator=g)
    model.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    assert one.graph is not None
    batch = [one._score(grp) for grp in one.graph.groups]
    one.after_backward(model)
    for total, before, b in zip(one.taylor, first, batch, strict=True):
        assert b is not None and b.max() > 1e-6  # not a sum of zeros
        assert torch.allclose(total, before + b)


def test_taylor_removes_the_units_the_loss_does_not_use_where_l1_keeps_them() -> None:
    model = _stack()
    l1 = UnitPruning(TAYLOR.model_copy(update={"criterion": "l1"}), model, _Self(), X)
    assert l1.graph is not None
    dense = l1.graph.groups[1]
    producer = l1.graph.root(dense)
    consumer = model.body[-1]  # the classifier reads the 12 neurons
    unused = [1, 4, 7, 10, 11, 0]  # half of the 12 neurons: large weights, read by nobody
    with torch.no_grad():
        producer.weight[unused] *= 50.0
        consumer.weight[:, unused] = 0.0
    assert choose(l1._score(dense).numpy(), 6).tolist() == sorted(unused)  # l1's pick
    taylor = UnitPruning(TAYLOR, model, _Self(), X)
    _batches(model, taylor, 4, seed=1)
    assert taylor.prune(model, None, 2)
    assert taylor.kept[0][1] == sorted(set(range(12)) - set(unused))


def test_ranks_with_different_weights_remove_the_same_units() -> None:
    comm = _Threads(2)
    models = [_stack(seed=r) for r in range(2)]  # asgd-like: each rank its own weights
    prunings = [UnitPruning(TAYLOR, m, comm.rank_view(r), X) for r, m in enumerate(models)]
    for r in range(2):
        _batches(models[r], prunings[r], 3, seed=10 + r)
    sums = [[t.clone() for t in p.taylor] for p in prunings]
    mean = [((a + b) / 2).numpy() for a, b in zip(*sums, strict=True)]
    local = [[choose(t.numpy(), len(t) // 2).tolist() for t in s] for s in sums]
    assert local[0] != local[1]  # the ranks' own sums would choose differently

    threads = [threading.Thread(target=prunings[r].prune, args=(models[r], None, 2))
               for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert prunings[0].kept == prunings[1].kept == [
        [choose(m, len(m) // 2).tolist() for m in mean]]
    assert prunings[0].widths() == prunings[1].widths() == [4, 6]


def test_taylor_sums_survive_a_checkpoint_and_restart_after_a_step() -> None:
    model, again = _stack(), _stack()
    straight = UnitPruning(TAYLOR, model, _Self(), X)
    _batches(model, straight, 3, seed=2)
    resumed = UnitPruning(TAYLOR, again, _Self(), X)
    resumed.load_state_dict(straight.state_dict())  # as a checkpoint restores it
    straight.prune(model, None, 2)
    resumed.prune(again, None, 2)
    assert resumed.kept == straight.kept
    assert [t.tolist() for t in straight.taylor] == [[0.0] * 4, [0.0] * 6]  # next step afresh
    straight.start_epoch(2)  # the last step is done: nothing more to collect
    assert not straight.collecting


def test_the_cubic_schedule_removes_most_early() -> None:
    cubic = PruneConfig(target=0.8, start_epoch=2, end_epoch=5, steps=4, schedule="cubic")
    assert cubic.events() == {2: pytest.approx(0.8 * (1 - 0.75 ** 3)),
                              3: pytest.approx(0.7), 4: pytest.approx(0.8 * (1 - 0.25 ** 3)),
                              5: pytest.approx(0.8)}
    linear = PruneConfig(target=0.8, start_epoch=2, end_epoch=5, steps=4)
    assert linear.events()[2] == pytest.approx(0.2)
    assert linear.events()[2] < cubic.events()[2]
