"""Early stopping across MPI ranks: epochs and rank-seconds saved by each pruner, accuracy lost.

What is measured: the same study -- same search space, TPE strategy and seed, epochs, trials and
concurrency -- is run once per pruner through the real path, ``search run STUDY --storage
JOURNAL --no-progress`` as a subprocess (a Dask ``LocalCluster``, every trial an ``mpiexec`` job,
rank 0 reporting each epoch to an Optuna journal file and broadcasting the pruner's decision):

* ``none`` -- the yardstick: every trial trains all its epochs;
* ``median`` -- Optuna's MedianPruner (full: startup_trials 5, warmup_epochs 2);
* ``asha`` -- successive halving (min_epochs 1, reduction_factor 3);
* ``top-half`` -- after epoch 1 stop every trial not in the top half, never look again
  (Egele et al. 2024's simple rule; full: startup_trials 5).

Full run: mnist1d, a ``stack`` genome (0-2 conv layers: channels 16/32, kernels 3/5/7, pooling or
not; dense widths 64/128, relu/gelu) plus ``lr`` (log 3e-4..1e-2), adam, batch 100, 1 rank per
trial, 12 epochs, TPE seed 0 with 8 startup trials, 24 trials, 2 at a time. ``--quick``: digits,
at most 1 conv layer, 4 epochs, 6 trials, startup counts scaled down.

Each study is read back with plain Optuna (``training.contract.open_storage``): total epochs
(``epochs_run`` over all trials), total rank-seconds (``rank_seconds``), the best validation
accuracy among complete trials and the ``test_accuracy`` of that trial, and the counts of
complete / pruned / failed trials. Per pruner: ``epochs_ratio`` and ``rank_seconds_ratio`` (its
total / the unpruned total), ``accuracy_gap`` and ``test_accuracy_gap`` (unpruned best - its best,
in points; negative: the pruned run found better). The issue's goal: ``accuracy_gap <= 0.5`` with
``epochs_ratio <= 0.40``.

Rank-seconds are each trial's wall time x ranks, launch included (a few seconds per ``mpiexec``
job on 2 cores, as long as 12 epochs of training), so they shrink less than the epochs do and
vary with the machine's load (``load_before`` per study); ``train_rank_seconds_ratio`` (the
table's ``train`` column) counts the trainer's own time only (``train_time_s`` x ranks). After its
startup trials TPE learns from what the pruner did (a pruned trial counts with its last value),
and with 2 trials at a time the median pruner's decisions depend on the order trials report, so
each pruned study searches other candidates than the unpruned one: its gap is one draw, not an
average.

Command::

    python benchmarks/pruning.py [--quick] [--json PATH] [--trials N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
from _common import machine, now_iso  # benchmarks/_common.py (the script directory)

from training.contract import open_storage

PRUNERS = ("none", "median", "asha", "top-half")
GOAL_GAP_POINTS = 0.5
GOAL_EPOCHS_RATIO = 0.40
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
        f"name = {_toml(pruner)}",
        *(f"{k} = {_toml(v)}" for k, v in s["pruners"][pruner].items()),
        "",
        "[training]",
        f"dataset = {_toml(s['dataset'])}",
        f"epochs = {s['epochs']}",
        f"batch_size = {s['batch_size']}",
        f"optimizer = {_toml(s['optimizer'])}",
        f"ranks = {s['ranks']}",
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
    return {
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
    epochs_ratio = _ratio(r["epochs"], base["epochs"])
    gap = _gap(base["best_val"], r["best_val"])
    met = (
        gap is not None
        and epochs_ratio is not None
        and gap <= GOAL_GAP_POINTS
        and epochs_ratio <= GOAL_EPOCHS_RATIO
    )
    return {
        "epochs_ratio": epochs_ratio,
        "rank_seconds_ratio": _ratio(r["rank_seconds"], base["rank_seconds"]),
        "train_rank_seconds_ratio": _ratio(r["train_rank_seconds"], base["train_rank_seconds"]),
        "accuracy_gap": gap,
        "test_accuracy_gap": _gap(base["best_test"], r["best_test"]),
        **r,
        "goal_met": met,
    }


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small run for CI (under 2 minutes)")
    p.add_argument("--json", help="write the figures to this JSON file")
    p.add_argument("--trials", type=int, help="trials per study (default: 24, --quick 6)")
    p.add_argument("--keep", help="write the study files and journals here instead of a temp dir")
    args = p.parse_args(argv)
    s = settings(args.quick, args.trials)
    tag = "quick" if args.quick else "full"
    results: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="detol-pruning-") as tmp:
        where = Path(args.keep) if args.keep else Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        for pruner in PRUNERS:
            name = f"pruning-{tag}-{pruner}"
            path = where / f"{name}.toml"
            journal = where / f"{name}.journal"
            if journal.exists():
                journal.unlink()  # a fresh study each time, never a resumed one
            path.write_text(study_file(name, pruner, s))
            load = os.getloadavg()[0]
            rc, wall, output = run_study(path, journal)
            if rc not in (0, 1):
                raise SystemExit(f"search run {path.name} exited with {rc}:\n{output[-4000:]}")
            r = summarise(name, journal)
            r["wall_s"] = wall
            r["exit_code"] = rc
            r["load_before"] = load  # 1-minute load average when the study started
            results[pruner] = r
            note = "" if rc == 0 else f" (search run exited {rc}: stopped early)"
            print(
                f"{pruner:<9} {wall:7.1f} s  {r['complete']} complete, {r['pruned']} pruned, "
                f"{r['failed']} failed{note}",
                flush=True,
            )
    total = time.perf_counter() - started

    base = results["none"]
    pruners = {name: compare(base, results[name]) for name in PRUNERS if name != "none"}
    print()
    print(
        f"Pruning, {s['dataset']} stack genome + lr, TPE seed {s['strategy']['seed']}, "
        f"{s['trials']} trials x {s['epochs']} epochs, {s['concurrency']} at a time, "
        f"{s['ranks']} rank(s) per trial; {total / 60:.1f} min in all"
    )
    head = (
        f"{'pruner':<9} {'epochs':>6} {'ratio':>6} {'rank-s':>8} {'ratio':>6} {'train':>6} "
        f"{'best val':>8} {'gap pts':>7} {'test':>6} {'gap pts':>7} "
        f"{'C/P/F':>8} {'wall s':>7}  goal"
    )
    print(head)
    print("-" * len(head))
    for name in PRUNERS:
        r = results[name]
        c = pruners.get(name, {})
        cpf = f"{r['complete']}/{r['pruned']}/{r['failed']}"
        row = (
            f"{name:<9} {r['epochs']:>6} {_f(c.get('epochs_ratio'), '.2f'):>6} "
            f"{r['rank_seconds']:>8.1f} {_f(c.get('rank_seconds_ratio'), '.2f'):>6} "
            f"{_f(c.get('train_rank_seconds_ratio'), '.2f'):>6} "
            f"{_f(r['best_val'], '.4f'):>8} {_f(c.get('accuracy_gap'), '+.2f'):>7} "
            f"{_f(r['best_test'], '.4f'):>6} {_f(c.get('test_accuracy_gap'), '+.2f'):>7} "
            f"{cpf:>8} {r['wall_s']:>7.1f}  "
        )
        row += "yardstick" if not c else ("met" if c["goal_met"] else "not met")
        print(row)
    print(
        f"goal: accuracy gap <= {GOAL_GAP_POINTS} points with epochs ratio <= "
        f"{GOAL_EPOCHS_RATIO} (gap = unpruned best - pruned best, validation accuracy)"
    )

    if args.json:
        from mpi4py import MPI

        doc = {
            "benchmark": "pruning",
            "date": now_iso(),
            "machine": machine(
                "torch",
                "optuna",
                "dask",
                "distributed",
                "mpi4py",
                "mpich",
                mpi=MPI.Get_library_version().splitlines()[0],
            ),
            "quick": args.quick,
            "settings": {
                **s,
                "goal": {
                    "accuracy_gap_points_max": GOAL_GAP_POINTS,
                    "epochs_ratio_max": GOAL_EPOCHS_RATIO,
                },
                "command": "search run STUDY --storage JOURNAL --no-progress",
                "total_wall_s": total,
            },
            "unpruned": base,
            "pruners": pruners,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
