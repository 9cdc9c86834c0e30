"""Pruning the models users bring, during training, against the dense run: wall time, FLOPs,
bytes allreduced per step and validation accuracy (issue 47's goals).

What is measured: the real trainer (``training.jobs._trainer.Trainer``) on 2 MPI ranks
(``mpiexec -n 2``), through benchmarks/pruning_training.py's rank job (one rule, one place): per
seed the dense run and the pruned run back to back in one MPI job, order rotated by the seed.
Figures per seed, pruned against the dense run of the same seed: the ratio of the trainer's
training seconds (``train_time_s``: evaluations included, launch excluded), of the final
per-sample FLOPs and of the final parameter count (= the bytes a sync step allreduces: every
parameter's gradient, 4 bytes each), and the gap in final validation accuracy (dense minus
pruned, points); over seeds: mean and standard error.

Cases (``--cases``):

- ``resnet18``: torchvision's ResNet-18 (``weights=None``, 3x3 stride-1 stem, no max-pool) on
  Fashion-MNIST 28x28, a training subset of ``--fashion-train`` images (the goal asks for all
  54,000: at about 66 images/s on this machine's 2 cores an epoch of them takes 14 min per run)
  and 1,000 validation images; sync, SGD lr 0.05, global batch 64.
- ``transformer``: examples/transformer/encoder.py (2 pre-norm encoder layers, width 64, 4
  heads, MLP 128) on mnist1d (4,000 signals as 10 tokens of 4); sync, AdamW lr 2e-3;
  ``transformer-mlp``: the same with ``keep = ["embed"]`` (the residual stream whole: only
  each layer's MLP width is cut).
- ``cell``: a cell genome (NAS-Bench-201 space: 3x3 conv, skip, 1x1 conv, avg pool, 3x3 conv,
  skip; 16 channels, 2 stages) on the Fashion-MNIST subset; sync, SGD lr 0.05.
- ``sync``, ``asgd``, ``asgd-average``: the stack of benchmarks/pruning_training.py (conv32-pool,
  conv64-pool, dense128) on mnist1d, dense against pruned: ``sync`` (the yardstick of what
  the cut itself costs on this task), ``asgd`` with
  ``prune.average = false`` (each rank cuts its own weights: the rule before), ``asgd-average``
  with the default ``true`` (the ranks' weights averaged at each cut).

The prune table of every case: ``l1`` (steps at epochs 2 and 3, linear, sparsity 1e-4) at
``--target``.

Command::

    python benchmarks/pruning_models.py [--json PATH] [--seeds N] [--cases resnet18,...]
        [--epochs N] [--target T] [--fashion-train N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from pruning_training import STACK, _compare, _launch  # noqa: E402  # the same rank job

CELL = {"family": "cell", "nodes": 4, "edges": ["nor_conv_3x3", "skip_connect", "nor_conv_1x1",
                                                "avg_pool_3x3", "nor_conv_3x3", "skip_connect"]}
CASES: dict[str, dict[str, Any]] = {
    "transformer": {"model": "_prune_models:transformer", "dataset": "mnist1d",
                    "optimizer": "adamw", "lr": 2e-3, "batch_size": 64},
    "transformer-mlp": {"model": "_prune_models:transformer", "dataset": "mnist1d",
                        "optimizer": "adamw", "lr": 2e-3, "batch_size": 64},
    "sync": {"dataset": "mnist1d", "genome": STACK, "lr": 0.05, "batch_size": 64},
    "asgd": {"dataset": "mnist1d", "genome": STACK, "lr": 0.05, "batch_size": 64,
             "algorithm": "asgd", "send_every": 4},
    "asgd-average": {"dataset": "mnist1d", "genome": STACK, "lr": 0.05, "batch_size": 64,
                      "algorithm": "asgd", "send_every": 4},
    "cell": {"dataset": "_prune_models:fashion", "genome": CELL, "lr": 0.05, "batch_size": 64},
    "resnet18": {"model": "_prune_models:resnet18", "dataset": "_prune_models:fashion",
                 "lr": 0.05, "batch_size": 64},
}
GOALS = {
    "resnet18": {"wall_ratio": 0.60, "gap": 0.3},
    "transformer": {"wall_ratio": 0.7, "gap": 0.3},
    "transformer-mlp": {"wall_ratio": 0.7, "gap": 0.3},
    "cell": {"wall_ratio": 0.6, "gap": 0.3},
    "sync": {},
    "asgd": {"gap": 1.0},
    "asgd-average": {"gap": 1.0},
}


def prune_table(case: str, target: float) -> dict[str, Any]:
    table = {"target": target, "start_epoch": 2, "end_epoch": 3, "steps": 2, "sparsity": 1e-4}
    if case == "transformer-mlp":  # the residual stream kept whole: the MLP widths alone
        table["keep"] = ["embed"]
    return {**table, "average": case != "asgd"}  # asgd: each rank cuts its own weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--target", type=float, default=0.5)
    parser.add_argument("--fashion-train", type=int, default=2000)
    args = parser.parse_args()
    os.environ["DETOL_BENCH_FASHION_TRAIN"] = str(args.fashion_train)  # for the rank jobs
    from _common import machine, now_iso

    figures: dict[str, Any] = {"date": now_iso(), "machine": machine("torch", "mpi4py"),
                               "ranks": 2, "epochs": args.epochs, "seeds": args.seeds,
                               "fashion_train": args.fashion_train, "results": {}}
    if args.json and args.json.exists():  # cases run before keep their figures
        figures["results"] = json.loads(args.json.read_text()).get("results", {})
    with tempfile.TemporaryDirectory(prefix="detol-prune-models-") as tmp:
        for case in args.cases.split(","):
            config = {**CASES[case], "epochs": args.epochs}
            table = prune_table(case, args.target)
            load = [os.getloadavg()[0]]
            rows = _launch(config, list(range(args.seeds)), {"pruned": table}, Path(tmp), case)
            load.append(os.getloadavg()[0])
            c = {**_compare(rows, "pruned"), "prune": table, "config": config,
                 "goal": GOALS[case], "loadavg_1min_before_after": load}
            c["bytes_allreduced_per_step_ratio"] = c["params_ratio"]  # gradients: 4 B a param
            figures["results"][case] = c
            print(f"{case:14s} wall {c['wall_ratio']['mean']:.3f}x (se "
                  f"{c['wall_ratio']['se']:.3f})  flops {c['flops_ratio']['mean']:.3f}x  "
                  f"params/bytes {c['params_ratio']['mean']:.3f}x  gap "
                  f"{c['accuracy_gap_points']['mean']:+.2f} points (se "
                  f"{c['accuracy_gap_points']['se']:.2f}; dense "
                  f"{100 * c['dense_accuracy']['mean']:.2f}%)  load {load}", flush=True)
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                part = args.json.with_suffix(".tmp")
                part.write_text(json.dumps(figures, indent=1))
                part.replace(args.json)


if __name__ == "__main__":
    main()
