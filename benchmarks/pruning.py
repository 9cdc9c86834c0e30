"""Early stopping end to end: wall time, rank-seconds and epochs each pruner saves, accuracy lost.

What is measured: the same study -- same search space, TPE strategy, epochs, trials and
concurrency -- is run once per pruner and per seed through the real path, ``search run STUDY
--storage JOURNAL --no-progress`` as a subprocess (a Dask ``LocalCluster``, a warm pool of MPI
ranks per worker, rank 0 reporting each epoch to an Optuna journal file and broadcasting the
pruner's decision, checkpoints in the study's artifact store where the pruner pauses):

* ``none`` -- the yardstick: every trial trains all its epochs;
* ``median`` -- Optuna's MedianPruner (full: startup_trials 5, warmup_epochs 2);
* ``top-half`` -- after epoch 1 stop every trial not in the top half, never look again
  (Egele et al. 2024's one-epoch rule; full: startup_trials 5): a pruner that cannot beat it
  is not worth its options;
* ``asha`` -- Optuna's successive halving, stop form (min_epochs 1, reduction_factor 3);
* ``asha-promote`` -- the same rungs in the promotion form of Li et al. (``promote = true``):
  a trial outside its rung's top third pauses with a checkpoint and resumes when promoted.

Full run: mnist1d, a ``stack`` genome (0-2 conv layers: channels 16/32, kernels 3/5/7, pooling or
not; dense widths 64/128, relu/gelu) plus ``lr`` (log 3e-4..1e-2), adam, batch 100, 1 rank per
trial, 12 epochs, TPE with 8 startup trials, 24 trials, 2 at a time, seeds 0..4 (the strategy's
seed; ``--seeds N``). ``--quick``: digits, at most 1 conv layer, 4 epochs, 6 trials, 1 seed.

Each study is read back with plain Optuna (``training.contract.open_storage``): total epochs
(``epochs_run`` over all trials, a promoted continuation counting only its own), total
rank-seconds (``rank_seconds``), the study's wall time, the best validation accuracy among
complete trials and the ``test_accuracy`` of that trial. Per pruner and seed, against ``none``
of the same seed: ``wall_ratio``, ``rank_seconds_ratio``, ``epochs_ratio`` (its total / the
unpruned total) and ``accuracy_gap`` (unpruned best - its best, in points; negative: the pruned
run found better); then the mean and standard error over seeds. The issue's goal: mean
``wall_ratio <= 0.5`` at mean ``accuracy_gap <= 0.5``. After its startup trials TPE learns from
what the pruner did, so each pruned study searches other candidates than the unpruned one: the
seeds average that out; ``benchmarks/pruning_replay.py`` isolates the pruner from the sampler.

Command::

    python benchmarks/pruning.py [--quick] [--json PATH] [--trials N] [--seeds N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
from _common import machine, now_iso  # benchmarks/_common/ (the script directory)

from training.contract import open_storage

PRUNERS = ("none", "median", "top-half", "asha", "asha-promote")
GOAL_GAP_POINTS = 0.5
GOAL_WALL_RATIO = 0.5
STUDY_TIMEOUT_S = 3600


def settings(quick: bool, trials: int | None) -> dict[str, Any]:
    """Everything the studies share, plus each pruner's options (quick: a CI-sized copy)."""
    full: dict[str, Any] = {
        "dataset": "mnist1d",
        "epochs": 12,
        "trials": trials or 24,
        "concurrency": 2,
        "ranks": 1,
        "batch_size": 100,
        "optimizer": "adam",
        "strategy": {"name": "tpe", "seed": 0, "startup_trials": 8},
        "genome": {
            "family": "stack",
            "min_conv_layers": 0,
            "max_conv_layers": 2,
            "channels": [16, 32],
            "kernels": [3, 5, 7],
            "pools": [False, True],
            "widths": [64, 128],
            "activations": ["relu", "gelu"],
        },
        "lr": {"type": "float", "low": 3e-4, "high": 1e-2, "log": True},
        "pruners": {
            "none": {},
            "median": {"startup_trials": 5, "warmup_epochs": 2},
            "asha": {"min_epochs": 1, "reduction_factor": 3},
            "asha-promote": {"name": "asha", "min_epochs": 1, "reduction_factor": 3,
                             "promote": True},
            "top-half": {"startup_trials": 5},
        },
    }
    if not quick:
        return full
    return {
        **full,
        "dataset": "digits",
        "epochs": 4,
        "trials": trials or 6,
        "strategy": {**full["strategy"], "startup_trials": 3},
        "genome": {**full["genome"], "max_conv_layers": 1},
        "pruners": {
            **full["pruners"],
            "median": {"startup_trials": 2, "warmup_epochs": 1},
            "top-half": {"startup_trials": 2},
        },
    }


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return repr(value)


