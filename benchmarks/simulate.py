"""A simulated 1,024-worker sweep through the real driver.

``search.Driver`` on a ``distributed.Client`` (threads), Optuna in-memory storage, the real
strategies and the real ASHA pruner, with ``objective = "simulated:sweep"``
(search.simulated._workload): 10-minute mean trials from a log-normal (sigma 1), 5 % stragglers 4x
slower, 2 % that raise partway, 1 % whose worker disappears partway (re-queued through the driver's
KilledWorker path), and a learning curve of 20 epochs that ASHA (min 1 epoch, eta 3) judges epoch by
epoch on the simulated clock; a pruned trial frees its worker at that epoch.

The driver is a serial server on the simulated clock (search.simulated._clock.SimClock,
``service="measured"``): its own work -- ask, suggest, submit, reading the answer, tell, progress
-- costs its real wall time, measured in the same run; waiting for the next event does not.
Dask's round trip is not charged (in a real sweep it overlaps the trials' work); its wall time
is reported. The replay of the workers' per-epoch reports (and the pruner's decisions, which rank
0 of each trial makes in a real sweep) is not the driver's work either.

Per scale (64, 256, 1,024 workers) and strategy (random; evolution, the learning one):
- utilisation: busy worker-seconds / available worker-seconds from 0 until the budget is spent
  (the first time the driver leaves a free worker without a new trial; the drain after it,
  where only the last trials run, is reported apart as ``whole``), and in the steady window
  (after the first fill);
- time to target: the simulated time at which a trial within ``TARGET`` of the landscape's
  optimum (true loss <= 0.005, optimum 0) was told;
- trials handled per simulated second; the driver's measured work per trial (wall seconds),
  split into submit (ask + suggest + Dask submit) and tell;
- the machine-repairman model of one serial driver (search.simulated._clock.driver_bound) with the
  measured busy time per trial D and driver time per trial s: utilisation
  ``(1 - p0) D / (W s)``, ~ ``min(D / (D + s), D / (W s))``; the most workers at 95 %:
  ``W95 ~ D / (0.95 s)``. Validated by runs that charge a constant s instead (the measured one,
  and one that puts the knee at ~256 workers), model vs simulation.

Yardsticks (published, not rerun here): DeepHyper reports > 95 % worker utilisation at 1,920
workers; Ray Tune's scalability release test runs 10,000 one-second trials on 16 CPUs at 1.14x
the ideal time.

    python benchmarks/simulate.py --quick            # < 2 min
    python benchmarks/simulate.py --json benchmarks/results/simulate.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import machine, now_iso  # noqa: E402

SCALES = (64, 256, 1024)
STRATEGIES = ("random", "evolution")
TARGET = 0.005  # true loss; the landscape's optimum is 0
GOAL = 0.95
DIMENSIONS = 4
YARDSTICKS = {
    "deephyper": "DeepHyper: > 95 % worker utilisation at 1,920 workers (published)",
    "ray_tune": "Ray Tune release test: 10,000 one-second trials on 16 CPUs at 1.14x the ideal "
                "time (published)",
}
_CLIENT: Any = None


def _client() -> Any:
    global _CLIENT
    if _CLIENT is None:
        from distributed import Client

        _CLIENT = Client(processes=False, n_workers=1, threads_per_worker=4,
                         dashboard_address=None)
    return _CLIENT


ASHA = {"name": "asha", "min_epochs": 1, "reduction_factor": 3}
# The model check on its own terms: no pruning, no faults, no stragglers, a lighter tail.
CLEAN = "sweep,sigma=0.5,straggle=0,fail=0,lost=0"


def study_dict(workers: int, trials: int, strategy: str, seed: int, workload: str,
               pruner: Any = None) -> dict:
    return {
        "name": f"simulate-{strategy}-w{workers}-s{seed}",
        "objective": f"simulated:{workload}",
        "metric": "loss",
        "direction": "minimize",
        "pruner": pruner or ASHA,
        "strategy": {"name": strategy, "seed": seed},
        "budget": {"trials": trials, "concurrency": workers, "max_failures": 10 * trials,
                   "max_retries": 2},
        "space": {f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(DIMENSIONS)},
    }


def run_one(*, workers: int, trials: int, strategy: str, seed: int,
            service: float | str = "measured", workload: str = "sweep",
            pruner: Any = None) -> dict[str, Any]:
    """One sweep through the real driver; its figures."""
    import optuna

    from search import Driver, open_study, parse_study
    from search.simulated._clock import SimClock, utilisation

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sf = parse_study(study_dict(workers, trials, strategy, seed, workload, pruner))
    study = open_study(sf, optuna.storages.InMemoryStorage())
    clock = SimClock(service=service)
    # The budget is spent when the driver first leaves a free worker without a trial: until then
    # it keeps every worker busy (up to its own service time); after it only the running
    # trials finish (the drain). Seen from the driver's events: a tick with a free worker
    # followed by no start before the next tick.
    seen: dict[str, Any] = {"spent_at": None, "free": False, "started": 0, "tick": 0.0}

    def on_event(kind: str, trial: Any, counts: Any, result: Any) -> None:
        if kind == "started":
            seen["started"] += 1
        elif kind == "tick":
            if seen["spent_at"] is None and seen["free"] and not seen["started"]:
                seen["spent_at"] = seen["tick"]
            seen.update(free=counts.running < workers, started=0, tick=clock.now())

    driver = Driver(sf, study, _client(), storage_url="", clock=clock, on_event=on_event)
    spent = {"submit": 0.0, "tell": 0.0}

    def timed(name: str, fn: Any) -> Any:  # the driver's own methods, timed (a profile)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - started
        return wrapper

    driver._submit = timed("submit", driver._submit)  # type: ignore[method-assign]
    driver._finish = timed("tell", driver._finish)  # type: ignore[method-assign]
    load = os.getloadavg()
    started = time.perf_counter()
    counts = driver.run(trials=trials, concurrency=workers, timeout=None)
    wall = time.perf_counter() - started
    told = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    spans = [(float(t.user_attrs["sim_start_s"]),
              float(t.user_attrs["sim_start_s"]) + float(t.user_attrs.get("sim_time_s", 0.0)))
             for t in told]
    starts = sorted(a for a, _ in spans)
    last_start = seen["spent_at"] if seen["spent_at"] is not None else starts[-1]
    end = max(b for _, b in spans)
    ramp = starts[min(workers, len(starts)) - 1]
    done = [(float(t.user_attrs["sim_clock_s"]), float(t.user_attrs["sim_true_loss"]))
            for t in told if t.state == optuna.trial.TrialState.COMPLETE]

    def reached(target: float) -> float | None:
        hits = [clock_s for clock_s, loss in done if loss <= target]
        return min(hits) if hits else None

    lost = sum("KilledWorker" in str(t.user_attrs.get("exit_reason", "")) for t in told)
    busy = [b - a for a, b in spans]
    n = len(told)
    return {
        "workers": workers, "strategy": strategy, "seed": seed, "service": service,
        "trials": trials, "attempts": n, "complete": counts.complete, "pruned": counts.pruned,
        "failed": counts.failed, "lost": lost,
        "utilisation": utilisation(spans, workers, 0.0, last_start),
        "utilisation_steady": utilisation(spans, workers, ramp, last_start)
        if last_start > ramp else math.nan,
        "utilisation_whole": utilisation(spans, workers, 0.0, end),
        "sim_last_start_s": last_start, "sim_end_s": end, "sim_ramp_s": ramp,
        "time_to_target_s": reached(TARGET),
        "time_to": {str(x): reached(x) for x in (0.02, 0.01, TARGET, 0.002)},
        "best_true_loss": min((loss for _, loss in done), default=None),
        "trials_per_sim_s": sum(a <= last_start for a in starts) / last_start,
        "trials_per_sim_s_steady": sum(ramp < a <= last_start for a in starts)
        / (last_start - ramp) if last_start > ramp else math.nan,
        "busy_per_trial_s": statistics.fmean(busy),
        "driver_s_per_trial": clock.work_s / n,
        "submit_s_per_trial": spent["submit"] / n,
        "tell_s_per_trial": spent["tell"] / n,
        "dask_round_trip_s_per_trial": driver.events.round_trip_s / n,
        "wall_s": wall, "wall_s_per_trial": wall / n, "load_before": load,
        "load_after": os.getloadavg(),
    }


def _mean_se(values: list[float]) -> tuple[float, float]:
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return math.nan, math.nan
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan
    return statistics.fmean(values), se


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from search.simulated._clock import driver_bound, max_workers

    rows = []
    for strategy in dict.fromkeys(r["strategy"] for r in runs):
        for w in dict.fromkeys(r["workers"] for r in runs):
            group = [r for r in runs if r["strategy"] == strategy and r["workers"] == w]
            if not group:
                continue
            row: dict[str, Any] = {"strategy": strategy, "workers": w, "seeds": len(group),
                                   "reached_target": sum(r["time_to_target_s"] is not None
                                                         for r in group)}
            for key in ("utilisation", "utilisation_steady", "utilisation_whole",
                        "time_to_target_s", "trials_per_sim_s", "busy_per_trial_s",
                        "driver_s_per_trial", "submit_s_per_trial", "tell_s_per_trial",
                        "dask_round_trip_s_per_trial", "wall_s_per_trial", "attempts", "lost",
                        "failed"):
                mean, se = _mean_se([r[key] for r in group])
                row[key], row[key + "_se"] = mean, se
            d, s = row["busy_per_trial_s"], row["driver_s_per_trial"]
            row["model_utilisation"] = driver_bound(w, d, s)
            row["max_workers_95"] = max_workers(d, s, GOAL)
            row["max_workers_95_formula"] = d / (GOAL * s)
            rows.append(row)
    return rows


def validate(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Constant-service runs: simulated utilisation (steady window) vs the model."""
    from search.simulated._clock import driver_bound

    out = []
    for r in runs:
        model = driver_bound(r["workers"], r["busy_per_trial_s"], float(r["service"]))
        out.append({"workers": r["workers"], "service_s": r["service"],
                    "busy_per_trial_s": r["busy_per_trial_s"],
                    "throughput_simulated": r.get("trials_per_sim_s_steady"),
                    "throughput_model": model * r["workers"] / r["busy_per_trial_s"],
                    "simulated": r["utilisation_steady"], "model": model,
                    "difference": r["utilisation_steady"] - model})
    return out


