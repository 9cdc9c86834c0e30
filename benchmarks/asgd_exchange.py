"""What one ASGD exchange costs: CPU per step of ASGD against SimuParallelSGD, same loop.

Subject: ``asgd`` (the trainer's loop: ``zero_grad``, backward, ``before_step``, ``step``,
``after_step``) at ``send_every`` 1, 2, 4 and 8. Yardstick: ``simuparallel`` (the same loop,
nothing exchanged until the end). Each method runs a fixed number of steps on 2 ranks in one
MPI job, in alternating blocks (A B A B ...) so drift and other load hit both alike; the CPU
time (``time.process_time``, this rank only) and wall time of each block are measured on every
rank. Two models: K-means K=100 in 10 dimensions (1,000 parameters, the paper's experiment)
and the digits MLP with hidden 128 (26,122 parameters).

Reported per setting: CPU us per step of each method, ``exchange_cpu_us`` = the median over
blocks and ranks of ASGD's block minus the SimuParallelSGD block of the same round and rank
(what the exchange adds to a step; paired, so drift between rounds cancels; +- its standard
error), and ``steps_at_equal_cpu`` = SimuParallelSGD's CPU per step / (that + the exchange)
(1.0: the exchange is free; the review behind issue 14 measured 0.72 at ``send_every=1``
before the exchange was made cheap). Medians over blocks and ranks.

``--tree DIR`` imports ``training`` from another checkout (to measure an older version of the
exchange in the same run); the MPI thread level is the one that checkout's launcher sets
unless ``--thread-level`` is given.

Command::

    python benchmarks/asgd_exchange.py [--quick] [--json PATH] [--tree DIR] [--thread-level L]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SEND_EVERY = (1, 2, 4, 8)


def _make(name: str, model: Any, comm: Any, **options: Any) -> Any:
    try:
        from training.algorithms import make_algorithm
    except ImportError:  # a checkout from before issue 46's move (--tree): its flat module
        make_algorithm = importlib.import_module("training._registry").make_algorithm
    return make_algorithm(name, model, comm, **options)


def _worker(args: argparse.Namespace) -> int:
    import numpy as np
    import torch
    from mpi4py import MPI

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    if args.model == "kmeans":
        from _common.kmeans import KMeans, kmeans_data

        x, init = kmeans_data(50_000, k=100, seed=0)
        data = torch.from_numpy(x[comm.rank :: comm.size])

        def build() -> Any:
            return KMeans(init)

        def loss(model: Any, idx: Any) -> Any:
            return model(data[idx]).mean()

        size, batch = len(data), 128
    else:
        from training.data import load_dataset
        from training.models import build_mlp

        d = load_dataset("digits", 0.2)
        xs, ys = torch.from_numpy(d.x_train), torch.from_numpy(d.y_train)

        def build() -> Any:
            torch.manual_seed(0)
            return build_mlp(d.input_dim, d.n_classes, hidden=128, layers=2,
                             activation="relu", dropout=0.0)

        def loss(model: Any, idx: Any) -> Any:
            return torch.nn.functional.cross_entropy(model(xs[idx]), ys[idx])

        size, batch = len(xs), 32
    settings = [("simuparallel", 1)] + [("asgd", s) for s in SEND_EVERY]
    runs = {}
    for name, every in settings:
        model = build()
        algo = _make(name, model, comm, lr=0.01, send_every=every, seed=0)
        algo.broadcast_parameters(0)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        runs[(name, every)] = (model, algo, opt)
    rng = np.random.default_rng([1, comm.rank])
    out: dict[str, Any] = {f"{n}/{e}": {"cpu_us": [], "wall_us": []} for n, e in settings}
    for block in range(args.blocks):
        order = settings if block % 2 == 0 else settings[::-1]
        for name, every in order:
            model, algo, opt = runs[(name, every)]
            comm.Barrier()  # waits for all ranks
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(args.steps):
                idx = torch.from_numpy(rng.integers(0, size, batch))
                algo.zero_grad()
                loss(model, idx).backward()
                if algo.before_step(True):
                    opt.step()
                    algo.after_step()
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            out[f"{name}/{every}"]["cpu_us"].append(1e6 * cpu / args.steps)
            out[f"{name}/{every}"]["wall_us"].append(1e6 * wall / args.steps)
    for name, every in settings:
        _, algo, _ = runs[(name, every)]
        algo.finish()
        out[f"{name}/{every}"]["counters"] = algo.counters()
    gathered = comm.gather(out, root=0)  # waits for all ranks
    if comm.rank == 0:
        Path(args.out).write_text(json.dumps(gathered))
    return 0


def _run(model: str, args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    out = str(Path(tmp) / f"{model}.json")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    tree = Path(args.tree).resolve() if args.tree else ROOT
    env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")])
    sys.path.insert(0, str(tree))
    from training.launch import SINGLE_NODE_ENV, job_env, launcher_argv

    try:
        job = job_env(1, False, SINGLE_NODE_ENV)
    except TypeError:  # an older signature
        job = {**env, **SINGLE_NODE_ENV}
    if args.thread_level:
        job["MPI4PY_RC_THREAD_LEVEL"] = args.thread_level
    job["PYTHONPATH"] = env["PYTHONPATH"]
    argv = launcher_argv("mpiexec -n {ranks}", 2) + [
        sys.executable, __file__, "--worker", "--model", model, "--out", out,
        "--steps", str(args.steps), "--blocks", str(args.blocks)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=job, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{model}: MPI job failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    ranks = json.loads(Path(out).read_text())
    import numpy as np

    table: dict[str, Any] = {"thread_level": job.get("MPI4PY_RC_THREAD_LEVEL", "multiple")}
    base = float(np.median([v for r in ranks for v in r["simuparallel/1"]["cpu_us"]]))
    table["simuparallel_cpu_us"] = base
    for every in SEND_EVERY:
        key = f"asgd/{every}"
        cpu = float(np.median([v for r in ranks for v in r[key]["cpu_us"]]))
        wall = float(np.median([v for r in ranks for v in r[key]["wall_us"]]))
        counters: dict[str, int] = {}
        for r in ranks:
            for k, v in r[key]["counters"].items():
                counters[k] = counters.get(k, 0) + int(v)
        # Paired: each block's ASGD CPU minus the SimuParallelSGD block of the same rank and
        # round (run next to it), so drift of the machine between rounds cancels.
        paired = [a - b for r in ranks
                  for a, b in zip(r[key]["cpu_us"], r["simuparallel/1"]["cpu_us"], strict=True)]
        exchange = float(np.median(paired))
        table[f"send_every={every}"] = {
            "asgd_cpu_us": cpu, "asgd_wall_us": wall, "exchange_cpu_us": exchange,
            "exchange_cpu_us_se": float(np.std(paired, ddof=1) / np.sqrt(len(paired))),
            "steps_at_equal_cpu": base / (base + exchange), "counters": counters}
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer steps (about 30 s)")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--tree", help="import training from this checkout instead")
    p.add_argument("--thread-level", help="MPI4PY_RC_THREAD_LEVEL for the job")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", default="kmeans", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--blocks", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return _worker(args)
    args.steps = args.steps or (200 if args.quick else 500)
    args.blocks = args.blocks or (4 if args.quick else 10)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        results = {m: _run(m, args, tmp) for m in ("kmeans", "mlp")}
    print(f"ASGD exchange cost, 2 ranks, {args.steps} steps x {args.blocks} blocks per method; "
          f"load {load[0]:.2f} before, {os.getloadavg()[0]:.2f} after; tree "
          f"{args.tree or ROOT}")
    for model, table in results.items():
        print(f"{model}: SimuParallelSGD {table['simuparallel_cpu_us']:.0f} us CPU/step; "
              f"MPI thread level {table['thread_level']}")
        for every in SEND_EVERY:
            r = table[f"send_every={every}"]
            print(f"  send_every={every}: ASGD {r['asgd_cpu_us']:.0f} us CPU/step "
                  f"({r['asgd_wall_us']:.0f} wall), exchange {r['exchange_cpu_us']:+.0f} "
                  f"+- {r['exchange_cpu_us_se']:.0f} us, "
                  f"steps at equal CPU {r['steps_at_equal_cpu']:.2f}x  {r['counters']}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({
            "benchmark": "asgd_exchange", "tree": str(args.tree or ROOT),
            "load_before": load[0], "load_after": os.getloadavg()[0],
            "steps": args.steps, "blocks": args.blocks, "models": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
