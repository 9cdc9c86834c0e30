"""Pruners replayed on recorded learning curves: epochs spent and regret, the sampler left out.

What is measured. *Record* (once, no pruning; ``benchmarks/_common/curves.py``): the first 100
configurations of a seeded random search (``RandomSampler(seed=0)`` through the study's own
space, ``StudyFile.search_space``: pruning.py's full settings -- a ``stack`` genome of 0-2 conv
layers, channels 16/32, kernels 3/5/7, pooling or not, dense widths 64/128, relu/gelu -- plus
``lr`` log-uniform 3e-4..1e-2; adam, batch 100, 12 epochs), each trained in process by
``training.Trainer`` on ``MPI.COMM_SELF`` (1 rank, "sync", 1 thread) on mnist1d and on MNIST-5k
(800 validation samples each: one sample is 0.125 points), the same configurations on both; per
epoch its validation accuracy and wall seconds. Stored in ``results/pruning_curves.json``,
written after every configuration: an interrupted recording resumes where it stopped.

*Replay* (``search.pruners._replay``): every pruner, built as a study builds it (``[pruner]``
options validated by the study file, ``search.strategies._registry.pruner_spec(...).build()``), and
the promotion forms of ``search.pruners._promotion.PromotingHalving``, runs on an in-memory Optuna
study in a discrete-event simulation: ``c`` workers (c = 1 and 4), the configurations starting in a
random order (20 orders, seeds 0..19, the same orders for every pruner). Each epoch a trial reports
its recorded value and asks ``should_prune()``; a stopping pruner's yes stops it. With a promotion
form a yes pauses the trial, and a free worker first promotes a paused trial that is now in its
rung's top 1/eta (a new trial that re-reports its parent's values and trains on from the next
epoch of the same curve, as from a checkpoint: only the new epochs count), and only then starts
a new configuration; when all have started, free workers keep promoting until nothing is
promotable. Two clocks, each a full replay: ``epochs`` (every epoch takes 1 unit of simulated
time) and ``seconds`` (its recorded wall seconds, which order the events at c = 4 differently:
small models finish first). Under the ``epochs`` clock the rung rules (asha, hyperband and their
promotion forms) decide the same at c = 1 and c = 4: a trial reaches a rung after exactly the
trials that started before it.

Pruners: ``none``; ``median`` (startup_trials 5, warmup_epochs 2, as pruning.py);
``percentile`` (25: only the top quarter goes on; startup 5, warmup 2); ``asha`` (Optuna's
SuccessiveHalvingPruner, a stop: min_epochs 1, reduction_factor 3); ``hyperband`` (Optuna's,
min 1, max 12, factor 3); ``patient`` (stop after 3 epochs without improvement); ``top-half``
-- the yardstick, Egele et al. 2024's one-epoch rule (``search.pruners._top_half``): after epoch 1
stop a trial below the median epoch-1 value of every trial that has one (startup_trials 5), never
look again; ``asha-promote`` (``PromotingHalving(min_resource=1, reduction_factor=3)``:
rungs 1, 3, 9) and ``hyperband-promote`` (its asynchronous Hyperband: ``hyperband_brackets(1,
12, 3)`` = 3 brackets, max_resource 12).

Per pruner, dataset, concurrency and clock, mean and standard error over the orders:
``epochs_ratio`` (epochs trained / the unpruned total, 100 x 12), ``seconds_ratio`` (the same
weighted by each epoch's recorded seconds: compute spent), ``time_ratio`` (simulated time until
the last worker stops / no pruning's, same order), and ``regret`` of the final incumbent in
points: the best final (epoch 12) validation accuracy of all recorded configurations minus that
of the incumbent, the trial with the best final value among those that trained all 12 epochs
(an order in which none did is counted in ``no_incumbent`` and left out of the mean);
``regret_zero``: orders that found the best. Against the yardstick, paired by order:
``vs_top_half_epochs`` (its epochs ratio / top-half's) and ``vs_top_half_regret`` (its regret -
top-half's). The issue's goal: the best pruner spends <= 0.30 of the epochs at <= 0.3 points
mean regret; per setting the cheapest pruner within the regret bound is named, and the pruners
that meet both bounds in every setting.

Command::

    python benchmarks/pruning_replay.py [--quick] [--json PATH] [--curves PATH]
        [--record-only | --replay-only] [--configs N] [--orders N]
        [--clock epochs|seconds|both]

``--quick``: digits, 4 epochs, at most 1 conv layer, 12 configurations recorded into a temp
dir, 5 orders (well under 2 minutes). Full: ``--json results/pruning_replay.json`` (recording
~50 minutes on one core the first time, replay under a minute per clock).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import torch
from _common import machine, now_iso  # benchmarks/_common/ (the script directory)
from _common.curves import record  # benchmarks/_common/curves.py
from pruning import settings as e2e_settings  # the same space and training as pruning.py

from search import parse_study
from search.pruners._promotion import PromotingHalving, hyperband_brackets
from search.pruners._replay import best_final, replay
from search.strategies._registry import pruner_spec

RESULTS = Path(__file__).resolve().parent / "results"
CONCURRENCY = (1, 4)
YARDSTICK = "top-half"
PROMOTING = ("asha-promote", "hyperband-promote")
EXTRA = PROMOTING  # pruners built here, not from the registry
GOAL_EPOCHS_RATIO = 0.30
GOAL_REGRET_POINTS = 0.3


def settings(quick: bool) -> dict[str, Any]:
    """pruning.py's space, training and pruner options; the datasets and replay sizes here."""
    e2e = e2e_settings(quick, None)
    pruners = {
        **e2e["pruners"],
        "percentile": {**e2e["pruners"]["median"], "percentile": 25.0},
        "hyperband": {"min_epochs": 1, "reduction_factor": 3},  # max_epochs: training.epochs
        "patient": {"wrapped": "none", "patience": 3},
    }
    order = ("none", "median", "percentile", "asha", "hyperband", "patient", YARDSTICK)
    return {
        **{k: e2e[k] for k in ("epochs", "batch_size", "optimizer", "genome", "lr")},
        "datasets": ["digits"] if quick else ["mnist1d", "mnist5k"],
        "configs": 12 if quick else 100,
        "orders": 5 if quick else 20,
        "pruners": {name: pruners[name] for name in order},
        "extra": {
            **{name: {"min_resource": 1, "reduction_factor": 3} for name in PROMOTING},
        },
    }