def _h(seconds: float | None) -> str:
    return "-" if seconds is None or math.isnan(seconds) else f"{seconds / 3600:.2f} h"


def print_tables(rows: list[dict[str, Any]], checks: list[dict[str, Any]]) -> None:
    print(f"\n{'strategy':<10}{'workers':>8}{'util':>16}{'steady':>9}{'whole':>8}"
          f"{'to target':>11}{'trials/sim s':>13}{'D (s)':>8}{'driver ms':>14}"
          f"{'model':>8}{'W95':>9}")
    for r in rows:
        print(f"{r['strategy']:<10}{r['workers']:>8}"
              f"{r['utilisation']:>9.4f}±{r['utilisation_se']:.4f}"
              f"{r['utilisation_steady']:>9.4f}{r['utilisation_whole']:>8.3f}"
              f"{_h(r['time_to_target_s']):>11}{r['trials_per_sim_s']:>13.3f}"
              f"{r['busy_per_trial_s']:>8.1f}"
              f"{1e3 * r['driver_s_per_trial']:>8.2f}±{1e3 * r['driver_s_per_trial_se']:.2f}"
              f"{r['model_utilisation']:>8.4f}{r['max_workers_95']:>9,}")
    print("\nmodel vs simulation (constant driver service s per trial, steady window)")
    print(f"{'workers':>8}{'s (ms)':>9}{'D (s)':>8}{'simulated':>11}{'model':>8}{'diff':>8}")
    for c in checks:
        print(f"{c['workers']:>8}{1e3 * c['service_s']:>9.2f}{c['busy_per_trial_s']:>8.1f}"
              f"{c['simulated']:>11.4f}{c['model']:>8.4f}{c['difference']:>+8.4f}")
    for text in YARDSTICKS.values():
        print("yardstick:", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sweeps (< 2 min)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--part", choices=("all", "check", "long"), default="all",
                        help="check: only the clean model check (no pruning, no faults); "
                             "long: one sweep of 16 trials per worker at the largest scale "
                             "(random), past the start-up transient; each added to the JSON "
                             "of an earlier full run")
    parser.add_argument("--per-worker", type=float, default=None,
                        help="trials per worker (budget = max(500, this x workers))")
    args = parser.parse_args(argv)
    seeds = args.seeds or (1 if args.quick else 2)
    per_worker = args.per_worker or (2 if args.quick else 4)
    scales = (64, 256) if args.quick else SCALES
    floor = 200 if args.quick else 500
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    checks_runs: list[dict[str, Any]] = []

    def budget(w: int) -> int:
        return max(floor, int(per_worker * w))

    def sweep(strategy: str) -> None:
        for w in scales:
            for seed in range(seeds):
                r = run_one(workers=w, trials=budget(w), strategy=strategy, seed=seed)
                runs.append(r)
                print(f"{strategy} w={w} seed={seed}: util {r['utilisation']:.4f}, driver "
                      f"{1e3 * r['driver_s_per_trial']:.2f} ms/trial, wall {r['wall_s']:.0f} s, "
                      f"load {r['load_after'][0]:.1f}", flush=True)
                save()

    def save() -> None:  # after every run: a run cut short still leaves its figures
        if args.json:
            write_json(args, runs, checks_runs, seeds, per_worker)

    if args.part == "check":
        return clean_check(args, scales, floor)
    if args.part == "long":
        return long_run(args, scales[-1])
    sweep("random")
    # Model check: the same workload with the driver's service a constant s: the measured one
    # (random, largest scale) and one that puts the model's 95 % knee near 256 workers.
    top = [r for r in summarise(runs) if r["strategy"] == "random"][-1]
    d, s = top["busy_per_trial_s"], top["driver_s_per_trial"]
    for service, ws in ((s, (scales[-1],)), (d / (GOAL * 256), scales)):
        for w in ws:
            checks_runs.append(run_one(workers=w, trials=budget(w), strategy="random", seed=0,
                                       service=service))
            c = checks_runs[-1]
            print(f"check w={w} s={service:.4f}: steady {c['utilisation_steady']:.4f}",
                  flush=True)
            save()
    for strategy in STRATEGIES[1:]:
        sweep(strategy)
    print_tables(summarise(runs), validate(checks_runs))
    print(f"\nwall {time.perf_counter() - started:.0f} s, load {os.getloadavg()}")
    if args.json:
        print(f"wrote {args.json}")
    return 0


