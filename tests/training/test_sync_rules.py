"""Sync SGD's bucketed, overlapped allreduce (training/algorithms/_sync.py), in one process: a
fake communicator of two ranks whose allreduce adds the peer's gradient (``peer`` times this
rank's, as if the other rank's batch gave that), so what a bucket holds after ``synchronize`` is
the sum over ranks, and the order in which buckets start is recorded. The real collectives run
in tests/training/test_sync_equivalence.py (mpiexec, 1 and 2 ranks)."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import training.algorithms._sync as sync
from training.algorithms._base import Algorithm
from training.algorithms._sync import GradientAllreduce, SyncSGD

pytestmark = pytest.mark.unit


class _Request:
    def __init__(self, comm: _Comm, buf: np.ndarray) -> None:
        self.comm, self.buf = comm, buf
        self.done = False
        self.freed = False

    def Start(self) -> None:  # noqa: N802 - mpi4py's names
        self.comm.started.append(self.comm.index_of(self.buf))
        self.buf += self.comm.peer * self.buf.copy()  # the sum over both ranks, in place
        self.done = False

    def Test(self) -> bool:  # noqa: N802
        self.comm.tests += 1
        return self.done

    def Wait(self) -> None:  # noqa: N802
        if self.done:
            raise RuntimeError("waited on a completed request")  # MPICH refuses this too
        self.done = True

    def Free(self) -> None:  # noqa: N802
        self.freed = True


class _Comm:
    """Rank 0 of 2; ``persistent``: whether MPI-4's Allreduce_init exists."""

    def __init__(self, *, size: int = 2, peer: float = 1.0, persistent: bool = True) -> None:
        self.size, self.rank, self.peer = size, 0, peer
        self.persistent = persistent
        self.started: list[int] = []
        self.requests: list[_Request] = []
        self.buffers: list[np.ndarray] = []
        self.tests = 0
        self.inits = 0

    def index_of(self, buf: np.ndarray) -> int:
        return next(i for i, b in enumerate(self.buffers) if np.shares_memory(b, buf))

    def Allreduce_init(self, inplace: Any, buf: np.ndarray, op: Any) -> _Request:  # noqa: N802
        if not self.persistent:
            raise NotImplementedError
        assert inplace is _MPI.IN_PLACE and op is _MPI.SUM
        self.inits += 1
        self.buffers.append(buf)
        request = _Request(self, buf)
        self.requests.append(request)
        return request

    def Iallreduce(self, inplace: Any, buf: np.ndarray, op: Any) -> _Request:  # noqa: N802
        assert inplace is _MPI.IN_PLACE and op is _MPI.SUM
        if not any(np.shares_memory(b, buf) for b in self.buffers):
            self.buffers.append(buf)
        request = _Request(self, buf)
        request.Start()
        self.requests.append(request)
        return request

    def Bcast(self, buf: np.ndarray, root: int = 0) -> None:  # noqa: N802
        pass


def _waitall(requests: list[_Request]) -> None:
    for r in requests:
        r.Wait()


_MPI = types.SimpleNamespace(IN_PLACE=object(), SUM=object(),
                             Request=types.SimpleNamespace(Waitall=_waitall))


@pytest.fixture(autouse=True)
def _fake_mpi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sync, "MPI", _MPI)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))


