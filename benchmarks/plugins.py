"""Generality costs nothing: the digits MLP through the plug-in path vs the built-in path.

Each variant trains the same MLP (2 x 128, sync SGD, batch 64) on scikit-learn's digits on 2 MPI
ranks, and reports its median epoch time (training plus the validation pass, first epoch left
out); the variants are interleaved, repeat after repeat, in one run:

- ``before``: the built-in path of the code before the loaders (the trainer indexing one tensor
  of the whole training set), from ``git archive`` of the branch point (skipped without git);
- ``builtin``: the built-in path now (in-memory dataset through a DataLoader);
- ``plugin``: model plug-in + dataset plug-in returning arrays (held in memory);
- ``plugin_lazy``: model plug-in + dataset plug-in returning a per-sample TensorDataset
  (the path a dataset on disk takes, without the disk).

Goal (issue 26): ``plugin`` <= 1.05x ``before``.

    python benchmarks/plugins.py [--quick] [--json PATH] [--base COMMIT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import machine, now_iso  # noqa: E402
from training.launch import launcher_argv  # noqa: E402

JOB = """
import json, sys, time
from mpi4py import MPI
from training import TrainConfig
from training.jobs import Trainer
config = TrainConfig(**json.loads(sys.argv[1]))
result = Trainer(config, MPI.COMM_WORLD).train()
if MPI.COMM_WORLD.rank == 0:
    times = [h["train_time_s"] for h in result.history]
    print("EPOCHS " + json.dumps([b - a for a, b in zip(times, times[1:])]))
"""
BASE = {"dataset": "digits", "hidden": 128, "layers": 2, "batch_size": 64, "lr": 0.05,
        "ranks": 2, "algorithm": "sync"}
VARIANTS: dict[str, dict[str, Any]] = {
    "before": {},
    "builtin": {},
    "plugin": {"model": "_plugins_user:build", "dataset": "_plugins_user:digits_arrays"},
    "plugin_lazy": {"model": "_plugins_user:build", "dataset": "_plugins_user:digits_torch"},
}


def snapshot(commit: str, into: Path) -> bool:
    """``training`` and ``spaces`` of ``commit`` unpacked in ``into``; False without git."""
    try:
        tar = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "training", "spaces"],
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return False
    with tarfile.open(fileobj=BytesIO(tar)) as t:
        t.extractall(into, filter="data")
    return True


def base_commit() -> str:
    """Where this branch left main (the code before the loaders)."""
    out = subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"],
                         capture_output=True, text=True, check=False).stdout.strip()
    return out or "HEAD"


def run_variant(name: str, epochs: int, old: Path | None) -> list[float]:
    config = {**BASE, **VARIANTS[name], "epochs": epochs}
    path = [str(old) if name == "before" and old else str(ROOT), str(ROOT / "benchmarks")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPI4PY_RC_THREAD_LEVEL": "funneled",
           "PYTHONPATH": os.pathsep.join(path)}
    argv = [*launcher_argv("mpiexec -n {ranks}", 2), sys.executable, "-c", JOB,
            json.dumps(config)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600,
                          cwd=old if name == "before" and old else ROOT)
    line = [x for x in proc.stdout.splitlines() if x.startswith("EPOCHS ")]
    if proc.returncode != 0 or not line:
        raise RuntimeError(f"{name}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return list(json.loads(line[0][7:]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 repeats of 8 epochs (about 1 min)")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--base", help="the commit whose built-in path is 'before'")
    args = p.parse_args()
    repeats, epochs = (3, 8) if args.quick else (7, 20)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        base = args.base or base_commit()
        old = Path(tmp) if snapshot(base, Path(tmp)) else None
        names = [n for n in VARIANTS if n != "before" or old is not None]
        times: dict[str, list[float]] = {n: [] for n in names}
        for _ in range(repeats):
            for name in names:  # interleaved: a load change hits every variant alike
                times[name] += run_variant(name, epochs, old)
    load_after = os.getloadavg()
    yard = "before" if "before" in times else "builtin"
    median = {n: statistics.median(v) for n, v in times.items()}
    ratios = {n: median[n] / median[yard] for n in names}
    print(f"digits MLP 2x128, sync, 2 ranks, {repeats} x {epochs} epochs; load average "
          f"{load_before[0]:.1f} -> {load_after[0]:.1f}")
    print(f"{'variant':<12} {'epoch ms (median)':>18} {'x ' + yard:>10}")
    for n in names:
        print(f"{n:<12} {1000 * median[n]:>18.1f} {ratios[n]:>10.3f}")
    goal = ratios["plugin"] <= 1.05
    print(f"goal plugin <= 1.05x {yard}: {'met' if goal else 'missed'} ({ratios['plugin']:.3f})")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": now_iso(), "quick": args.quick, "base": base, "yardstick": yard,
            "epoch_s_median": median, "ratio": ratios, "epoch_s": times, "goal_met": goal,
            "load_average": {"before": load_before, "after": load_after},
            "machine": machine("torch", "mpi4py", "mpich"),
        }, indent=2))


if __name__ == "__main__":
    main()
