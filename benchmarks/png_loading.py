"""Benchmark data from files: Fashion-MNIST read from PNG files vs the same images in memory.

Both sides run the real trainer (``training.jobs._trainer.Trainer``, as a trial runs it) on 2 MPI
ranks with sync SGD, the same model plug-in (``cnn`` below: conv 1->32 3x3, pool, conv 32->64
3x3, pool, linear 3136->128, linear 128->10; 421k parameters), the same images in the same
order (global batch 64, each rank reading its ``rank::size`` slice of every global batch):

- ``png``: examples/fashion_png/resnet.py's ``load`` (``torchvision.datasets.ImageFolder`` over
  the tree that examples/fashion_png/write_pngs.py writes; every sample a PNG decoded by
  Pillow, ``ToTensor`` + ``Normalize``), through the trainer's ``DataLoader`` with
  ``--workers`` loader processes per rank (default 1; forkserver, persistent for the trial);
- ``memory``: the same images as float32 arrays (``training.Dataset``: the in-memory path,
  whole batches indexed at once, no workers), taken from the IDX files in the ImageFolder's
  sample order and split with the same permutation.

One ``mpiexec -n 2`` job per side and round (``--rounds``, the sides alternating), each
training ``--epochs`` epochs (``trainer._run_epoch``; the first epoch of the png side also
starts its loader workers: reported apart). Epoch time is the mean of epochs 2..E; the ratio
png / memory (goal <= 1.3) is the mean over rounds with its standard error.

Memory: each rank's resident set (``VmRSS``) after training, its peak (``VmHWM``), and the
proportional set size (PSS) of its loader workers and their forkserver, against its share of
the data (float32 training images / ranks; the PNG bytes / ranks). ``rss_data`` = RSS after
training - RSS after imports and model (before any data): what holding or reading the data
costs a rank.

    python benchmarks/png_loading.py [--quick] [--json PATH] [--workers 1] [--tree DIR]

``--quick``: 4,000 + 4,000 images (a tree written with ``--limit 4000``), 2 epochs, 1 round.
The full run uses all 60,000 training images (48,000 train / 12,000 val), 3 epochs, 2 rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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
BATCH = 64
JOB_TIMEOUT_S = 1800.0


# ---------------------------------------------------------------------------------------------
# Plug-ins (resolved by the trainer as "png_loading:...")
# ---------------------------------------------------------------------------------------------


def cnn(params: dict[str, Any], data: Any) -> Any:
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(data.input_shape[0], 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, data.n_classes),
    )


def memory(val_fraction: float) -> Any:
    """The png side's images as arrays: the same samples, order and split."""
    import numpy as np
    import resnet

    from training import Dataset
    from training.data import FASHION_MNIST_FILES, fashion_mnist_dirs, read_idx

    lazy = resnet.load(val_fraction)
    d = next(d for d in fashion_mnist_dirs() if (d / FASHION_MNIST_FILES["x"]).is_file())

    def arrays(subset: Any, images: str, labels: str) -> tuple[np.ndarray, np.ndarray]:
        folder = subset.dataset if hasattr(subset, "indices") else subset
        picks = subset.indices if hasattr(subset, "indices") else range(len(folder))
        rows = np.array([int(Path(folder.samples[i][0]).stem) for i in picks])
        x = read_idx(d / FASHION_MNIST_FILES[images])[rows].astype(np.float32)
        y = np.array([folder.samples[i][1] for i in picks], dtype=np.int64)
        assert np.array_equal(y, read_idx(d / FASHION_MNIST_FILES[labels])[rows])
        x = (x / 255 - 0.286) / 0.353
        return x.reshape(-1, 1, 28, 28), y

    train, val, test = (arrays(lazy.train, "x", "y"), arrays(lazy.val, "x", "y"),
                        arrays(lazy.test, "x_test", "y_test"))
    return Dataset(*train, *val, *test, 10)


# ---------------------------------------------------------------------------------------------
# Worker side (inside mpiexec)
# ---------------------------------------------------------------------------------------------


