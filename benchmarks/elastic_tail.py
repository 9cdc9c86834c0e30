"""The end-of-study tail on real ranks (issue 31): the last trial widens into idle slots
(``[resize] idle = true``) against the same study at fixed width (``idle = false``).

What is measured: one study file, run through the real path (``python -m search.cli run STUDY
--storage JOURNAL --no-progress`` as a subprocess: a Dask ``LocalCluster``, a warm pool of MPI
ranks on its worker, rank 0 reporting each epoch to an Optuna journal). The study: ``--trials``
configurations (3) of the built-in MLP on mnist1d (2 hidden layers of 1,024 units, global
batch 256, 6 epochs; random strategy, the seed's learning rates),
one at a time (``concurrency = 1``) on 1 rank each, a worker of 2 slots (``[resize] max_ranks =
2``, the machine's 2 cores). ASHA with promotion is the pruner the policy needs, its first rung
set past the last epoch (``min_epochs = epochs``): no rung, so no trial is paused, stopped or
widened by a promotion, and with ``idle = false`` every trial trains all its epochs on 1 rank
(fixed width). With ``idle = true`` the driver's rule (``search.driver._segments.widen_idle``)
marks the last trial as soon as it starts (the budget is spent, a slot idle): it pauses after
its first epoch (a checkpoint) and goes on on 2 ranks, in place on the warm pool (restored from
rank 0's memory), the global batch split over both.

Figures per run (read back from the journal with plain Optuna): the *tail*, from the start of
the last configuration to the study's end (its last trial told), which is what idle slots can
shorten; the *study span*, from the first trial's start to the end; and the driver's wall time
(the subprocess, with the cluster's start and stop). Per seed both arms run back to back (their
order alternates with the seed), the load average is recorded beside each run, and the ratios
are fixed / idle within the seed; mean and standard error over seeds. Timings under load are
noisy: the ratio of two runs a minute apart is the figure to read, and even it moves with the
load.

Command::

    nice -n 15 python benchmarks/elastic_tail.py [--seeds 5] [--json results/elastic_tail.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import optuna  # noqa: E402
from _common import machine, now_iso  # noqa: E402

from search.driver._resize import WIDTH_ATTR  # noqa: E402
from search.pruners._promotion import RESUME_OF_ATTR, lineage  # noqa: E402
from training.contract import open_storage  # noqa: E402

RUN_TIMEOUT_S = 900


def study_file(seed: int, idle: bool, a: argparse.Namespace) -> str:
    return f"""# benchmarks/elastic_tail.py: seed {seed}, idle {idle}
name = "tail"
metric = "val_accuracy"

[budget]
trials = {a.trials}
concurrency = 1
trial_timeout = 600

[strategy]
name = "random"
seed = {seed}

[pruner]
name = "asha"
promote = true
min_epochs = {a.epochs}

[resize]
factor = 2
max_ranks = 2
idle = {"true" if idle else "false"}

[training]
dataset = "mnist1d"
epochs = {a.epochs}
batch_size = {a.batch_size}
hidden = {a.hidden}
layers = {a.layers}
ranks = 1

[launcher]
warm = true