def pruner_factory(name: str, s: dict[str, Any]) -> Callable[[], optuna.pruners.BasePruner]:
    """A fresh pruner per replay, built as a study file's ``[pruner]`` table builds it."""
    epochs = s["epochs"]
    if name == "asha-promote":
        return lambda: PromotingHalving(min_resource=1, reduction_factor=3)
    if name == "hyperband-promote":
        brackets = hyperband_brackets(1, epochs, 3)
        return lambda: PromotingHalving(
            min_resource=1, reduction_factor=3, brackets=brackets, max_resource=epochs
        )
    table = parse_study({"name": "replay", "pruner": {"name": name, **s["pruners"][name]}})
    return pruner_spec(name, table.pruner.spec_options(epochs)).build


def mean_se(xs: list[float]) -> tuple[float | None, float | None]:
    if not xs:
        return None, None
    se = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0
    return statistics.fmean(xs), se


def replay_setting(
    configs: list[dict[str, Any]], s: dict[str, Any], dataset: str, c: int, clock: str
) -> dict[str, Any]:
    """Every pruner on every order at concurrency ``c``; figures paired with the yardstick."""
    epochs = s["epochs"]
    curves = [cfg["val_accuracy"] for cfg in configs]
    seconds = [cfg["epoch_seconds"] for cfg in configs]
    best = best_final(curves, epochs)
    total_epochs = sum(len(cv) for cv in curves)
    total_seconds = sum(sum(sec[: len(cv)]) for sec, cv in zip(seconds, curves, strict=True))
    names = [*s["pruners"], *EXTRA]
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for k in range(s["orders"]):
        order = np.random.default_rng([k]).permutation(len(curves)).tolist()
        for name in names:
            run = replay(
                curves,
                pruner_factory(name, s)(),
                concurrency=c,
                order=order,
                epochs=epochs,
                durations=seconds if clock == "seconds" else None,
                study_name=f"replay-{dataset}-{k}",  # Hyperband's brackets hash the name
            )
            spent_s = sum(sum(seconds[cfg][a - 1 : b]) for cfg, a, b in run.segments)
            runs[name].append(
                {
                    "epochs": run.epochs,
                    "seconds": spent_s,
                    "time": run.time,
                    "regret": None if run.regret is None else run.regret * 100.0,
                    "incumbent": run.incumbent,
                    "complete": run.complete,
                    "promotions": run.promotions,
                }
            )
    out: dict[str, Any] = {}
    base_time = [r["time"] for r in runs["none"]]
    yard = runs[YARDSTICK]
    for name in names:
        rs = runs[name]
        figures: dict[str, Any] = {"orders": len(rs)}
        for key, xs in (
            ("epochs_ratio", [r["epochs"] / total_epochs for r in rs]),
            ("seconds_ratio", [r["seconds"] / total_seconds for r in rs]),
            ("time_ratio", [r["time"] / t for r, t in zip(rs, base_time, strict=True)]),
            ("regret", [r["regret"] for r in rs if r["regret"] is not None]),
            ("complete", [float(r["complete"]) for r in rs]),
            ("promotions", [float(r["promotions"]) for r in rs]),
            (
                "vs_top_half_regret",
                [
                    r["regret"] - y["regret"]
                    for r, y in zip(rs, yard, strict=True)
                    if r["regret"] is not None and y["regret"] is not None
                ],
            ),
        ):
            figures[key], figures[f"{key}_se"] = mean_se(xs)
        regrets = [r["regret"] for r in rs if r["regret"] is not None]
        figures["regret_max"] = max(regrets) if regrets else None
        figures["regret_zero"] = sum(r == 0.0 for r in regrets)  # orders that found the best
        figures["no_incumbent"] = sum(r["regret"] is None for r in rs)
        figures["goal_met"] = (
            figures["no_incumbent"] == 0
            and figures["epochs_ratio"] <= GOAL_EPOCHS_RATIO
            and figures["regret"] is not None
            and figures["regret"] <= GOAL_REGRET_POINTS
        )
        out[name] = figures
    for name in names:
        out[name]["vs_top_half_epochs"] = out[name]["epochs_ratio"] / out[YARDSTICK]["epochs_ratio"]
    within = [n for n in names if out[n]["no_incumbent"] == 0 and out[n]["regret"] is not None
              and out[n]["regret"] <= GOAL_REGRET_POINTS]
    cheapest = min(within, key=lambda n: out[n]["epochs_ratio"], default=None)
    return {
        "configs": len(curves),
        "best_final": best,
        # the cheapest pruner within the regret goal, and whether it also meets the epochs goal
        "best_pruner": cheapest,
        "goal_met": cheapest is not None and out[cheapest]["goal_met"],
        "unpruned_epochs": total_epochs,
        "unpruned_seconds": total_seconds,
        "pruners": out,
    }


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def print_table(dataset: str, c: int, r: dict[str, Any]) -> None:
    print(
        f"\n{dataset}, concurrency {c}: {r['configs']} configurations, best final "
        f"{r['best_final']:.4f}, unpruned {r['unpruned_epochs']} epochs / "
        f"{r['unpruned_seconds']:.0f} s"
    )
    head = (
        f"{'pruner':<18} {'epochs':>11} {'seconds':>7} {'time':>5} {'regret pts':>12} "
        f"{'max':>5} {'=0':>3} {'done':>5} {'promo':>5} {'vs top-half':>16} {'n':>3}  goal"
    )
    print(head)
    print("-" * len(head))
    for name, f in r["pruners"].items():
        vs = (
            "yardstick"
            if name == YARDSTICK
            else f"{f['vs_top_half_epochs']:.2f}x {_f(f['vs_top_half_regret'], '+.2f')}"
        )
        none = f" ({f['no_incumbent']} none)" if f["no_incumbent"] else ""
        print(
            f"{name:<18} {f['epochs_ratio']:.3f}±{f['epochs_ratio_se']:.3f} "
            f"{f['seconds_ratio']:>7.3f} {f['time_ratio']:>5.2f} "
            f"{_f(f['regret'], '6.2f')}±{_f(f['regret_se'], '.2f'):<5} "
            f"{_f(f['regret_max'], '5.2f')} {f['regret_zero']:>3} {f['complete']:>5.1f} "
            f"{f['promotions']:>5.1f} {vs:>16} {f['orders']:>3}  "
            f"{'met' if f['goal_met'] else '-'}{none}"
        )
    best = r["best_pruner"]
    print(
        f"goal: cheapest pruner with mean regret <= {GOAL_REGRET_POINTS}: "
        + ("none" if best is None else f"{best}, {r['pruners'][best]['epochs_ratio']:.3f} of the "
           f"epochs: {'met' if r['goal_met'] else 'not met'} (<= {GOAL_EPOCHS_RATIO})")
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small run for CI (under 2 minutes)")
    p.add_argument("--json", help="write the figures to this JSON file")
    p.add_argument("--curves", help="curve file (default: results/pruning_curves.json; "
                   "--quick: a temp dir)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--record-only", action="store_true", help="record, do not replay")
    mode.add_argument("--replay-only", action="store_true", help="replay what is recorded")
    p.add_argument("--configs", type=int, help="configurations per dataset (default 100)")
    p.add_argument("--orders", type=int, help="arrival orders per setting (default 20)")
    p.add_argument("--clock", choices=("epochs", "seconds", "both"), default="both",
                   help="simulated time per epoch: 1, its recorded seconds, or each in turn")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = settings(args.quick)
    s["configs"] = args.configs or s["configs"]
    s["orders"] = args.orders or s["orders"]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="detol-replay-") as tmp:
        default = Path(tmp) / "curves.json" if args.quick else RESULTS / "pruning_curves.json"
        path = Path(args.curves) if args.curves else default
        if args.replay_only:
            doc = json.loads(path.read_text())
        else:
            doc = record(path, s, s["datasets"], s["configs"])
        record_s = {d: doc["datasets"][d]["record_s"] for d in s["datasets"]}
        took = ", ".join(f"{d} {v / 60:.1f} min" for d, v in record_s.items())
        print(f"curves: {path}; recording took {took} (training wall time)")
        if args.record_only:
            return 0
        replay_started = time.perf_counter()
        clocks = ("epochs", "seconds") if args.clock == "both" else (args.clock,)
        results: dict[str, dict[str, dict[str, Any]]] = {clock: {} for clock in clocks}
        for clock in clocks:
            for dataset in s["datasets"]:
                configs = doc["datasets"][dataset]["configs"][: s["configs"]]
                if len(configs) < s["configs"]:
                    print(f"warning: {dataset}: {len(configs)} of {s['configs']} configurations")
                results[clock][dataset] = {}
                for c in CONCURRENCY:
                    r = replay_setting(configs, s, dataset, c, clock)
                    results[clock][dataset][str(c)] = r
                    print_table(f"{dataset}, clock {clock}", c, r)
    replay_s = time.perf_counter() - replay_started
    print(f"\nreplay took {replay_s:.0f} s ({s['orders']} orders); regret in points; epochs "
          "and regret ± standard error over orders; vs top-half: epochs ratio x, regret "
          "difference (paired by order)")
    meets: dict[str, list[str]] = {}
    for clock, by_dataset in results.items():
        meets[clock] = sorted(
            name
            for name in [*s["pruners"], *EXTRA]
            if all(r["pruners"][name]["goal_met"] for d in by_dataset.values() for r in d.values())
        )
        print(f"goal (<= {GOAL_EPOCHS_RATIO} of the epochs at <= {GOAL_REGRET_POINTS} points "
              f"mean regret on every dataset and concurrency), clock {clock}: "
              + (f"met by {', '.join(meets[clock])}" if meets[clock] else "not met"))
    if args.json:
        doc_out = {
            "benchmark": "pruning_replay",
            "date": now_iso(),
            "machine": machine("torch", "optuna", "numpy", load_average=os.getloadavg()),
            "quick": args.quick,
            "settings": {
                **s,
                "concurrency": list(CONCURRENCY),
                "clocks": list(clocks),
                "yardstick": YARDSTICK,
                "curves": None if args.quick else os.path.relpath(path, RESULTS.parent.parent),
                "order_seeds": list(range(s["orders"])),
                "goal": {"epochs_ratio_max": GOAL_EPOCHS_RATIO,
                         "regret_points_max": GOAL_REGRET_POINTS},
            },
            "record_s": record_s,
            "replay_s": replay_s,
            "total_s": time.perf_counter() - started,
            "goal_met_by": meets,  # clock -> pruners meeting the goal in every setting
            "results": results,  # clock -> dataset -> concurrency -> pruner -> figures
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc_out, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