def _status_kb(pid: int | str, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children_pss_mb() -> float:
    """Proportional set size of this process's children (loader workers, their forkserver):
    pages they share with each other are counted once, split between them."""
    import psutil

    total = 0
    for p in psutil.Process().children(recursive=True):
        try:
            for line in Path(f"/proc/{p.pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def worker(spec: dict[str, Any]) -> None:
    import torch
    from mpi4py import MPI

    from training import TrainConfig
    from training.jobs import Trainer

    comm = MPI.COMM_WORLD
    side = spec["side"]
    torch.set_num_threads(1)
    import resnet  # noqa: F401  # torchvision's import, before the baseline, on both sides

    dataset = {"png": "resnet:load", "memory": "png_loading:memory",  # the user's plug-ins
               "shards": f"shards:{spec.get('shards')}"}[side]  # benchmarks/data_layer.py
    config = TrainConfig(dataset=dataset, model=spec.get("model", "png_loading:cnn"),
                         algorithm="sync", ranks=RANKS, epochs=spec["epochs"], batch_size=BATCH,
                         lr=0.05, momentum=0.9, loader_workers=spec["workers"], seed=0,
                         data_cache=spec.get("cache"))
    rss_base = _status_kb("self", "VmRSS") / 1024
    trainer = Trainer(config, comm)
    rss_ready = _status_kb("self", "VmRSS") / 1024
    epochs = []
    losses = []
    faults = []  # major page faults of this rank per epoch (data read from disk by a mapping)
    for epoch in range(1, spec["epochs"] + 1):
        comm.Barrier()  # waits for all ranks
        start = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
        losses.append(trainer._run_epoch(epoch))
        epochs.append(float(comm.allreduce(time.perf_counter() - start, op=MPI.MAX)))
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_majflt - before)
    rss = {
        "rank_rss_mb": _status_kb("self", "VmRSS") / 1024,
        "rank_peak_rss_mb": _status_kb("self", "VmHWM") / 1024,
        "rank_rss_base_mb": rss_base,
        "rank_rss_ready_mb": rss_ready,
        "workers_pss_mb": _children_pss_mb(),
        "rows_read": trainer.rows_read,
        "major_faults": faults,
    }
    trainer.algorithm.finish()
    per_rank = comm.gather(rss, root=0)
    if comm.rank == 0:
        Path(spec["out"]).write_text(json.dumps({
            "epoch_s": epochs, "train_loss": losses, "ranks": per_rank,
            "n_train": trainer.n_train,
        }))
    del trainer  # stops the loader workers


# ---------------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------------


def run_job(spec: dict[str, Any], tree: Path) -> dict[str, Any]:
    from training.launch import DEFAULT_LAUNCHER, launcher_argv

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        argv = launcher_argv(DEFAULT_LAUNCHER, RANKS) + [
            sys.executable, os.path.abspath(__file__), "--worker", json.dumps({**spec, "out": out})]
        path = os.pathsep.join([str(EXAMPLE), str(Path(__file__).parent),
                                os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path,
               "FASHION_PNG": str(tree)}
        proc = subprocess.run(argv, capture_output=True, text=True, env=env,
                              timeout=JOB_TIMEOUT_S, check=False)
        if proc.returncode != 0:
            sys.exit(f"error: the {spec['side']} job failed (exit {proc.returncode}):\n"
                     f"{proc.stderr[-3000:]}")
        return json.loads(Path(out).read_text())  # type: ignore[no-any-return]


def _mean_se(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")
    return mean, se


def _tree_bytes(tree: Path) -> int:
    return sum(p.stat().st_size for p in (tree / "train").rglob("*.png"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4,000 images, 2 epochs, 1 round")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--workers", type=int, default=1, help="loader workers per rank")
    parser.add_argument("--epochs", type=int, help="epochs per job (default 3, quick 2)")
    parser.add_argument("--rounds", type=int, help="jobs per side (default 2, quick 1)")
    parser.add_argument("--tree", type=Path, help="the PNG tree (default data/fashion-png, "
                        "quick data/fashion-png-4000; written if missing)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    limit = 4000 if args.quick else None
    tree = args.tree or ROOT / "data" / ("fashion-png-4000" if args.quick else "fashion-png")
    sys.path.insert(0, str(EXAMPLE))
    import write_pngs

    write_pngs.write_tree(tree, limit=limit)  # nothing to do when it is there already
    epochs = args.epochs or (2 if args.quick else 3)
    rounds = args.rounds or (1 if args.quick else 2)
    load_before = os.getloadavg()
    start = time.perf_counter()
    runs: dict[str, list[dict[str, Any]]] = {"memory": [], "png": []}
    for r in range(rounds):
        for side in (("memory", "png") if r % 2 == 0 else ("png", "memory")):
            spec = {"side": side, "epochs": epochs, "workers": args.workers}
            runs[side].append(run_job(spec, tree))
            times = [round(t, 1) for t in runs[side][-1]["epoch_s"]]
            print(f"  round {r + 1} {side:6s} epochs {times} s  load {os.getloadavg()[0]:.1f}",
                  flush=True)
    load_after = os.getloadavg()
    steady = {s: [statistics.fmean(run["epoch_s"][1:] or run["epoch_s"]) for run in rs]
              for s, rs in runs.items()}
    ratios = [p / m for p, m in zip(steady["png"], steady["memory"], strict=True)]
    ratio, ratio_se = _mean_se(ratios)
    first_ratio = statistics.fmean(
        p["epoch_s"][0] / m["epoch_s"][0] for p, m in zip(runs["png"], runs["memory"], strict=True))
    n_train = runs["png"][0]["n_train"]
    share = {"memory_float32_mb": n_train * 784 * 4 / RANKS / 2**20,
             "png_bytes_mb": _tree_bytes(tree) * n_train / max(1, len(
                 list((tree / "train").rglob("*.png")))) / RANKS / 2**20}
    memory_summary = {}
    for side, rs in runs.items():
        last = rs[-1]["ranks"]
        memory_summary[side] = {
            "rank_rss_mb": [r["rank_rss_mb"] for r in last],
            "rank_peak_rss_mb": [r["rank_peak_rss_mb"] for r in last],
            "rss_data_mb": [r["rank_rss_mb"] - r["rank_rss_base_mb"] for r in last],
            "workers_pss_mb": [r["workers_pss_mb"] for r in last],
            "rows_read": [r["rows_read"] for r in last],
        }
    result = {
        "benchmark": "png_loading", "date": now_iso(), "quick": args.quick,
        "machine": machine("torch", "torchvision", "pillow", "mpi4py", "mpich"),
        "ranks": RANKS, "global_batch": BATCH, "loader_workers": args.workers,
        "epochs": epochs, "rounds": rounds, "n_train": n_train, "tree": str(tree),
        "loadavg_before": load_before, "loadavg_after": load_after,
        "epoch_s": {s: [run["epoch_s"] for run in rs] for s, rs in runs.items()},
        "steady_epoch_s": steady, "png_ratio": ratio, "png_ratio_se": ratio_se,
        "first_epoch_ratio": first_ratio, "share_of_data_mb": share, "memory": memory_summary,
        "runtime_s": time.perf_counter() - start,
    }
    print(f"Fashion-MNIST, {n_train} training images, {RANKS} ranks, sync, global batch {BATCH},"
          f" {args.workers} loader worker(s) per rank; load average {load_before[0]:.1f} -> "
          f"{load_after[0]:.1f}")
    print(f"  epoch (2..{epochs}) memory {statistics.fmean(steady['memory']):.2f} s, png "
          f"{statistics.fmean(steady['png']):.2f} s: png_ratio = {ratio:.3f} +- {ratio_se:.3f} "
          f"(goal <= 1.3); first epoch (worker start) ratio {first_ratio:.2f}")
    for side, m in memory_summary.items():
        print(f"  {side:6s} rank RSS {[round(v) for v in m['rank_rss_mb']]} MB (data part "
              f"{[round(v) for v in m['rss_data_mb']]} MB), loader workers PSS "
              f"{[round(v) for v in m['workers_pss_mb']]} MB")
    print(f"  a rank's share of the data: {share['memory_float32_mb']:.0f} MB as float32, "
          f"{share['png_bytes_mb']:.0f} MB as PNG files")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