def clean_check(args: argparse.Namespace, scales: tuple[int, ...], floor: int) -> int:
    """The model against the simulation where the model's assumptions hold: no pruning, no
    faults, no stragglers, log-normal sigma 0.5 (mean 600 s); the driver's service a constant
    s: the measured one (random, 1,024 workers, from the JSON) and one with the knee at 256."""
    per_worker = args.per_worker or (2 if args.quick else 8)
    earlier = json.loads(args.json.read_text()) if args.json and args.json.exists() else {}
    measured = [r["driver_s_per_trial"] for r in earlier.get("rows", [])
                if r["strategy"] == "random" and r["workers"] == scales[-1]]
    s_measured = measured[0] if measured else 0.005
    runs = []
    for service, ws in ((s_measured, (scales[-1],)), (600.0 / (GOAL * 256), scales)):
        for w in ws:
            runs.append(run_one(workers=w, trials=max(floor, int(per_worker * w)),
                                strategy="random", seed=0, service=service, workload=CLEAN,
                                pruner={"name": "none"}))
            print(f"clean check w={w} s={service:.4f}: steady "
                  f"{runs[-1]['utilisation_steady']:.4f}", flush=True)
    checks = validate(runs)
    print(f"{'workers':>8}{'s (ms)':>9}{'D (s)':>8}{'simulated':>11}{'model':>8}{'diff':>8}"
          f"{'X sim/s':>9}{'X model':>9}")
    for c in checks:
        print(f"{c['workers']:>8}{1e3 * c['service_s']:>9.2f}{c['busy_per_trial_s']:>8.1f}"
              f"{c['simulated']:>11.4f}{c['model']:>8.4f}{c['difference']:>+8.4f}"
              f"{c['throughput_simulated']:>9.3f}{c['throughput_model']:>9.3f}")
    if args.json:
        earlier.update({"model_checks_clean": checks, "clean_check_runs": runs,
                        "clean_check_setup": {"workload": CLEAN, "pruner": "none",
                                              "trials_per_worker": per_worker,
                                              "date": now_iso(),
                                              "load_average": list(os.getloadavg())}})
        args.json.write_text(json.dumps(earlier, indent=1, default=str) + "\n")
        print(f"wrote {args.json}")
    return 0