[space]
lr = {{ type = "float", low = 1e-3, high = 1e-2, log = true }}
"""


def run_arm(directory: Path, seed: int, idle: bool, a: argparse.Namespace) -> dict[str, Any]:
    """One ``search run`` of the study; what the journal says of it."""
    directory.mkdir(parents=True)
    path = directory / "study.toml"
    path.write_text(study_file(seed, idle, a))
    journal = directory / "study.journal"
    env = {k: v for k, v in os.environ.items() if k != "DETOL_STORAGE"}
    load_before = os.getloadavg()
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "search.cli", "run", str(path), "--storage",
                           str(journal), "--no-progress"], cwd=directory, env=env,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    wall = time.perf_counter() - began
    if proc.returncode != 0:
        raise SystemExit(f"search run (seed {seed}, idle {idle}) exited {proc.returncode}:\n"
                         + (proc.stdout + proc.stderr)[-3000:])
    trials = optuna.load_study(study_name="tail", storage=open_storage(str(journal))).trials
    ended = [t for t in trials if t.datetime_complete is not None]
    end = max(t.datetime_complete for t in ended)
    first = min(t.datetime_start for t in trials if t.datetime_start is not None)
    last = max((t for t in trials if lineage(t) == t.number), key=lambda t: t.number)
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    widened = [t for t in trials if RESUME_OF_ATTR in t.user_attrs]
    return {
        "idle": idle, "wall_s": wall, "tail_s": (end - last.datetime_start).total_seconds(),
        "span_s": (end - first).total_seconds(), "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(), "trials": len(trials), "complete": len(complete),
        "failed": sum(t.state == optuna.trial.TrialState.FAIL for t in trials),
        "widened": len(widened),
        "widths": [int(t.user_attrs.get(WIDTH_ATTR, 0)) for t in trials],
        "restored_from": [t.user_attrs.get("restored_from") for t in widened],
        "restore_s": [t.user_attrs.get("restore_s") for t in widened],
        "epoch_s_by_ranks": epoch_seconds(trials),
        "lr": [t.params.get("lr") for t in trials if lineage(t) == t.number],
        "best": max((t.values[0] for t in complete), default=None),
    }


def epoch_seconds(trials: list[optuna.trial.FrozenTrial]) -> dict[str, float]:
    """Mean seconds of an epoch by the ranks it ran on (each trial's own epochs, from the
    training clock of its curve: a pause and a restart are not in it)."""
    by: dict[str, list[float]] = {}
    for t in trials:
        rows = t.user_attrs.get("history") or []
        clock = {int(r["epoch"]): float(r["train_time_s"]) for r in rows}
        first = int(t.user_attrs.get("start_epoch") or 1)
        for epoch in sorted(clock):
            if epoch >= first and (epoch - 1 in clock or epoch == 1):
                by.setdefault(str(t.user_attrs.get(WIDTH_ATTR, 1)), []).append(
                    clock[epoch] - clock.get(epoch - 1, 0.0))
    return {k: sum(v) / len(v) for k, v in sorted(by.items())}


def mean_se(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, 0.0
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    started = time.perf_counter()
    seeds = []
    with tempfile.TemporaryDirectory(prefix="detol-tail-") as tmp:
        for seed in range(a.seeds):
            order = (False, True) if seed % 2 == 0 else (True, False)
            arms = {("idle" if idle else "fixed"): run_arm(Path(tmp) / f"{seed}-{idle}", seed,
                                                           idle, a) for idle in order}
            row = {"seed": seed, "order": ["idle" if i else "fixed" for i in order], **arms,
                   "tail_ratio": arms["fixed"]["tail_s"] / arms["idle"]["tail_s"],
                   "span_ratio": arms["fixed"]["span_s"] / arms["idle"]["span_s"],
                   "wall_ratio": arms["fixed"]["wall_s"] / arms["idle"]["wall_s"]}
            seeds.append(row)
            f, i = arms["fixed"], arms["idle"]
            print(f"seed {seed}: tail {f['tail_s']:.1f} -> {i['tail_s']:.1f} s "
                  f"({row['tail_ratio']:.2f}x), span {f['span_s']:.1f} -> {i['span_s']:.1f} s, "
                  f"wall {f['wall_s']:.1f} -> {i['wall_s']:.1f} s; widened {i['widened']} "
                  f"({i['restored_from']}); load {f['loadavg_before'][0]:.1f} / "
                  f"{i['loadavg_before'][0]:.1f}", flush=True)
    summary = {k: mean_se([s[k] for s in seeds]) for k in ("tail_ratio", "span_ratio",
                                                          "wall_ratio")}
    for k, (m, e) in summary.items():
        print(f"{k}: {m:.3f} +/- {e:.3f} (SE, {len(seeds)} seeds)")
    if a.json:
        a.json.write_text(json.dumps({
            "benchmark": "elastic_tail", "date": now_iso(), "simulated": False,
            "machine": machine("optuna", "torch", nice=os.nice(0)),
            "settings": {k: v for k, v in vars(a).items() if k != "json"},
            "study_file": study_file(0, True, a),
            **{k: m for k, (m, _) in summary.items()},
            **{f"{k}_se": e for k, (_, e) in summary.items()},
            "seeds": seeds, "runtime_s": time.perf_counter() - started}, indent=1) + "\n")


if __name__ == "__main__":
    main()