def _local_grads(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    twin = _model()
    twin.load_state_dict(model.state_dict())
    twin(x).square().sum().backward()
    return [p.grad.clone() for p in twin.parameters()]  # type: ignore[union-attr]


def _backward(model: nn.Module, x: torch.Tensor) -> None:
    model(x).square().sum().backward()


def test_buckets_fill_in_reverse_parameter_order_up_to_the_byte_limit() -> None:
    model = _model()
    sizes = [p.numel() for p in model.parameters()]  # 30, 5, 20, 4, 12, 3
    one = GradientAllreduce(list(model.parameters()), _Comm(), bucket_bytes=1 << 20)
    assert one.bucket_sizes == [sum(sizes)]
    # 4 bytes a float: a bucket closes once it holds >= 64 bytes (16 floats), newest first.
    limited = GradientAllreduce(list(_model().parameters()), _Comm(), bucket_bytes=64)
    assert limited.bucket_sizes == [3 + 12 + 4, 20, 5 + 30]
    each = GradientAllreduce(list(_model().parameters()), _Comm(), bucket_bytes=4)
    assert each.bucket_sizes == sizes[::-1]


def test_gradients_are_views_of_one_flat_buffer_in_bucket_order() -> None:
    model = _model()
    ar = GradientAllreduce(list(model.parameters()), _Comm(), bucket_bytes=64)
    params = list(model.parameters())
    offset = 0
    for p in reversed(params):
        assert p.grad is not None and np.shares_memory(p.grad.numpy(), ar._flat)  # noqa: SLF001
        assert p.grad.data_ptr() == ar._flat[offset:].ctypes.data  # noqa: SLF001
        offset += p.numel()
    assert offset == ar._flat.size  # noqa: SLF001


def test_synchronize_leaves_the_sum_over_ranks_in_every_gradient() -> None:
    model = _model()
    x = torch.randn(7, 6)
    local = _local_grads(model, x)
    comm = _Comm(peer=2.0)  # the other rank's gradient is twice this one's
    ar = GradientAllreduce(list(model.parameters()), comm, bucket_bytes=64)
    ar.zero_grad()
    _backward(model, x)
    ar.synchronize()
    for p, g in zip(model.parameters(), local, strict=True):
        torch.testing.assert_close(p.grad, 3.0 * g)


def test_buckets_start_during_backward_in_index_order_each_once() -> None:
    model = _model()
    comm = _Comm()
    ar = GradientAllreduce(list(model.parameters()), comm, bucket_bytes=64)
    ar.zero_grad()
    _backward(model, torch.randn(4, 6))
    assert comm.started == [0, 1, 2]  # all three before synchronize: overlapped with backward
    assert ar.overlapped == 3
    ar.synchronize()
    assert comm.started == [0, 1, 2] and all(r.done for r in comm.requests)
    assert comm.inits == 3  # one persistent collective per bucket, made once


def test_a_bucket_whose_parameter_got_no_gradient_starts_in_synchronize() -> None:
    model = _model()
    comm = _Comm()
    ar = GradientAllreduce(list(model.parameters()), comm, bucket_bytes=4)
    ar.zero_grad()
    model[4].weight.requires_grad_(False)  # last layer's weight: the first bucket never fills
    _backward(model, torch.randn(4, 6))
    # Bucket 0 (that layer's bias) starts; bucket 1 (its weight) never fills, and every later
    # bucket waits behind it: buckets start in index order on every rank.
    assert comm.started == [0] and ar.overlapped == 1
    ar.synchronize()
    assert comm.started == list(range(6)) and ar.overlapped == 1


def test_each_step_starts_every_bucket_again() -> None:
    model = _model()
    comm = _Comm()
    ar = GradientAllreduce(list(model.parameters()), comm, bucket_bytes=64)
    for _ in range(3):
        ar.zero_grad()
        _backward(model, torch.randn(4, 6))
        ar.synchronize()
    assert comm.started == [0, 1, 2] * 3 and ar.overlapped == 9


def test_zero_grad_zeroes_and_gives_back_views_an_optimizer_set_to_none() -> None:
    model = _model()
    ar = GradientAllreduce(list(model.parameters()), _Comm(), bucket_bytes=64)
    _backward(model, torch.randn(4, 6))
    ar.synchronize()
    torch.optim.SGD(model.parameters(), lr=0.1).zero_grad()  # set_to_none, torch's default
    ar.zero_grad()
    for p in model.parameters():
        assert p.grad is not None and float(p.grad.abs().sum()) == 0.0
        assert np.shares_memory(p.grad.numpy(), ar._flat)  # noqa: SLF001


def test_a_replaced_gradient_keeps_its_value_when_backward_accumulates() -> None:
    model = _model()
    comm = _Comm(peer=0.0)  # the sum is this rank's gradient alone
    ar = GradientAllreduce(list(model.parameters()), comm, bucket_bytes=1 << 20)
    ar.zero_grad()
    last = list(model.parameters())[-1]
    x = torch.randn(4, 6)
    local = _local_grads(model, x)
    last.grad = torch.ones_like(last)  # replaced before backward: backward adds to it
    _backward(model, x)
    ar.synchronize()
    torch.testing.assert_close(last.grad, local[-1] + 1.0)
    assert np.shares_memory(last.grad.numpy(), ar._flat)  # noqa: SLF001


def test_without_mpi4_persistent_requests_iallreduce_is_used() -> None:
    model = _model()
    x = torch.randn(5, 6)
    local = _local_grads(model, x)
    comm = _Comm(persistent=False)
    ar = GradientAllreduce(list(model.parameters()), comm, bucket_bytes=64)
    ar.zero_grad()
    _backward(model, x)
    ar.synchronize()
    assert comm.inits == 0 and len(comm.requests) == 3
    for p, g in zip(model.parameters(), local, strict=True):
        torch.testing.assert_close(p.grad, 2.0 * g)


def test_one_rank_starts_no_collective_and_keeps_its_own_gradient() -> None:
    model = _model()
    x = torch.randn(5, 6)
    local = _local_grads(model, x)
    comm = _Comm(size=1)
    ar = GradientAllreduce(list(model.parameters()), comm, bucket_bytes=64)
    ar.zero_grad()
    _backward(model, x)
    ar.synchronize()
    assert comm.requests == [] and comm.inits == 0
    for p, g in zip(model.parameters(), local, strict=True):
        torch.testing.assert_close(p.grad, g)


def test_a_started_request_is_tested_while_backward_goes_on() -> None:
    model = _model()
    comm = _Comm()
    ar = GradientAllreduce(list(model.parameters()), comm, bucket_bytes=64)
    ar.zero_grad()
    _backward(model, torch.randn(4, 6))
    assert comm.tests > 0  # MPI progresses the started buckets between the later gradients


def test_close_frees_the_persistent_requests_once() -> None:
    comm = _Comm()
    ar = GradientAllreduce(list(_model().parameters()), comm, bucket_bytes=64)
    ar.close()
    assert all(r.freed for r in comm.requests) and len(comm.requests) == 3
    for r in comm.requests:
        r.freed = False
    ar.close()
    assert not any(r.freed for r in comm.requests)


def test_sync_sgd_divides_by_the_global_batch_and_steps_every_batch() -> None:
    model = _model()
    comm = _Comm()
    algo = SyncSGD(model, comm, bucket_bytes=64)
    assert algo.loss_divisor(local_batch=3, global_batch=8, epoch_size=100) == 8
    assert algo.sync_period() == 1
    algo.zero_grad()
    _backward(model, torch.randn(4, 6))
    assert algo.before_step(last_in_epoch=False) is True
    assert all(r.done for r in comm.requests)
    assert algo.counters() == {"buckets": 3, "overlapped_buckets": 3}
    with algo.consensus():
        pass
    algo.finish()
    assert all(r.freed for r in comm.requests)


def test_bucket_boundaries_are_counted_in_bytes_from_zero_in_every_bucket() -> None:
    # Parameters of 1, 2 floats (4, 8 bytes), in the reverse order backward produces them:
    # with a 13-byte limit a bucket closes at its 16th byte, so [2, 1, 1] then [1, 2, 1].
    params = [nn.Parameter(torch.zeros(n)) for n in [1, 2, 1, 1, 1, 2]]
    ar = GradientAllreduce(params, _Comm(), bucket_bytes=13)
    assert ar.bucket_sizes == [4, 4]
    # Exactly at the limit closes the bucket: 60 bytes = the last layer's bias and weight.
    assert GradientAllreduce(list(_model().parameters()), _Comm(), bucket_bytes=60
                             ).bucket_sizes == [3 + 12, 4 + 20, 5 + 30]


def test_a_model_of_one_parameter_or_none() -> None:
    layer = nn.Linear(3, 2, bias=False)
    comm = _Comm()
    ar = GradientAllreduce(list(layer.parameters()), comm)
    ar.zero_grad()
    layer(torch.randn(4, 3)).sum().backward()
    ar.synchronize()
    assert ar.bucket_sizes == [6] and comm.started == [0]
    empty = GradientAllreduce([], _Comm())
    assert empty.bucket_sizes == []
    empty.synchronize()  # nothing to reduce, nothing to wait for


def test_the_first_step_needs_no_zero_grad_and_a_step_without_it_starts_every_bucket() -> None:
    model = _model()
    comm = _Comm()
    ar = GradientAllreduce(list(model.parameters()), comm, bucket_bytes=64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    for _ in range(2):
        _backward(model, torch.randn(4, 6))
        assert comm.started[-3:] == [0, 1, 2]  # all started during backward, in order
        ar.synchronize()
        optimizer.zero_grad()  # gradients zeroed some other way (torch sets them to None)
    assert comm.started == [0, 1, 2, 0, 1, 2] and ar.overlapped == 6


def test_broadcast_sends_every_parameter_from_the_root() -> None:
    class _Recording(_Comm):
        def __init__(self) -> None:
            super().__init__()
            self.bcasts: list[tuple[int, int]] = []

        def Bcast(self, buf: np.ndarray, root: int = 0) -> None:  # noqa: N802
            self.bcasts.append((buf.size, root))

    model = _model()
    comm = _Recording()
    ar = GradientAllreduce(list(model.parameters()), comm)
    ar.broadcast_parameters(root=1)
    assert sorted(n for n, _ in comm.bcasts) == sorted(p.numel() for p in model.parameters())
    assert {root for _, root in comm.bcasts} == {1}
    comm.bcasts.clear()
    ar.broadcast_parameters()
    assert {root for _, root in comm.bcasts} == {0}
    algo_comm = _Recording()
    SyncSGD(model, algo_comm).broadcast_parameters()
    assert len(algo_comm.bcasts) == len(list(model.parameters()))


def test_a_bucket_on_a_device_other_than_the_cpu_is_staged_through_host_memory() -> None:
    params = [nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(2))]
    host = np.zeros(5, np.float32)
    bucket = sync._Bucket(params, torch.device("meta"), host)  # noqa: SLF001
    assert bucket.buffer is not bucket.host and bucket.buffer.device.type == "meta"
    assert bucket.buffer.shape == (5,) and np.shares_memory(bucket.host.numpy(), host)
    assert [v.shape for v in bucket.views] == [(3,), (2,)] and bucket.pending == 2
    on_cpu = sync._Bucket(params, torch.device("cpu"), host)  # noqa: SLF001
    assert on_cpu.buffer is on_cpu.host and on_cpu.persistent is None


def test_sync_made_again_after_a_prune_keeps_its_overlap_count_and_frees_the_old() -> None:
    model = _model()
    comm = _Comm()
    old = SyncSGD(model, comm, bucket_bytes=64)
    old.zero_grad()
    _backward(model, torch.randn(4, 6))
    old.before_step(last_in_epoch=False)
    old.release()
    assert all(r.freed for r in comm.requests)
    new = SyncSGD(model, _Comm(), bucket_bytes=64)
    new.continue_from(old)
    assert new.counters()["overlapped_buckets"] == 3
    other = SyncSGD(model, _Comm(), bucket_bytes=64)
    other.continue_from(Algorithm(model, comm))  # from another algorithm: nothing to carry
    assert other.counters()["overlapped_buckets"] == 0
