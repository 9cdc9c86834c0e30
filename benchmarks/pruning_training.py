"""Pruning during training against the dense run: wall time, FLOPs and validation accuracy.

What is measured: the real trainer (``training.jobs._trainer.Trainer``, the loop every trial runs)
on
2 MPI ranks (``mpiexec -n 2``), for each dataset, algorithm and seed the same configuration dense
and with each ``[training] prune`` variant of ``VARIANTS`` (60 % of each layer's channels and
neurons removed by the last step), back to back in an order rotated by the seed so load drifts
cancel. The variants: ``l1`` (the first schedule: steps at epochs 2 and 3, linear, l1 with
sparsity 1e-4), ``l1-cubic`` and ``taylor-cubic`` (three steps at epochs 2-4, cubic: most of the
cut at epoch 2), and ``at-start`` (all of it before the first batch: the small model trained
from scratch, the control that tells capacity from the pruning mechanism); ``l1-late`` is ``l1``
two epochs later (steps at epochs 4 and 5); ``l1-rescale`` is ``l1`` with ``rescale = true``
(each layer's gradient times its lost fan-in), ``l1-rescale-keep-input`` also with
``input_layer = false``, ``at-start-rescale`` the control with ``rescale``. Figures per seed,
each variant against the dense run of the same seed: the ratio of the trainer's own training seconds
(``train_time_s``, evaluations included, launch excluded), the ratio of the final per-sample
FLOPs, and the gap in final validation accuracy (dense minus pruned, in points); over seeds:
mean and standard error.

Models (stack genome family): Fashion-MNIST (a 12,000-image training subset of Debian's
``dataset-fashion-mnist``, 28x28) with conv32-pool, conv64-pool, dense128; mnist1d (4,000
signals of 40) with 1-D conv32-pool, conv64-pool, dense128.

Command::

    python benchmarks/pruning_training.py [--quick] [--json PATH] [--seeds N] [--merge]
        [--cases mnist1d,fashion-mnist] [--algorithms sync,asgd] [--variants l1,...]
        [--target T] [--fashion-train N]

The figures of ``results/pruning_training.json`` (2026-11-26) are six launches, each ``--seeds 5
--algorithms sync``: mnist1d with ``--variants l1,l1-cubic,taylor-cubic,at-start``, with
``l1,at-start`` at ``--target 0.3`` and at ``0.8``, with ``l1-late``; Fashion-MNIST
(``--fashion-train 2000``) with ``l1`` and with ``taylor-cubic,at-start``. ``--merge`` puts
launches into one file (the per-launch load is in each entry).
``results/pruning_training_remedies.json`` (2026-11-26) is five launches: mnist1d ``--seeds 10
--algorithms sync --variants l1,l1-rescale,l1-rescale-keep-input``, and ``--seeds 20 --variants
l1-rescale-keep-input`` (key suffix " (20 seeds)"); mnist1d ``--seeds 5
--algorithms asgd`` with ``--variants l1,l1-rescale-keep-input`` and with ``at-start,l1-rescale``;
Fashion-MNIST ``--fashion-train 2000 --seeds 3 --algorithms sync --variants l1,l1-rescale``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
FASHION_TRAIN = int(os.environ.get("DETOL_BENCH_FASHION_TRAIN", "12000"))


def _layer(kind: str, width: int, **conv: Any) -> dict[str, Any]:
    out = {"kind": kind, "width": width, "activation": "relu", "dropout": 0.0}
    return {**out, **({"kernel": 3, "pool": True} if kind == "conv" else {})}


STACK = {"family": "stack", "layers": [_layer("conv", 32), _layer("conv", 64),
                                       _layer("dense", 128)]}
TARGET = 0.6  # of each layer's units, by the last step (--target)
VARIANTS = {
    "l1": {"target": TARGET, "start_epoch": 2, "end_epoch": 3, "steps": 2, "sparsity": 1e-4},
    "l1-cubic": {"target": TARGET, "start_epoch": 2, "end_epoch": 4, "steps": 3,
                 "schedule": "cubic", "sparsity": 1e-4},
    "taylor-cubic": {"target": TARGET, "start_epoch": 2, "end_epoch": 4, "steps": 3,
                     "schedule": "cubic", "criterion": "taylor"},
    "at-start": {"target": TARGET, "start_epoch": 1, "end_epoch": 1, "steps": 1},
    "l1-late": {"target": TARGET, "start_epoch": 4, "end_epoch": 5, "steps": 2, "sparsity": 1e-4},
    # The remedies (docs/training-core.md, "What loses the accuracy"): each layer's gradient
    # rescaled by its lost fan-in, and the layer reading the input kept whole.
    "l1-rescale": {"target": TARGET, "start_epoch": 2, "end_epoch": 3, "steps": 2,
                   "sparsity": 1e-4, "rescale": True},
    "l1-rescale-keep-input": {"target": TARGET, "start_epoch": 2, "end_epoch": 3, "steps": 2,
                              "sparsity": 1e-4, "rescale": True, "input_layer": False},
    "at-start-rescale": {"target": TARGET, "start_epoch": 1, "end_epoch": 1, "steps": 1,
                         "rescale": True},
}
CASES = {  # the cheap one first: a long run under load keeps what finished
    "mnist1d": {"dataset": "mnist1d", "lr": 0.05},
    "fashion-mnist": {"dataset": "pruning_training:fashion_subset", "lr": 0.05},
}


def fashion_subset(val_fraction: float) -> Any:
    """Fashion-MNIST with a training subset (12,000 images unless ``--fashion-train``; the
    same on every rank and seed)."""
    from training import Dataset, load_dataset

    ds = load_dataset("fashion-mnist", val_fraction)
    keep = np.random.default_rng(0).permutation(len(ds.x_train))[:FASHION_TRAIN]
    return Dataset(ds.x_train[keep], ds.y_train[keep], ds.x_val[:3000], ds.y_val[:3000],
                   ds.x_test[:1000], ds.y_test[:1000], ds.n_classes)


def rank_job(spec_path: str, out: str) -> None:
    """Inside ``mpiexec``: every run of the spec, dense and pruned, on COMM_WORLD."""
    from mpi4py import MPI

    from training import TrainConfig
    from training.jobs import Trainer

    comm = MPI.COMM_WORLD
    spec = json.loads(Path(spec_path).read_text())
    rows = []
    kinds = ["dense", *spec["variants"]]
    for seed in spec["seeds"]:
        shift = seed % len(kinds)
        for kind in kinds[shift:] + kinds[:shift]:
            config = TrainConfig(**spec["config"], seed=seed, ranks=comm.size,
                                 prune=spec["variants"].get(kind))
            result = Trainer(config, comm).train()
            rows.append({"seed": seed, "kind": kind, "train_time_s": result.train_time_s,
                         "flops": result.flops, "n_params": result.n_params,
                         "val_accuracy": result.values["val_accuracy"],
                         "flops_per_epoch": [r["flops"] for r in result.history]})
            if comm.rank == 0:  # after every run: a job stopped under load keeps what finished
                Path(out + ".tmp").write_text(json.dumps(rows))
                Path(out + ".tmp").replace(out)


def _launch(config: dict[str, Any], seeds: list[int], variants: dict[str, Any], tmp: Path,
            tag: str) -> list[dict]:
    from training.launch import launcher_argv

    spec, out = tmp / f"{tag}-spec.json", tmp / f"{tag}-out.json"
    spec.write_text(json.dumps({"config": config, "seeds": seeds, "variants": variants}))
    argv = launcher_argv("mpiexec -n {ranks}", 2) + [
        sys.executable, str(Path(__file__).resolve()), "--rank-job", str(spec), str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600, env=env)
    if proc.returncode != 0:
        raise RuntimeError(proc.stdout[-3000:] + proc.stderr[-3000:])
    return list(json.loads(out.read_text()))


def _summary(xs: list[float]) -> dict[str, float]:
    se = statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else float("nan")
    return {"mean": statistics.fmean(xs), "se": se, "values": xs}


def _compare(rows: list[dict], variant: str) -> dict[str, Any]:
    by = {(r["seed"], r["kind"]): r for r in rows}
    seeds = sorted({r["seed"] for r in rows})
    d = [by[(s, "dense")] for s in seeds]
    p = [by[(s, variant)] for s in seeds]
    return {
        "wall_ratio": _summary(
            [b["train_time_s"] / a["train_time_s"] for a, b in zip(d, p, strict=True)]),
        "flops_ratio": _summary([b["flops"] / a["flops"] for a, b in zip(d, p, strict=True)]),
        "params_ratio": _summary(
            [b["n_params"] / a["n_params"] for a, b in zip(d, p, strict=True)]),
        "accuracy_gap_points": _summary(
            [100 * (a["val_accuracy"] - b["val_accuracy"]) for a, b in zip(d, p, strict=True)]),
        "dense_accuracy": _summary([a["val_accuracy"] for a in d]),
        "pruned_accuracy": _summary([b["val_accuracy"] for b in p]),
        "dense_train_time_s": _summary([a["train_time_s"] for a in d]),
        "pruned_train_time_s": _summary([b["train_time_s"] for b in p]),
        "runs": [r for r in rows if r["kind"] in ("dense", variant)],
    }


def run(quick: bool, seeds: dict[str, int], algorithms: list[str], variants: dict[str, Any],
        save: Any = None) -> dict[str, Any]:
    """Every case; ``save(figures so far)`` after each one (a long run keeps what it has)."""
    epochs = 4 if quick else 8
    cases = {k: v for k, v in CASES.items() if k == "mnist1d"} if quick else CASES
    variants = {k: v for k, v in variants.items() if v["end_epoch"] <= epochs}
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="detol-prune-bench-") as tmp:
        for name, case in cases.items():
            for algorithm in algorithms:
                config = {**case, "epochs": epochs, "genome": STACK, "batch_size": 64,
                          "algorithm": algorithm, "send_every": 4}
                load = [os.getloadavg()[0]]
                rows = _launch(config, list(range(seeds[name])), variants, Path(tmp),
                               f"{name}-{algorithm}")
                load.append(os.getloadavg()[0])
                for variant, table in variants.items():
                    key = f"{name}/{algorithm}/{variant}@{table['target']}"
                    c = results[key] = {**_compare(rows, variant), "prune": table,
                                        "loadavg_1min_before_after": load, "config": config}
                    if name == "fashion-mnist":
                        c["train_images"] = int(os.environ.get("DETOL_BENCH_FASHION_TRAIN",
                                                               FASHION_TRAIN))
                    print(f"{name:14s} {algorithm:5s} {variant:13s} wall "
                          f"{c['wall_ratio']['mean']:.3f}x (se {c['wall_ratio']['se']:.3f})  "
                          f"flops {c['flops_ratio']['mean']:.3f}x  accuracy gap "
                          f"{c['accuracy_gap_points']['mean']:+.2f} points (se "
                          f"{c['accuracy_gap_points']['se']:.2f}; dense "
                          f"{100 * c['dense_accuracy']['mean']:.2f}%)", flush=True)
                if save is not None:
                    save(_figures(epochs, seeds, variants, results, load_before))
    return _figures(epochs, seeds, variants, results, load_before)


def _figures(epochs: int, seeds: dict[str, int], variants: dict[str, Any],
             results: dict[str, Any], load_before: tuple[float, ...]) -> dict[str, Any]:
    return {"epochs": epochs, "seeds": seeds, "ranks": 2, "variants": variants, "genome": STACK,
            "results": results,
            "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
            "goals": {"wall_ratio": "<= 0.60", "flops_ratio": "<= 0.35",
                      "accuracy_gap_points": "<= 0.3"}}


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--rank-job":
        rank_job(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--fashion-seeds", type=int, default=None,
                        help="seeds for Fashion-MNIST (default: --seeds); the slow one")
    parser.add_argument("--algorithms", default="sync,asgd")
    parser.add_argument("--target", type=float, default=None, help="prune target (0.6)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="prune variants to run")
    parser.add_argument("--merge", action="store_true",
                        help="keep the results of other cases/variants already in --json")
    parser.add_argument("--cases", default=",".join(CASES), help="datasets to run")
    parser.add_argument("--fashion-train", type=int, default=None,
                        help="Fashion-MNIST training images (default 12,000; fewer when loaded)")
    args = parser.parse_args()
    variants = {v: VARIANTS[v] for v in args.variants.split(",")}
    if args.target is not None:
        variants = {k: {**v, "target": args.target} for k, v in variants.items()}
    if args.fashion_train:
        os.environ["DETOL_BENCH_FASHION_TRAIN"] = str(args.fashion_train)  # for the rank jobs
    n = args.seeds or (2 if args.quick else 5)
    seeds = {"mnist1d": n, "fashion-mnist": args.fashion_seeds or n}
    from _common import machine, now_iso  # benchmarks/_common/ (the script directory)

    def save(figures: dict[str, Any]) -> None:
        if args.json:
            if args.merge and args.json.exists():
                old = json.loads(args.json.read_text()).get("results", {})
                figures = {**figures, "results": {**old, **figures["results"]}}
            figures = {"date": now_iso(), "machine": machine("torch", "mpi4py"),
                       "measured_under_load": True, **figures,
                       "fashion_train_subset": args.fashion_train or 12_000}
            args.json.parent.mkdir(parents=True, exist_ok=True)
            tmp = args.json.with_suffix(".tmp")
            tmp.write_text(json.dumps(figures, indent=1))
            tmp.replace(args.json)

    for name in list(CASES):
        if name not in args.cases.split(","):
            del CASES[name]
    save(run(args.quick, seeds, args.algorithms.split(","), variants, save))


if __name__ == "__main__":
    main()