def study_file(name: str, pruner: str, s: dict[str, Any]) -> str:
    lines = [
        f"# benchmarks/pruning.py: pruner {pruner!r}",
        f"name = {_toml(name)}",
        'metric = "val_accuracy"',
        "",
        "[budget]",
        f"trials = {s['trials']}",
        f"concurrency = {s['concurrency']}",
        "trial_timeout = 600",
        "",
        "[strategy]",
        *(f"{k} = {_toml(v)}" for k, v in s["strategy"].items()),
        "",
        "[pruner]",
        f"name = {_toml(s['pruners'][pruner].get('name', pruner))}",
        *(f"{k} = {_toml(v)}" for k, v in s["pruners"][pruner].items() if k != "name"),
        "",
        "[training]",
        f"dataset = {_toml(s['dataset'])}",
        f"epochs = {s['epochs']}",
        f"batch_size = {s['batch_size']}",
        f"optimizer = {_toml(s['optimizer'])}",
        f"ranks = {s['ranks']}",
        "",
        "[launcher]",
        "warm = true",
        "",
        "[space]",
        f"lr = {_toml(s['lr'])}",
        "",
        "[space.genome]",
        *(f"{k} = {_toml(v)}" for k, v in s["genome"].items()),
        "",
    ]
    return "\n".join(lines)


def _search_program() -> str:
    here = os.path.dirname(sys.executable)
    found = shutil.which("search", path=os.pathsep.join([here, os.environ.get("PATH", "")]))
    if found is None:
        raise SystemExit("the 'search' console script is not installed (pip install -e .)")
    return found


def run_study(path: Path, journal: Path) -> tuple[int, float, str]:
    """``search run`` as a subprocess; returns its exit code, wall time and output."""
    argv = [_search_program(), "run", str(path), "--storage", str(journal), "--no-progress"]
    started = time.perf_counter()
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=STUDY_TIMEOUT_S, cwd=path.parent
    )
    wall = time.perf_counter() - started
    return proc.returncode, wall, proc.stdout + proc.stderr


