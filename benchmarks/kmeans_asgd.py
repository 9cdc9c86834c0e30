"""The ASGD paper's first experiment: K-means by SGD, ASGD vs SimuParallelSGD vs map-reduce BATCH.

What is measured: for K = 10 and K = 100 clusters of 10-dimensional synthetic points, each method
trains from the same initial centroids on the same data, with the same ranks and the same
wall-clock budget (one MPI job per K runs the methods one after another). Every rank records its
centroids at fixed times without communicating; afterwards the loss (mean squared distance to the
nearest centroid, on a fixed evaluation sample) of the ranks' mean centroids is computed at each
checkpoint. The target loss is 1.02 x the best loss any method reached; ``time_to_target_s`` is
the first checkpoint at or below it (``null`` if never). Ratios are to ASGD (> 1: ASGD faster).

Yardsticks: SimuParallelSGD (Zinkevich et al. 2010: independent SGD, one average at the end) and
BATCH (full-batch gradient descent, map-reduce: per-shard gradient sums, one allreduce, one step).

Command::

    python benchmarks/kmeans_asgd.py [--quick] [--json PATH] [--ranks N] [--html PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import machine, now_iso  # benchmarks/_common.py (the script directory)

METHODS = ("asgd", "simuparallel", "batch")
RESULTS = Path(__file__).resolve().parent / "results"


def _worker(args: argparse.Namespace) -> int:
    import numpy as np
    from mpi4py import MPI

    from training._kmeans import kmeans_data, kmeans_loss, train_kmeans

    comm = MPI.COMM_WORLD
    x, init = kmeans_data(args.points, k=args.k, seed=0)
    evaluation = x[np.random.default_rng(1).choice(len(x), size=20000, replace=False)]
    out: dict[str, Any] = {}
    for method in METHODS:
        lr = args.lr * (args.k if method == "batch" else 1)  # full batch: one step per pass
        run = train_kmeans(comm, method, x, init, lr=lr, batch_size=args.batch,
                           seconds=args.seconds, checkpoint_every=args.seconds / args.checkpoints,
                           seed=0)
        centroids = comm.gather(run.centroids, root=0)  # waits for all ranks
        samples = comm.gather(run.samples, root=0)
        counters = comm.gather(run.counters, root=0)
        comm_s = comm.gather(run.comm_seconds, root=0)
        steps = comm.gather(run.steps, root=0)
        if comm.rank == 0:
            n = min(len(c) for c in centroids)
            loss = [kmeans_loss(evaluation, np.mean([c[i] for c in centroids], axis=0))
                    for i in range(n)]
            out[method] = {
                "lr": lr,
                "time_s": run.checkpoints[:n],
                "loss": loss,
                "samples": [int(sum(s[i] for s in samples)) for i in range(n)],
                "counters": {k: int(sum(c.get(k, 0) for c in counters)) for k in counters[0]},
                "comm_fraction": float(np.mean(comm_s) / args.seconds),
                "steps": int(sum(steps)),
            }
    if comm.rank == 0:
        Path(args.out).write_text(json.dumps(out))
    return 0


def _launch(k: int, args: argparse.Namespace, out: str) -> dict[str, Any]:
    from training.launch import launcher_argv

    argv = launcher_argv("mpiexec -n {ranks}", args.ranks) + [
        sys.executable, __file__, "--worker", "--k", str(k), "--seconds", str(args.seconds),
        "--points", str(args.points), "--batch", str(args.batch), "--lr", str(args.lr),
        "--checkpoints", str(args.checkpoints), "--out", out,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1200)
    if proc.returncode != 0:
        raise SystemExit(f"K={k}: MPI job failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return json.loads(Path(out).read_text())


def _time_to(curve: dict[str, Any], target: float, key: str) -> float | None:
    for t, loss in zip(curve[key], curve["loss"], strict=True):
        if loss <= target:
            return float(t)
    return None


def _figure(results: dict[str, Any], path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    ks = list(results)
    fig = make_subplots(rows=len(ks), cols=2, subplot_titles=[
        f"K={k}: loss vs {axis}" for k in ks for axis in ("wall time (s)", "samples processed")])
    colors = {"asgd": "#d62728", "simuparallel": "#1f77b4", "batch": "#2ca02c"}
    for row, k in enumerate(ks, start=1):
        for method in METHODS:
            curve = results[k]["curves"][method]
            for col, axis in enumerate(("time_s", "samples"), start=1):
                fig.add_trace(go.Scatter(x=curve[axis], y=curve["loss"], name=method,
                                         line={"color": colors[method]},
                                         showlegend=row == 1 and col == 1), row=row, col=col)
            fig.update_yaxes(type="log", row=row)
    fig.update_layout(title="K-means by SGD: ASGD vs SimuParallelSGD vs BATCH",
                      height=400 * len(ks))
    fig.write_html(path, include_plotlyjs=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small run for CI (under 2 minutes)")
    p.add_argument("--json", help="write the figures to this JSON file")
    p.add_argument("--html", help="plotly figure (default: next to --json, or results/)")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--k", type=int, default=10, help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, default=None, help="wall-clock budget per method")
    p.add_argument("--points", type=int, default=None)
    p.add_argument("--batch", type=int, default=256, help="global mini-batch")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--checkpoints", type=int, default=100)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return _worker(args)
    args.seconds = args.seconds or (3.0 if args.quick else 20.0)
    args.points = args.points or (100_000 if args.quick else 500_000)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k in (10, 100):
            curves = _launch(k, args, str(Path(tmp) / f"k{k}.json"))
            best = min(min(c["loss"]) for c in curves.values())
            target = 1.02 * best
            ttt = {m: _time_to(curves[m], target, "time_s") for m in METHODS}
            sst = {m: _time_to(curves[m], target, "samples") for m in METHODS}
            results[str(k)] = {"target_loss": target, "time_to_target_s": ttt,
                               "samples_to_target": sst, "curves": curves}
    print(f"K-means by SGD, {args.ranks} ranks, {args.points} points x 10 dims, "
          f"{args.seconds:g} s per method, lr {args.lr}, global batch {args.batch}")
    print(f"{'K':>4} {'method':<13} {'final loss':>10} {'t->target s':>12} {'ratio':>7} "
          f"{'samples->target':>16} {'steps':>8}  counters")
    for k, r in results.items():
        base = r["time_to_target_s"]["asgd"]
        for m in METHODS:
            c = r["curves"][m]
            t = r["time_to_target_s"][m]
            ratio = f"{t / base:.2f}" if t is not None and base else "-"
            s = r["samples_to_target"][m]
            print(f"{k:>4} {m:<13} {c['loss'][-1]:>10.3f} "
                  f"{'never' if t is None else f'{t:.2f}':>12} {ratio:>7} "
                  f"{'never' if s is None else int(s):>16} {c['steps']:>8}  {c['counters']}")
        print(f"{k:>4} target loss {r['target_loss']:.3f} (1.02 x best reached)")
    html = Path(args.html) if args.html else (
        Path(args.json).with_suffix(".html") if args.json else RESULTS / "kmeans_asgd.html")
    html.parent.mkdir(parents=True, exist_ok=True)
    _figure(results, html)
    print(f"figure: {html}")
    if args.json:
        from mpi4py import MPI

        doc = {
            "benchmark": "kmeans_asgd",
            "date": now_iso(),
            "machine": machine("torch", "mpi4py", "mpich",
                               mpi=MPI.Get_library_version().splitlines()[0]),
            "quick": args.quick,
            "settings": {"ranks": args.ranks, "seconds_per_method": args.seconds,
                         "points": args.points, "dims": 10, "batch": args.batch, "lr": args.lr},
            "time_to_target_s": {k: r["time_to_target_s"] for k, r in results.items()},
            "target_loss": {k: r["target_loss"] for k, r in results.items()},
            "samples_to_target": {k: r["samples_to_target"] for k, r in results.items()},
            "curves": {k: r["curves"] for k, r in results.items()},
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
