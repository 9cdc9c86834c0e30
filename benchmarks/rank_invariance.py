"""Rank count does not change the search: one study, run at 1, 2 and 4 ranks per trial.

Each run is the real ``search run`` of the same study file (a plug-in MLP on scikit-learn's
digits, sync SGD, the same global batch, TPE and the median pruner with the same seeds, one
trial at a time), changed only in ``[training] ranks``. The three studies are then read with
plain Optuna and compared trial number by trial number against the 1-rank study (the
yardstick): the same parameters proposed, the same state (COMPLETE / PRUNED), the same epoch
where a pruned trial stopped, and the largest relative difference of the reported values
(intermediate and final).

Goal (issue 26): the same keep/prune decisions in >= 99 % of trials (optuna#5849 reports
different pruning decisions on 1 and 2 GPUs for the same seed).

    python benchmarks/rank_invariance.py [--quick] [--json PATH] [--seeds 0 1] [--trials N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import optuna  # noqa: E402

from benchmarks._common import machine, now_iso  # noqa: E402
from training.contract import open_storage  # noqa: E402

STUDY = """\
name = "rank-invariance"
metric = "{metric}"

[budget]
trials = {trials}
concurrency = 1

[strategy]
name = "tpe"
seed = {seed}
startup_trials = 10

[pruner]
name = "median"
startup_trials = 5
warmup_epochs = 1

[training]
model = "_plugins_user:build"
dataset = "_plugins_user:digits_torch"
algorithm = "sync"
epochs = {epochs}
batch_size = 64
ranks = {ranks}
seed = {seed}

[space]
lr = {{ type = "float", low = 1e-3, high = 0.5, log = true }}
hidden = {{ type = "int", low = 8, high = 128, log = true }}
momentum = {{ type = "float", low = 0.0, high = 0.95 }}

