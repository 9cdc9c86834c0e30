"""The ASGD paper's first experiment: K-means by SGD, ASGD vs SimuParallelSGD vs BATCH vs sync.

What is measured: for K = 10 and K = 100 clusters of 10-dimensional synthetic points (unit
variance around centres uniform in [-10, 10]^10, k-means++ initial centroids), every method
trains from the same centroids on the same data with the same ranks and the same wall-clock
budget; one MPI job per (K, seed, setting) runs the methods one after another, their order
rotated with the seed so drift on the machine does not favour one. Every rank records its
centroids every ``--checkpoint`` seconds without communicating; afterwards the loss (mean
squared distance to the nearest centroid, on a fixed sample of 20,000 points) of the ranks'
mean centroids is computed at each checkpoint.

Target (an outside reference, not what the methods reached): ``--target`` x the loss of
Lloyd's algorithm run to convergence from the same initial centroids (default 1.1: from some
starts every SGD method settles in a minimum up to 1.1x Lloyd's, so a tighter target measures
which start it was, not how fast a method is).
``time_to_target`` is the first checkpoint at or below it, ``samples_to_target`` the samples
all ranks had processed by then. The ratio of a method is its time to target / ASGD's in the
same seed (> 1: ASGD faster); medians and ranges over seeds are reported. A method that never
reaches the target in a seed counts as the budget there (its ratio is then a bound, marked
">" or "<"); a seed in which neither reached it is left out of that method's ratios.

Settings: ``balanced`` (every rank at its own pace) and ``straggler`` (rank 1 computes
``--straggler`` times slower: ``[training] slowdown``, see ``training/algorithms/_pace.py``).

Methods: ``asgd`` (Keuper & Pfreundt; the first ``--send-every`` value, default 4 as in
``[training]``; every further value N adds a method ``asgd-sN``, default ``asgd-s1``),
``simuparallel`` (Zinkevich et al. 2010: independent SGD, one average at the end), ``batch``
(map-reduce full-batch gradient descent: per-shard gradient sums, one allreduce, one step per
pass; lr = K/2, which makes a step close to a Lloyd iteration) and ``sync`` (synchronous
allreduce SGD on the global batch). CPU seconds (all ranks) are recorded beside wall time.

Command::

    python benchmarks/kmeans_asgd.py [--quick] [--json PATH] [--seeds N] [--send-every S]
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

from _common import machine, now_iso  # benchmarks/_common/ (the script directory)

BASE_METHODS = ("asgd", "simuparallel", "batch", "sync")
METHODS = BASE_METHODS  # plus "asgd-sN" for every further --send-every value N
SETTINGS = ("balanced", "straggler")
RESULTS = Path(__file__).resolve().parent / "results"


def _worker(args: argparse.Namespace) -> int:
    import numpy as np
    from _common.kmeans import kmeans_data, kmeans_loss, train_kmeans
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    x, init = kmeans_data(args.points, k=args.k, seed=args.seed)
    evaluation = x[np.random.default_rng(1).choice(len(x), size=20000, replace=False)]
    slowdown = [1.0, args.straggler] if args.setting == "straggler" else []
    methods = _methods(args)
    shift = args.seed % len(methods)
    out: dict[str, Any] = {}
    for method in methods[shift:] + methods[:shift]:
        algorithm, every = _algorithm(method, args)
        lr = args.k / 2 if algorithm == "batch" else args.lr
        run = train_kmeans(comm, algorithm, x, init, lr=lr, batch_size=args.batch,
                           seconds=args.seconds, checkpoint_every=args.checkpoint,
                           slowdown=slowdown, seed=args.seed, send_every=every)
        centroids = comm.gather(run.centroids, root=0)  # waits for all ranks
        samples = comm.gather(run.samples, root=0)
        counters = comm.gather(run.counters, root=0)
        cpu = comm.gather(run.cpu_s, root=0)
        steps = comm.gather(run.steps, root=0)
        if comm.rank == 0:
            n = min(len(c) for c in centroids)
            out[method] = {
                "lr": lr,
                "time_s": run.checkpoints[:n],
                "loss": [kmeans_loss(evaluation, np.mean([c[i] for c in centroids], axis=0))
                         for i in range(n)],
                "samples": [int(sum(s[i] for s in samples)) for i in range(n)],
                "counters": {k: int(sum(c.get(k, 0) for c in counters)) for k in counters[0]},
                "cpu_s": float(sum(cpu)),
                "steps_per_rank": [int(s) for s in steps],
            }
    if comm.rank == 0:
        Path(args.out).write_text(json.dumps(out))
    return 0


def _sends(args: argparse.Namespace) -> list[int]:
    return [int(v) for v in str(args.send_every).split(",")]


def _methods(args: argparse.Namespace) -> list[str]:
    return [*BASE_METHODS, *(f"asgd-s{n}" for n in _sends(args)[1:])]


def _algorithm(method: str, args: argparse.Namespace) -> tuple[str, int]:
    """(algorithm, send_every) of a method name."""
    if method.startswith("asgd-s"):
        return "asgd", int(method.removeprefix("asgd-s"))
    return method, _sends(args)[0]


def _lloyd_target(k: int, seed: int, args: argparse.Namespace) -> dict[str, float]:
    import numpy as np
    from _common.kmeans import kmeans_data, kmeans_loss, lloyd

    x, init = kmeans_data(args.points, k=k, seed=seed)
    evaluation = x[np.random.default_rng(1).choice(len(x), size=20000, replace=False)]
    centroids, _ = lloyd(x, init)
    reference = kmeans_loss(evaluation, centroids)
    return {"lloyd_loss": reference, "start_loss": kmeans_loss(evaluation, init),
            "target_loss": args.target * reference}


def _launch(k: int, seed: int, setting: str, args: argparse.Namespace, out: str) -> dict:
    from training.launch import SINGLE_NODE_ENV, job_env, launcher_argv

    argv = launcher_argv("mpiexec -n {ranks}", args.ranks) + [
        sys.executable, __file__, "--worker", "--k", str(k), "--seed", str(seed),
        "--setting", setting, "--seconds", str(args.seconds), "--points", str(args.points),
        "--batch", str(args.batch), "--lr", str(args.lr), "--checkpoint", str(args.checkpoint),
        "--send-every", str(args.send_every), "--straggler", str(args.straggler), "--out", out]
    env = job_env(1, False, SINGLE_NODE_ENV)  # the trainer's: one thread, MPI funneled
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"K={k} seed {seed} {setting}: MPI job failed:\n"
                         f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    result: dict = json.loads(Path(out).read_text())
    return result


def _first(curve: dict[str, Any], target: float, key: str) -> float | None:
    for value, loss in zip(curve[key], curve["loss"], strict=True):
        if loss <= target:
            return float(value)
    return None


def _summary(values: list[float]) -> dict[str, float]:
    import numpy as np

    v = np.asarray(values, float)
    return {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max()),
            "mean": float(v.mean()),
            "se": float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan"),
            "n": len(v),
            "geomean": float(np.exp(np.mean(np.log(v)))) if v.min() > 0 else float("nan")}


def _thinned(results: dict[str, Any], every: int) -> dict[str, Any]:
    """The results with every curve kept at every ``every``-th checkpoint (and its last), losses
    to 5 significant digits: the JSON stays small; times to target were taken at full
    resolution."""
    out: dict[str, Any] = json.loads(json.dumps(results))
    for by_setting in out.values():
        for r in by_setting.values():
            for run in r["seeds"]:
                for curve in run["curves"].values():
                    n = len(curve["time_s"])
                    keep = sorted(set(range(0, n, every)) | ({n - 1} if n else set()))
                    curve["time_s"] = [round(curve["time_s"][i], 3) for i in keep]
                    curve["loss"] = [float(f"{curve['loss'][i]:.5g}") for i in keep]
                    curve["samples"] = [curve["samples"][i] for i in keep]
    return out


def _figure(results: dict[str, Any], path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    keys = [(k, s) for k in results for s in results[k]]
    fig = make_subplots(rows=len(keys), cols=2, subplot_titles=[
        f"K={k} {s}, seed 0: loss vs {axis}" for k, s in keys
        for axis in ("wall time (s)", "samples processed")])
    colors = {"asgd": "#d62728", "simuparallel": "#1f77b4", "batch": "#2ca02c",
              "sync": "#9467bd"}
    for row, (k, s) in enumerate(keys, start=1):
        seed0 = results[k][s]["seeds"][0]
        for method in seed0["curves"]:
            curve = seed0["curves"][method]
            for col, axis in enumerate(("time_s", "samples"), start=1):
                fig.add_trace(go.Scatter(x=curve[axis], y=curve["loss"], name=method,
                                         line={"color": colors.get(method, "#ff7f0e")},
                                         showlegend=row == 1 and col == 1), row=row, col=col)
                fig.add_hline(y=seed0["target_loss"], line_dash="dot", row=row, col=col)
        fig.update_yaxes(type="log", row=row)
    fig.update_layout(title="K-means by SGD: ASGD vs SimuParallelSGD vs BATCH vs sync "
                            "(dotted: target)", height=380 * len(keys))
    fig.write_html(path, include_plotlyjs=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="small run: 2 seeds, 2 s per method (about 3 minutes)")
    p.add_argument("--json", help="write the figures to this JSON file")
    p.add_argument("--html", help="plotly figure (default: next to --json, or results/)")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--seeds", type=int, default=None, help="seeds (default 5, quick 2)")
    p.add_argument("--ks", default="10,100", help="cluster counts, comma-separated")
    p.add_argument("--settings", default=",".join(SETTINGS))
    p.add_argument("--seconds", type=float, default=None, help="wall-clock budget per method")
    p.add_argument("--points", type=int, default=None)
    p.add_argument("--batch", type=int, default=256, help="global mini-batch")
    p.add_argument("--lr", type=float, default=0.05, help="SGD step size (all but batch)")
    p.add_argument("--send-every", default="4,1",
                   help="asgd: steps between sends; more values (1,4) add methods asgd-s4 ...")
    p.add_argument("--straggler", type=float, default=3.0, help="rank 1's slowdown factor")
    p.add_argument("--target", type=float, default=1.1, help="x Lloyd's loss")
    p.add_argument("--checkpoint", type=float, default=0.01, help="seconds between snapshots")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--k", type=int, default=10, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--setting", default="balanced", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return _worker(args)
    args.seeds = args.seeds or (2 if args.quick else 5)
    args.seconds = args.seconds or (2.0 if args.quick else 5.0)
    args.points = args.points or (50_000 if args.quick else 200_000)
    ks = [int(k) for k in args.ks.split(",")]
    methods = _methods(args)
    settings = args.settings.split(",")
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k in ks:
            refs = [_lloyd_target(k, seed, args) for seed in range(args.seeds)]
            for setting in settings:
                runs = []
                for seed in range(args.seeds):
                    curves = _launch(k, seed, setting, args, str(Path(tmp) / "out.json"))
                    target = refs[seed]["target_loss"]
                    runs.append({**refs[seed], "curves": curves,
                                 "time_to_target_s": {m: _first(curves[m], target, "time_s")
                                                      for m in methods},
                                 "samples_to_target": {m: _first(curves[m], target, "samples")
                                                       for m in methods}})
                    print(f"K={k} {setting} seed {seed}: " + ", ".join(
                        f"{m} {t if t is None else round(t, 2)}"
                        for m, t in runs[-1]["time_to_target_s"].items()), flush=True)
                results.setdefault(str(k), {})[setting] = {"seeds": runs}
    # Ratios to ASGD per seed (a method that never reached the target counts as the budget).
    print(f"\nK-means by SGD, {args.ranks} ranks, {args.points} points x 10 dims, "
          f"{args.seconds:g} s per method, {args.seeds} seeds, lr {args.lr}, global batch "
          f"{args.batch}, ASGD send_every {args.send_every}, straggler x{args.straggler:g}; "
          f"target {args.target:g} x Lloyd's loss; load {load_before[0]:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after")
    print(f"{'K':>4} {'setting':<10} {'method':<13} {'t->target s (median, range)':<30} "
          f"{'ratio to ASGD: median (range), mean +- se':<44} {'final/Lloyd':>11} {'CPU s':>6}")
    for k, by_setting in results.items():
        for setting, r in by_setting.items():
            summary: dict[str, Any] = {}
            for m in methods:
                times, ratios, bound = [], [], ""
                for run in r["seeds"]:
                    t, base = run["time_to_target_s"][m], run["time_to_target_s"]["asgd"]
                    times.append(args.seconds if t is None else max(t, args.checkpoint))
                    if t is None and base is None:
                        continue  # neither got there: this seed says nothing about the ratio
                    if t is None or base is None:
                        bound = ">" if t is None else "<"
                    t = args.seconds if t is None else max(t, args.checkpoint)
                    base = args.seconds if base is None else max(base, args.checkpoint)
                    ratios.append(t / base)
                ratios = ratios or [float("nan")]
                final = [run["curves"][m]["loss"][-1] / run["lloyd_loss"] for run in r["seeds"]]
                cpu = [run["curves"][m]["cpu_s"] for run in r["seeds"]]
                reached = sum(run["time_to_target_s"][m] is not None for run in r["seeds"])
                summary[m] = {"time_to_target_s": _summary(times), "ratio": _summary(ratios),
                              "reached": reached, "final_over_lloyd": _summary(final),
                              "cpu_s": _summary(cpu)}
                tt, ra = summary[m]["time_to_target_s"], summary[m]["ratio"]
                sign = bound if m != "asgd" else ""
                print(f"{k:>4} {setting:<10} {m:<13} "
                      f"{tt['median']:>6.2f} ({tt['min']:.2f}-{tt['max']:.2f}) "
                      f"{reached}/{len(r['seeds'])} reached{'':<4} "
                      f"{sign}{ra['median']:>5.2f} ({ra['min']:.2f}-{ra['max']:.2f}) "
                      f"mean {ra['mean']:.2f} +- {ra['se']:.2f} (n={ra['n']}){'':<1} "
                      f"{summary[m]['final_over_lloyd']['median']:>11.3f} "
                      f"{summary[m]['cpu_s']['median']:>6.1f}")
            r["summary"] = summary
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
            "load_before": load_before[0], "load_after": os.getloadavg()[0],
            "quick": args.quick,
            "settings": {"ranks": args.ranks, "seconds_per_method": args.seconds,
                         "points": args.points, "dims": 10, "batch": args.batch, "lr": args.lr,
                         "send_every": args.send_every, "straggler": args.straggler,
                         "target": f"{args.target} x Lloyd's loss from the same start",
                         "checkpoint_s": args.checkpoint, "seeds": args.seeds},
            "curves_every_s": args.checkpoint * max(1, round(0.05 / args.checkpoint)),
            "results": _thinned(results, max(1, round(0.05 / args.checkpoint))),
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
