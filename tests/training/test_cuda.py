"""The CUDA paths of the training core, on a machine with a GPU.

CI's machines have none, so these tests carry the ``cuda`` marker, which the default run
deselects; on a GPU machine: ``python -m pytest -m cuda tests/training/test_cuda.py``
(``benchmarks/gpu_check.sh`` runs them with the rest of the GPU check; the last run's output is
``benchmarks/results/gpu_check.json``). On a GPU the other training tests run on CUDA too:
``pick_device`` chooses it for every trial.

What only a GPU exercises: ASGD keeps its weights on the device and exchanges a host copy
(``_weights``/``_store``), the sync bucket is staged through host memory, and a trial reports
which device it trained on.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mpi4py import MPI

from training.algorithms._asgd import ASGD
from training.algorithms._sync import GradientAllreduce
from training.session._session import describe_device, pick_device

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _self_peered(device: str, lr: float = 0.2) -> ASGD:
    """ASGD on COMM_SELF whose only peer is itself: its puts land in its own window, so the
    whole exchange (send, read, gate, blend, write-back) runs in this process."""
    torch.manual_seed(0)
    model = torch.nn.Linear(7, 1).to(device)  # 8 parameters
    algo = ASGD(model, MPI.COMM_SELF, lr=lr, send_every=1, seed=5)
    algo.peers = [0]
    algo._received = {0: np.zeros(algo.n, np.float32)}  # noqa: SLF001
    return algo


def _trajectory(device: str) -> tuple[list[np.ndarray], dict[str, int], ASGD]:
    """Eight steps: before each, an external state is put into the slot (ahead of the local
    step on even steps, so the gate accepts it; behind on odd ones, so it rejects it); the local
    step moves every weight a tenth of the way to a target."""
    algo = _self_peered(device)
    target = torch.linspace(-1.0, 1.0, algo.n, device=device)
    seen: list[np.ndarray] = []
    try:
        algo.broadcast_parameters()  # COMM_SELF: the host copy goes round and back
        for step in range(8):
            w = algo.flat.detach().cpu().numpy()
            ahead = w + (1.5 if step % 2 == 0 else -1.5) * (target.cpu().numpy() - w) * 0.1
            algo._send_state(ahead.astype(np.float32))  # noqa: SLF001
            algo.win.Flush(0)
            algo.before_step(False)
            with torch.no_grad():
                algo.flat -= 0.1 * (algo.flat - target)  # the local step, on the device
            algo.after_step()  # gate, blend, write back, send our own state
            algo.win.Flush(0)
            seen.append(algo.flat.detach().cpu().numpy().copy())
        return seen, algo.counters(), algo
    finally:
        algo.win.Unlock_all()
        algo.win.Free()


def test_asgd_keeps_its_weights_on_the_gpu_and_steps_as_on_the_cpu() -> None:
    on_cpu, cpu_counts, cpu_algo = _trajectory("cpu")
    on_gpu, gpu_counts, gpu_algo = _trajectory("cuda")
    assert gpu_algo.flat.device.type == "cuda"
    assert gpu_algo._host is None and cpu_algo._host is not None  # noqa: SLF001
    # the parameters still live in the flat buffer on the device
    assert all(p.device.type == "cuda" for p in gpu_algo.model.parameters())
    assert gpu_counts == cpu_counts
    assert gpu_counts["accepted"] == 4 and gpu_counts["rejected"] == 4
    for step, (c, g) in enumerate(zip(on_cpu, on_gpu, strict=True)):
        np.testing.assert_allclose(g, c, rtol=1e-5, atol=1e-6, err_msg=f"step {step}")
    # the blend was written back to the device: the weights differ from local steps alone
    torch.manual_seed(0)
    plain = torch.nn.utils.parameters_to_vector(torch.nn.Linear(7, 1).parameters()).detach()
    target = torch.linspace(-1.0, 1.0, plain.numel())
    for _ in range(8):
        plain -= 0.1 * (plain - target)
    assert not np.allclose(on_gpu[-1], plain.numpy(), atol=1e-4)


def test_asgd_broadcast_writes_roots_weights_into_the_device_buffer() -> None:
    algo = _self_peered("cuda")
    try:
        before = algo.flat.detach().cpu().numpy().copy()
        host = algo._weights()  # noqa: SLF001  a host copy on a GPU, not the buffer itself
        assert isinstance(host, np.ndarray) and host.dtype == np.float32
        np.testing.assert_array_equal(host, before)
        host += 1.0  # changing the copy does not touch the device
        np.testing.assert_array_equal(algo.flat.detach().cpu().numpy(), before)
        algo._store(host)  # noqa: SLF001
        np.testing.assert_array_equal(algo.flat.detach().cpu().numpy(), before + 1.0)
        algo.broadcast_parameters()
        np.testing.assert_array_equal(algo.flat.detach().cpu().numpy(), before + 1.0)
    finally:
        algo.win.Unlock_all()
        algo.win.Free()


def test_every_rank_picks_a_cuda_device_and_names_it() -> None:
    device = pick_device(MPI.COMM_SELF)
    assert device.type == "cuda" and device.index == 0
    assert describe_device(device) == f"cuda:0 ({torch.cuda.get_device_name(0)})"
    assert describe_device(torch.device("cpu")) == "cpu"


def test_sync_on_one_gpu_rank_keeps_the_gradient_backward_made() -> None:
    """One rank stages nothing through the host: the buffer must keep backward's gradient
    (a copy back from the unused host buffer zeroed it, and a one-rank sync trial on a GPU
    stayed at chance)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    x, y = torch.randn(16, 6), torch.randint(0, 2, (16,))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    gpu = model.to("cuda")
    sync = GradientAllreduce(list(gpu.parameters()), MPI.COMM_SELF, bucket_bytes=64)
    try:
        sync.zero_grad()
        torch.nn.functional.cross_entropy(gpu(x.cuda()), y.cuda()).backward()
        sync.synchronize()
        for p, want in zip(gpu.parameters(), expected, strict=True):
            torch.testing.assert_close(p.grad.cpu(), want, rtol=1e-5, atol=1e-6)
        assert len(sync.bucket_sizes) > 1  # several buckets, each kept
    finally:
        sync.close()
