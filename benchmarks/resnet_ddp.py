"""Benchmark a real model: ResNet-18 with our sync core vs PyTorch DDP (gloo), 2 MPI ranks.

Model: examples/fashion_png/resnet.py's ``build`` (torchvision's ``resnet18(weights=None)``
with a 1-channel 3x3 stem at stride 1 and no max-pool; 11.17M parameters, 44.7 MB of float32
gradients per step), on Fashion-MNIST images from Debian's IDX files (in memory: this measures
training and gradient exchange, not reading), global batch ``--batch`` (default 32), each rank
taking its ``rank::size`` slice as the trainer does. SGD lr 0.01, momentum 0.9.

Subject ("ours"): ``training.algorithms._registry.make_algorithm("sync", model, comm,
bucket_bytes=...)``
wrapped as ``training.jobs._trainer.Trainer._step`` does: ``algo.zero_grad()``, ``(loss_sum /
global_batch).backward()`` (nonblocking allreduces started from gradient hooks), ``if
algo.before_step(...)`` (waits for them) ``optimizer.step(); algo.after_step()``. One side per
``--bucket-kb`` value (default 256, the trainer's default, and 4096, 25600).

Yardstick ("ddp"): ``torch.nn.parallel.DistributedDataParallel`` with the gloo backend and its
defaults (25 MB buckets, buffers broadcast from rank 0 every forward), rank and size from MPI,
``MASTER_ADDR=127.0.0.1``, a free ``MASTER_PORT``; per step ``opt.zero_grad();
mean_loss.backward(); opt.step()``.

Both sides live in the same ranks of one ``mpiexec -n 2`` job (the ``mpich`` wheel's, next to
this Python), each with its own copy of the same seeded model and the same batches; every rank
runs one torch thread (``OMP_NUM_THREADS=1``, the trial default). After one warm-up block per
side, the sides run in alternating blocks of ``--steps`` steps between barriers, ``--repeats``
rounds (the order rotating each round), so drift and other load hit all sides alike. A block's
time is the slowest rank's. Throughput = global batch x steps / block time; the ratio of a side
is the mean over rounds of (its block / DDP's block of the same round), with its standard error.
Every side ends on the same batches from the same start: their last losses agree (a check that
the sides train the same thing). Goal: ours (default buckets) >= 1.0x DDP.

    python benchmarks/resnet_ddp.py [--quick] [--json PATH] [--bucket-kb 256,4096]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine, now_iso  # benchmarks/_common.py (the script directory)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fashion_png"
RANKS = 2
LR, MOMENTUM = 0.01, 0.9
JOB_TIMEOUT_S = 1800.0


# ---------------------------------------------------------------------------------------------
# Worker side (inside mpiexec)
# ---------------------------------------------------------------------------------------------


def _batches(n: int, global_batch: int, rank: int, size: int) -> list[Any]:
    """``n`` global batches of Fashion-MNIST training images (standardised as the example's
    transform does); this rank's ``rank::size`` slice of each."""
    import numpy as np
    import torch

    from training.data import FASHION_MNIST_FILES, fashion_mnist_dirs, read_idx

    d = next(d for d in fashion_mnist_dirs() if (d / FASHION_MNIST_FILES["x"]).is_file())
    x = read_idx(d / FASHION_MNIST_FILES["x"])[: n * global_batch]
    y = read_idx(d / FASHION_MNIST_FILES["y"])[: n * global_batch].astype(np.int64)
    xs = (torch.from_numpy(x.astype(np.float32)) / 255 - 0.286) / 0.353
    xs, ys = xs.reshape(-1, 1, 28, 28), torch.from_numpy(y)
    out = []
    for i in range(n):
        rows = slice(i * global_batch + rank, (i + 1) * global_batch, size)
        out.append((xs[rows].contiguous(), ys[rows].contiguous()))
    return out


class _Side:
    def __init__(self, name: str, comm: Any, global_batch: int) -> None:
        import resnet  # examples/fashion_png (on sys.path)
        import torch

        from training import DataInfo

        info = DataInfo(input_shape=(1, 28, 28), n_classes=10, n_targets=None,
                        task="classification", n_train=60000)
        torch.manual_seed(0)
        self.name, self.comm, self.global_batch = name, comm, global_batch
        self.model = resnet.build({}, info)
        self.model.train()
        self.counters: dict[str, int] = {}
        if name == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            self.net = DistributedDataParallel(self.model)
            self.loss_fn = torch.nn.CrossEntropyLoss()
        else:
            from training.algorithms import make_algorithm

            kb = int(name.split(":")[1])
            self.net = self.model
            self.algo = make_algorithm("sync", self.model, comm, lr=LR, bucket_bytes=kb * 1024)
            self.algo.broadcast_parameters(root=0)
            self.loss_fn = torch.nn.CrossEntropyLoss(reduction="sum")
        self.opt = torch.optim.SGD(self.net.parameters(), lr=LR, momentum=MOMENTUM)
        self.last_loss = float("nan")

    def step(self, x: Any, y: Any) -> None:
        if self.name == "ddp":
            self.opt.zero_grad()
            loss = self.loss_fn(self.net(x), y)
            loss.backward()  # DDP's allreduces run during backward; waits for all ranks
            self.opt.step()
            self.last_loss = float(loss.detach())
            return
        # As training/jobs/_trainer.py Trainer._step does.
        self.algo.zero_grad()
        divisor = self.algo.loss_divisor(local_batch=len(x), global_batch=self.global_batch,
                                         epoch_size=60000)
        loss_sum = self.loss_fn(self.net(x), y)
        (loss_sum / divisor).backward()
        if self.algo.before_step(False):  # waits for all ranks
            self.opt.step()
            self.algo.after_step()
        self.last_loss = float(loss_sum.detach()) * self.comm.size / self.global_batch