def summarise(name: str, journal: Path) -> dict[str, Any]:
    """Read the study back with plain Optuna: budget spent, best accuracy, trial states."""
    study = optuna.load_study(study_name=name, storage=open_storage(str(journal)))
    trials = study.get_trials(deepcopy=False)
    states = optuna.trial.TrialState
    complete = [t for t in trials if t.state == states.COMPLETE]
    scored = [(t.values[0], -t.number, t) for t in complete]
    best = max(scored, key=lambda x: x[:2])[2] if scored else None  # first of equal values
    starts = [t.datetime_start for t in trials if t.datetime_start is not None]
    ends = [t.datetime_complete for t in trials if t.datetime_complete is not None]
    return {
        # The study's own span: first trial started to last trial ended (the command's wall time
        # adds Python, the Dask cluster and the warm pool starting and stopping, ~the same for all).
        "span_s": (max(ends) - min(starts)).total_seconds() if starts and ends else None,
        "epochs": int(sum(t.user_attrs.get("epochs_run", 0) for t in trials)),
        "rank_seconds": float(sum(t.user_attrs.get("rank_seconds", 0.0) for t in trials)),
        "train_rank_seconds": float(
            sum(
                t.user_attrs.get("train_time_s", 0.0) * t.user_attrs.get("ranks", 1) for t in trials
            )
        ),
        "launch_overhead_s": float(sum(t.user_attrs.get("launch_overhead_s", 0.0) for t in trials)),
        "best_val": None if best is None else float(best.values[0]),
        "best_test": None if best is None else best.user_attrs.get("test_accuracy"),
        "best_trial": None if best is None else best.number,
        "best_genome": None if best is None else best.user_attrs.get("genome_summary"),
        "best_lr": None if best is None else best.params.get("lr"),
        "complete": len(complete),
        "pruned": sum(t.state == states.PRUNED for t in trials),
        "failed": sum(t.state == states.FAIL for t in trials),
        "epochs_per_trial": [t.user_attrs.get("epochs_run") for t in trials],
    }


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def _gap(base: float | None, other: float | None) -> float | None:
    if base is None or other is None:
        return None
    return (base - other) * 100.0


