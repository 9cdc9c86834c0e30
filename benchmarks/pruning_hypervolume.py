"""Pruning as a search dimension: the (val_accuracy, flops) hypervolume a study reaches with it
and without it, at the same total training time.

Simulated studies over measured runs. The runs are those of ``benchmarks/pruning_training.py``
(``benchmarks/results/pruning_training.json``; the real trainer, 2 ranks, sync, 5 seeds): for one
dataset, every configuration a study may pick has 5 measured outcomes (final validation accuracy,
final FLOPs per sample, training seconds), one per seed:

- ``dense``: the full model (the stack conv32/conv64/dense128);
- ``scratch@t``: the model whose every layer is ``1 - t`` as wide, trained from scratch (the
  benchmark's ``at-start`` variant: its units removed before the first batch);
- ``pruned@t``: the full model pruned during training to the same widths (``--pruned``: the
  variant ``l1`` unless told, steps at the start of epochs 2 and 3).

Two studies with the same sampler (Optuna's multi-objective TPE, the tpe a two-objective detol
study runs), the same seed and the same budget of training seconds:

- **without pruning**: one parameter, the width (``dense`` or ``scratch@t``);
- **with pruning searched**: the width and, for a narrower width, how it is reached (from scratch
  or pruned during training; in a study file: ``prune_start_epoch`` 1 against 2).

Each trial's outcome is one measured seed drawn at random (a trial is one noisy training run);
its training seconds are spent from the budget, and the study stops before the trial that would
overspend it. Hypervolume (Optuna's ``compute_hypervolume``) of the final (error, FLOPs / dense
FLOPs) points against the reference point (1.0, 1.1). Figures: per simulation seed the ratio
with/without; mean and standard error over seeds.

Command::

    python benchmarks/pruning_hypervolume.py [--dataset mnist1d] [--seeds 20] [--budget 6]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna._hypervolume import compute_hypervolume

HERE = Path(__file__).resolve().parent
MEASURED = HERE / "results" / "pruning_training.json"
REFERENCE = np.array([1.0, 1.1])  # (error, FLOPs / dense FLOPs): worse than every outcome


def table(results: dict[str, Any], dataset: str,
          pruned: str = "l1") -> dict[str, list[dict[str, float]]]:
    """``{configuration: [outcome per measured run]}`` for ``dataset`` (sync runs; ``pruned``:
    the variant that stands for pruning during training)."""
    out: dict[str, list[dict[str, float]]] = {}
    seen: set[tuple[Any, ...]] = set()  # a launch's dense runs stand in each variant's entry
    for key, entry in results.items():
        name, algorithm, variant = key.split("/")
        kind, _, target = variant.partition("@")
        if name != dataset or algorithm != "sync":
            continue
        label = {"at-start": "scratch", pruned: "pruned"}.get(kind)
        for row in entry["runs"]:
            config = "dense" if row["kind"] == "dense" else f"{label}@{target}"
            if (row["kind"] != "dense" and label is None) or (
                    config == "dense" and (row["seed"], row["train_time_s"]) in seen):
                continue
            seen.add((row["seed"], row["train_time_s"]))
            out.setdefault(config, []).append(
                {"error": 1.0 - row["val_accuracy"], "flops": row["flops"],
                 "seconds": row["train_time_s"]})
    if "dense" not in out:
        raise SystemExit(f"error: no measured sync runs for {dataset!r} in the measured JSON")
    return out


def study(runs: dict[str, list[dict[str, float]]], pruning: bool, budget_s: float,
          seed: int) -> tuple[np.ndarray, int]:
    """One simulated study: its final (error, FLOPs ratio) points and its trial count."""
    dense_flops = statistics.fmean(r["flops"] for r in runs["dense"])
    targets = sorted({c.split("@")[1] for c in runs if "@" in c})
    rng = np.random.default_rng(seed)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=4)
    s = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    spent, points = 0.0, []
    while True:
        trial = s.ask()
        width = trial.suggest_categorical("target", ["0", *targets])  # the width: 1 - target
        how = "scratch"
        if pruning and width != "0":
            how = trial.suggest_categorical("how", ["scratch", "pruned"])
        config = "dense" if width == "0" else f"{how}@{width}"
        outcome = runs[config][int(rng.integers(len(runs[config])))]
        if spent + outcome["seconds"] > budget_s:
            break
        spent += outcome["seconds"]
        point = (outcome["error"], outcome["flops"] / dense_flops)
        s.tell(trial, point)
        points.append(point)
    return np.array(points), len(points)


def hypervolume(points: np.ndarray) -> float:
    return float(compute_hypervolume(points, REFERENCE)) if len(points) else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist1d")
    parser.add_argument("--pruned", default="l1", help="the pruning variant searched")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budget", type=float, default=6.0,
                        help="training budget in dense trainings (their mean seconds)")
    parser.add_argument("--measured", type=Path, default=MEASURED,
                        help="pruning_training.py's JSON (the measured runs)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    runs = table(json.loads(args.measured.read_text())["results"], args.dataset, args.pruned)
    budget_s = args.budget * statistics.fmean(r["seconds"] for r in runs["dense"])
    rows = []
    for seed in range(args.seeds):
        without, n_without = study(runs, False, budget_s, seed)
        with_, n_with = study(runs, True, budget_s, seed)
        rows.append({"seed": seed, "hv_without": hypervolume(without),
                     "hv_with": hypervolume(with_), "trials_without": n_without,
                     "trials_with": n_with})
    ratios = [r["hv_with"] / r["hv_without"] for r in rows]
    se = statistics.stdev(ratios) / len(ratios) ** 0.5
    summary = {
        "dataset": args.dataset, "pruned_variant": args.pruned,
        "budget_dense_trainings": args.budget, "budget_s": budget_s,
        "reference_point": REFERENCE.tolist(), "simulation_seeds": args.seeds,
        "configurations": {k: {"runs": len(v),
                               "error": statistics.fmean(r["error"] for r in v),
                               "flops": statistics.fmean(r["flops"] for r in v),
                               "seconds": statistics.fmean(r["seconds"] for r in v)}
                           for k, v in sorted(runs.items())},
        "hv_ratio": {"mean": statistics.fmean(ratios), "se": se},
        "with_larger": sum(r > 1 for r in ratios), "rows": rows,
    }
    print(f"{args.dataset}: hypervolume with / without pruning {summary['hv_ratio']['mean']:.4f}"
          f" (se {se:.4f}; larger in {summary['with_larger']}/{args.seeds} seeds)")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