def long_run(args: argparse.Namespace, workers: int) -> int:
    """A longer sweep (random, 16 trials per worker): the budget window well past the first
    minutes, where short pruned trials turn over faster than in the steady state."""
    per_worker = args.per_worker or (2 if args.quick else 16)
    r = run_one(workers=workers, trials=int(per_worker * workers), strategy="random", seed=0)
    keys = ("utilisation", "utilisation_steady", "utilisation_whole", "trials_per_sim_s",
            "trials_per_sim_s_steady", "busy_per_trial_s", "driver_s_per_trial",
            "submit_s_per_trial", "tell_s_per_trial", "time_to_target_s", "sim_last_start_s",
            "sim_end_s", "wall_s")
    for k in keys:
        print(f"{k:>26}: {r[k]}")
    if args.json:
        earlier = json.loads(args.json.read_text()) if args.json.exists() else {}
        earlier["long_run"] = {**r, "trials_per_worker": per_worker, "date": now_iso()}
        args.json.write_text(json.dumps(earlier, indent=1, default=str) + "\n")
        print(f"wrote {args.json}")
    return 0


def write_json(args: argparse.Namespace, runs: list[dict[str, Any]],
               checks_runs: list[dict[str, Any]], seeds: int, per_worker: float) -> None:
    import distributed
    import optuna

    out = {
        "benchmark": "simulate", "date": now_iso(), "quick": args.quick,
        "machine": machine("optuna", "distributed", "numpy", load_average=list(os.getloadavg())),
        "setup": {"path": "search.Driver + distributed.Client(processes=False) + optuna "
                          "InMemoryStorage, objective simulated:sweep, ASHA(min 1, eta 3)",
                  "workload": "log-normal sigma 1, mean 600 s incl. 5 % stragglers x4; "
                              "2 % raise, 1 % lose their worker; 20 epochs",
                  "target_true_loss": TARGET, "dimensions": DIMENSIONS, "seeds": seeds,
                  "trials_per_worker": per_worker, "goal_utilisation": GOAL,
                  "versions": {"optuna": optuna.__version__,
                               "distributed": distributed.__version__}},
        "rows": summarise(runs) if runs else [], "model_checks": validate(checks_runs),
        "runs": runs, "check_runs": checks_runs, "yardsticks": YARDSTICKS,
        "model": "utilisation = (1 - p0) D / (W s), p0 = 1 / sum_k W!/(W-k)! (s/D)^k "
                 "(machine repairman, M/M/1//W); ~ min(D/(D+s), D/(W s)); W95 ~ D / (0.95 s)",
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1, default=str) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