def compare(base: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    return {
        "wall_ratio": _ratio(r["wall_s"], base["wall_s"]),
        "span_ratio": (None if r.get("span_s") is None or not base.get("span_s")
                       else r["span_s"] / base["span_s"]),
        "epochs_ratio": _ratio(r["epochs"], base["epochs"]),
        "rank_seconds_ratio": _ratio(r["rank_seconds"], base["rank_seconds"]),
        "train_rank_seconds_ratio": _ratio(r["train_rank_seconds"], base["train_rank_seconds"]),
        "accuracy_gap": _gap(base["best_val"], r["best_val"]),
        "test_accuracy_gap": _gap(base["best_test"], r["best_test"]),
    }


def _mean_se(xs: list[float | None]) -> dict[str, float | None]:
    ys = [x for x in xs if x is not None]
    if not ys:
        return {"mean": None, "se": None, "n": 0}
    se = statistics.stdev(ys) / len(ys) ** 0.5 if len(ys) > 1 else None
    return {"mean": statistics.fmean(ys), "se": se, "n": len(ys)}


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _ms(stat: dict[str, Any], fmt: str) -> str:
    if stat["mean"] is None:
        return "-"
    se = "" if stat["se"] is None else f"+-{format(stat['se'], fmt.lstrip('+'))}"
    return f"{format(stat['mean'], fmt)}{se}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small run for CI (under 2 minutes)")
    p.add_argument("--json", help="write the figures to this JSON file")
    p.add_argument("--trials", type=int, help="trials per study (default: 24, --quick 6)")
    p.add_argument("--seeds", type=int, help="strategy seeds per pruner (default 5, --quick 1)")
    p.add_argument("--pruners", default=",".join(PRUNERS), help="comma-separated subset")
    p.add_argument("--keep", help="write the study files and journals here instead of a temp dir")
    args = p.parse_args(argv)
    s = settings(args.quick, args.trials)
    seeds = args.seeds or (1 if args.quick else 5)
    chosen = [name for name in args.pruners.split(",") if name]
    unknown = sorted(set(chosen) - set(PRUNERS))
    if unknown or "none" not in chosen:
        raise SystemExit(f"--pruners: known {PRUNERS}, 'none' (the yardstick) included")
    tag = "quick" if args.quick else "full"
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in chosen}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="detol-pruning-") as tmp:
        where = Path(args.keep) if args.keep else Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        for seed in range(seeds):
            s_seed = {**s, "strategy": {**s["strategy"], "seed": seed}}
            for pruner in chosen:
                name = f"pruning-{tag}-{pruner}-s{seed}"
                path = where / f"{name}.toml"
                journal = where / f"{name}.journal"
                if journal.exists():
                    journal.unlink()  # a fresh study each time, never a resumed one
                path.write_text(study_file(name, pruner, s_seed))
                load = os.getloadavg()[0]
                rc, wall, output = run_study(path, journal)
                if rc not in (0, 1):
                    raise SystemExit(f"search run {path.name} exited with {rc}:\n{output[-4000:]}")
                r = summarise(name, journal)
                r.update(seed=seed, wall_s=wall, exit_code=rc, load_before=load)
                runs[pruner].append(r)
                print(f"seed {seed} {pruner:<12} {wall:7.1f} s  {r['epochs']:>4} epochs  best "
                      f"{_f(r['best_val'], '.4f')}  {r['complete']} complete, {r['pruned']} "
                      f"pruned, {r['failed']} failed (load {load:.1f})", flush=True)
    total = time.perf_counter() - started

    per_seed = {
        name: [compare(runs["none"][i], r) for i, r in enumerate(runs[name])]
        for name in chosen if name != "none"
    }
    summary = {
        name: {key: _mean_se([c[key] for c in rows]) for key in rows[0]}
        for name, rows in per_seed.items()
    }
    for stats in summary.values():
        wall, gap = stats["wall_ratio"]["mean"], stats["accuracy_gap"]["mean"]
        stats["goal_met"] = (wall is not None and gap is not None
                             and wall <= GOAL_WALL_RATIO and gap <= GOAL_GAP_POINTS)
    base = runs["none"]
    print()
    print(
        f"Pruning end to end, {s['dataset']} stack genome + lr, TPE, {seeds} seed(s), "
        f"{s['trials']} trials x {s['epochs']} epochs, {s['concurrency']} at a time, "
        f"{s['ranks']} rank(s) per trial, warm pool; {total / 60:.1f} min in all"
    )
    print(f"no pruning (yardstick): wall {statistics.fmean(r['wall_s'] for r in base):.1f} s, "
          f"{statistics.fmean(r['epochs'] for r in base):.0f} epochs, best val "
          f"{statistics.fmean(r['best_val'] or 0 for r in base):.4f} (means over seeds)")
    head = (f"{'pruner':<13} {'wall ratio':>12} {'span ratio':>12} {'rank-s ratio':>13} "
            f"{'epochs ratio':>13} "
            f"{'gap pts':>12} {'test gap':>12}  goal")
    print(head)
    print("-" * len(head))
    for name, st in summary.items():
        print(f"{name:<13} {_ms(st['wall_ratio'], '.2f'):>12} {_ms(st['span_ratio'], '.2f'):>12} "
              f"{_ms(st['rank_seconds_ratio'], '.2f'):>13} {_ms(st['epochs_ratio'], '.2f'):>13} "
              f"{_ms(st['accuracy_gap'], '+.2f'):>12} {_ms(st['test_accuracy_gap'], '+.2f'):>12}  "
              f"{'met' if st['goal_met'] else 'not met'}")
    print(f"mean +- standard error over seeds; goal: wall ratio <= {GOAL_WALL_RATIO} at accuracy "
          f"gap <= {GOAL_GAP_POINTS} points (gap = unpruned best - pruned best, validation)")

    if args.json:
        from mpi4py import MPI

        doc = {
            "benchmark": "pruning",
            "date": now_iso(),
            "machine": machine(
                "torch", "optuna", "dask", "distributed", "mpi4py", "mpich",
                mpi=MPI.Get_library_version().splitlines()[0],
            ),
            "quick": args.quick,
            "settings": {
                **s,
                "seeds": seeds,
                "goal": {"accuracy_gap_points_max": GOAL_GAP_POINTS,
                         "wall_ratio_max": GOAL_WALL_RATIO},
                "command": "search run STUDY --storage JOURNAL --no-progress",
                "total_wall_s": total,
            },
            "runs": runs,
            "per_seed": per_seed,
            "summary": summary,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