[launcher]
warm = true
env = {{ PYTHONPATH = "{plugins}" }}
"""


def start_study(directory: Path, *, ranks: int, seed: int, trials: int, epochs: int,
                metric: str) -> subprocess.Popen[str]:
    """Starts ``search run`` of the study in ``directory`` (a new folder)."""
    directory.mkdir(parents=True)
    (directory / "s.toml").write_text(STUDY.format(
        metric=metric, trials=trials, seed=seed, epochs=epochs, ranks=ranks,
        plugins=ROOT / "benchmarks"))
    env = {k: v for k, v in os.environ.items() if k != "DETOL_STORAGE"}
    log = (directory / "search.log").open("w")
    return subprocess.Popen([sys.executable, "-m", "search.cli", "run", "s.toml", "--no-progress"],
                            cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT,
                            text=True)


def read_study(directory: Path) -> list[optuna.trial.FrozenTrial]:
    """The finished trials of the study in ``directory``, read with plain Optuna."""
    study = optuna.load_study(study_name="rank-invariance",
                              storage=open_storage(str(directory / "detol.journal")))
    return [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]


def run_seed(work: Path, seed: int, ranks: list[int], *, parallel: bool, **study: Any
             ) -> tuple[dict[int, float], dict[int, list[optuna.trial.FrozenTrial]]]:
    """Runs the study at each rank count (one after the other, or all at once)."""
    seconds: dict[int, float] = {}
    studies: dict[int, list[optuna.trial.FrozenTrial]] = {}
    batches = [ranks] if parallel else [[r] for r in ranks]
    for batch in batches:
        start = time.perf_counter()
        procs = {r: start_study(work / f"seed{seed}-ranks{r}", ranks=r, seed=seed, **study)
                 for r in batch}
        for r, proc in procs.items():
            if proc.wait() != 0:
                log = (work / f"seed{seed}-ranks{r}" / "search.log").read_text()
                raise SystemExit(f"search run ({r} ranks) failed:\n{log[-3000:]}")
            seconds[r] = time.perf_counter() - start
            studies[r] = read_study(work / f"seed{seed}-ranks{r}")
            print(f"seed {seed}, {r} rank(s): {len(studies[r])} trials in {seconds[r]:.0f} s, "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
    return seconds, studies


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def compare(base: list[optuna.trial.FrozenTrial],
            other: list[optuna.trial.FrozenTrial]) -> dict[str, Any]:
    """Trial by trial: decisions, proposals and values of ``other`` against ``base``."""
    same_decision = same_params = 0
    max_rel = 0.0
    identical_values = 0
    differing: list[dict[str, Any]] = []
    pairs = list(zip(base, other))  # noqa: B905 - a study cut short compares its trials
    for a, b in pairs:
        stop_a = max(a.intermediate_values, default=None)
        stop_b = max(b.intermediate_values, default=None)
        decision = a.state == b.state and stop_a == stop_b
        same_decision += decision
        same_params += a.params == b.params
        rel = 0.0
        for step in set(a.intermediate_values) & set(b.intermediate_values):
            rel = max(rel, _rel(a.intermediate_values[step], b.intermediate_values[step]))
        if a.value is not None and b.value is not None:
            rel = max(rel, _rel(a.value, b.value))
        identical_values += (a.intermediate_values == b.intermediate_values
                             and a.value == b.value)
        max_rel = max(max_rel, rel)
        if not decision or a.params != b.params:
            differing.append({"number": a.number, "state": [a.state.name, b.state.name],
                              "stopped_at": [stop_a, stop_b], "same_params": a.params == b.params})
    n = len(pairs)
    return {"trials": n, "same_decision": same_decision,
            "same_decision_fraction": round(same_decision / n, 4) if n else None,
            "same_params": same_params, "identical_values": identical_values,
            "max_relative_value_difference": max_rel, "differing": differing[:10]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="12 trials, 1 seed, 1 and 2 ranks")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+")
    parser.add_argument("--trials", type=int)
    parser.add_argument("--ranks", type=int, nargs="+")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--metric", default="val_accuracy")
    parser.add_argument("--parallel", action="store_true",
                        help="run the rank counts' studies at the same time")
    parser.add_argument("--workdir", type=Path, help="keep the studies here (a new folder)")
    args = parser.parse_args()
    seeds = args.seeds or [0]
    trials = args.trials or (12 if args.quick else 100)
    ranks = args.ranks or ([1, 2] if args.quick else [1, 2, 4])
    load_before = os.getloadavg()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        for seed in seeds:
            seconds, studies = run_seed(work, seed, ranks, parallel=args.parallel, trials=trials,
                                        epochs=args.epochs, metric=args.metric)
            base = ranks[0]
            for r in ranks[1:]:
                row = {"seed": seed, "ranks": r, "yardstick_ranks": base,
                       "seconds": round(seconds[r], 1),
                       "yardstick_seconds": round(seconds[base], 1),
                       "pruned_in_yardstick": sum(
                           t.state == optuna.trial.TrialState.PRUNED for t in studies[base]),
                       **compare(studies[base], studies[r])}
                runs.append(row)
                print(f"  {r} vs {base} ranks: same decision {row['same_decision']}/"
                      f"{row['trials']}, same params {row['same_params']}, identical values "
                      f"{row['identical_values']}, max rel. difference "
                      f"{row['max_relative_value_difference']:.2e}", flush=True)
    total = sum(r["trials"] for r in runs)
    same = sum(r["same_decision"] for r in runs)
    summary = {"same_decision_fraction": round(same / total, 4) if total else None,
               "goal": ">= 0.99", "met": bool(total) and same / total >= 0.99}
    print(f"same keep/prune decisions: {same}/{total} (goal >= 99 %)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "benchmark": "rank_invariance", "date": now_iso(), "quick": args.quick,
            "parallel": args.parallel,
            "study": {"trials": trials, "epochs": args.epochs, "metric": args.metric,
                      "strategy": "tpe", "pruner": "median", "algorithm": "sync",
                      "batch_size": 64, "model": "_plugins_user:build (MLP plug-in)",
                      "dataset": "_plugins_user:digits_torch"},
            "runs": runs, "summary": summary,
            "load": {"before": load_before, "after": os.getloadavg()},
            "machine": machine("torch", "optuna", "mpi4py", "mpich"),
        }, indent=1) + "\n")
    return 0 if summary["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