def worker(spec: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    sys.path.insert(0, str(EXAMPLE))
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    dist.init_process_group("gloo", rank=comm.rank, world_size=comm.size)
    names, steps, repeats = spec["sides"], spec["steps"], spec["repeats"]
    batches = _batches(steps * (repeats + 1), spec["batch"], comm.rank, comm.size)
    sides = {name: _Side(name, comm, spec["batch"]) for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}

    def block(side: _Side, first: int) -> float:
        comm.Barrier()  # waits for all ranks
        start = time.perf_counter()
        for x, y in batches[first : first + steps]:
            side.step(x, y)
        elapsed = time.perf_counter() - start
        return float(comm.allreduce(elapsed, op=MPI.MAX))  # the slowest rank's

    for name in names:  # warm-up: first-use costs, allocator pools, gloo's connections
        block(sides[name], 0)
    for r in range(repeats):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            times[name].append(block(sides[name], (r + 1) * steps))
    for side in sides.values():
        if side.name != "ddp":
            side.counters = side.algo.counters()
            side.algo.finish()
    dist.destroy_process_group()
    if comm.rank == 0:
        Path(spec["out"]).write_text(json.dumps({
            "times": times,
            "last_loss": {n: s.last_loss for n, s in sides.items()},
            "counters": {n: s.counters for n, s in sides.items()},
            "n_params": sum(p.numel() for p in sides[names[0]].model.parameters()),
        }))


# ---------------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_job(spec: dict[str, Any]) -> dict[str, Any]:
    from training.launch import DEFAULT_LAUNCHER, launcher_argv

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        argv = launcher_argv(DEFAULT_LAUNCHER, RANKS) + [
            sys.executable, os.path.abspath(__file__), "--worker", json.dumps({**spec, "out": out})]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(_free_port())}
        proc = subprocess.run(argv, capture_output=True, text=True, env=env,
                              timeout=JOB_TIMEOUT_S, check=False)
        if proc.returncode != 0:
            sys.exit(f"error: the MPI job failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return json.loads(Path(out).read_text())  # type: ignore[no-any-return]


def _mean_se(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")
    return mean, se


def summarise(raw: dict[str, Any], batch: int, steps: int) -> dict[str, Any]:
    times = raw["times"]
    ddp = times["ddp"]
    sides = {}
    for name, ts in times.items():
        rates = [batch * steps / t for t in ts]
        ratios = [d / t for t, d in zip(ts, ddp, strict=True)]  # ours/ddp samples per second
        mean, se = _mean_se(rates)
        rmean, rse = _mean_se(ratios)
        sides[name] = {"samples_per_s": mean, "samples_per_s_se": se,
                       "samples_per_s_blocks": rates, "block_s": ts,
                       "ratio_to_ddp": rmean, "ratio_to_ddp_se": rse,
                       "last_loss": raw["last_loss"][name], "counters": raw["counters"][name]}
    return sides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 steps per block, 3 rounds")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--bucket-kb", default="256,4096,25600",
                        help="our bucket sizes to try, KiB, comma-separated (first: the headline)")
    parser.add_argument("--batch", type=int, default=32, help="global batch (default 32)")
    parser.add_argument("--steps", type=int, help="steps per block (default 5, quick 2)")
    parser.add_argument("--repeats", type=int, help="rounds (default 6, quick 3)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    steps = args.steps or (2 if args.quick else 5)
    repeats = args.repeats or (3 if args.quick else 6)
    kbs = [int(k) for k in args.bucket_kb.split(",") if k.strip()]
    names = ["ddp"] + [f"ours:{kb}" for kb in kbs]
    load_before = os.getloadavg()
    start = time.perf_counter()
    raw = run_job({"sides": names, "steps": steps, "repeats": repeats, "batch": args.batch})
    sides = summarise(raw, args.batch, steps)
    load_after = os.getloadavg()
    head = f"ours:{kbs[0]}"
    best = max((n for n in names if n != "ddp"), key=lambda n: sides[n]["ratio_to_ddp"])
    result = {
        "benchmark": "resnet_ddp", "date": now_iso(), "quick": args.quick,
        "machine": machine("torch", "torchvision", "mpi4py", "mpich"),
        "ranks": RANKS, "global_batch": args.batch, "steps_per_block": steps, "rounds": repeats,
        "n_params": raw["n_params"], "loadavg_before": load_before, "loadavg_after": load_after,
        "ddp_ratio": sides[head]["ratio_to_ddp"], "ddp_ratio_se": sides[head]["ratio_to_ddp_se"],
        "ddp_ratio_bucket_kb": kbs[0], "best_bucket": best,
        "best_ratio": sides[best]["ratio_to_ddp"], "sides": sides,
        "runtime_s": time.perf_counter() - start,
    }
    print(f"ResNet-18, 1x28x28, {RANKS} ranks, global batch {args.batch}, {steps} steps x "
          f"{repeats} rounds; load average {load_before[0]:.1f} -> {load_after[0]:.1f}")
    for name in names:
        s = sides[name]
        print(f"  {name:12s} {s['samples_per_s']:7.2f} +- {s['samples_per_s_se']:.2f} samples/s"
              f"  ratio to ddp {s['ratio_to_ddp']:.3f} +- {s['ratio_to_ddp_se']:.3f}"
              f"  last loss {s['last_loss']:.4f}")
    print(f"ddp_ratio (ours, {kbs[0]} KiB buckets) = {result['ddp_ratio']:.3f} "
          f"+- {result['ddp_ratio_se']:.3f} (goal >= 1.0); best: {best} {result['best_ratio']:.3f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
