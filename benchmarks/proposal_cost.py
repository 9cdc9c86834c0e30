"""What one proposal costs as a study grows: ask latency of every strategy at 100, 1,000 and
10,000 finished trials with 1, 64 and 1,024 trials running, on a genome space and a flat space.

What is measured: a study in Optuna's in-memory storage is filled with ``finished`` COMPLETE
trials (uniform draws from the space, synthetic values) and ``running`` RUNNING trials (uniform
draws too), then the strategy, built as ``open_study`` builds it (``search.strategies._registry
.build_sampler``, seed 0, its defaults), proposes ``--asks`` trials: ``study.ask()`` plus
``space.suggest(trial)``, each timed alone; each asked trial is then failed, so the study keeps
its size. The first ask of a sampler is timed apart (``first_ms``: it builds incremental state
such as REINFORCE's replayed policy or the key caches); ``ms`` is the median of the others.
``reads`` counts the trials the sampler read from storage per proposal (``get_all_trials``
results, summed): what a remote storage would ship. ``cpu_ms`` is the median CPU time of the
proposing process (``time.process_time``; GP runs torch on one thread, so every strategy
proposes on one core): on a shared machine under load, wall time (``ms``) grows with the load
and CPU time does not, so the goal is judged on both (``goal.met``, ``goal.met_cpu``).

Spaces: ``cell`` (NAS-Bench-201's cell, 6 categorical decisions) and ``flat`` (a log-float, an
int, a categorical). Multi-objective NSGA-II is measured on two synthetic objectives.

Goal (issue 18): every strategy but GP proposes in <= 50 ms at 10,000 finished and 1,024
running trials. TPE and GP fit their model on a window of the trials (the best of all and the
most recent: their ``window`` option, defaults 1,000 and 200); the yardstick beside them is the
same strategy fitting every trial (``tpe:window=0``, ``gp:window=0``), as Optuna does. GP on
every trial refits a Gaussian process on all of them each ask (cubic in the trials); it is
measured up to ``--gp-max`` finished trials (default 1,000) and marked above.

A strategy is named alone (its defaults) or with options, ``tpe:window=0`` (values read as
TOML); by default every registered strategy and the two yardsticks.

The JSON: ``{"results": [{"strategy", "space", "finished", "running", "first_ms", "ms",
"max_ms", "reads"}], "goal": ..., "machine": ..., "load": [1, 5, 15 min] at the end,
"load_start": the same at the start}``.

``reads`` above is what the in-memory storage hands the sampler (every trial, once per listing).
What a remote storage ships is another figure: ``--remote-reads`` grows one SQLite study to each
size and counts the trials the RDB backend returns per proposal through Optuna's cached storage
(it re-reads only the unfinished trials and the new ones), for every strategy; the goal
"storage reads per proposal do not grow with the study" is judged on these rows
(``proposal_cost_remote.json``).

Command::

    python benchmarks/proposal_cost.py [--quick] [--json PATH] [--strategies S ...]
                                       [--finished N ...] [--running N ...] [--asks K]
                                       [--remote-reads]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import tomllib
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import torch
from _common import machine, now_iso  # benchmarks/_common/ (the script directory)
from optuna.trial import TrialState

import spaces
from search.strategies._base import draw, uniform_choice
from search.strategies._registry import STRATEGIES, build_sampler
from training.storage import RetryingStorage

GOAL_MS = 50.0
SPACES = {
    "cell": spaces.Space({"genome": spaces.CellFamily()}),
    "flat": spaces.Space({
        "lr": spaces.Float(low=1e-5, high=1.0, log=True),
        "width": spaces.Int(low=8, high=512),
        "act": spaces.Categorical(("relu", "tanh", "gelu")),
    }),
}
MULTI = {"nsga2"}
YARDSTICKS = ["tpe:window=0", "gp:window=0"]  # the model fitted on every trial, as Optuna does
UNBOUNDED = {"gp:window=0"}  # measured up to --gp-max finished trials only


def split_label(label: str) -> tuple[str, dict[str, Any]]:
    """``"tpe:window=0,ei_candidates=24"`` -> ``("tpe", {"window": 0, "ei_candidates": 24})``."""
    name, _, rest = label.partition(":")
    options: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        options[key.strip()] = tomllib.loads(f"v = {value.strip()}")["v"]
    return name, options


class CountingStorage(optuna.storages.InMemoryStorage):
    """In-memory storage that counts the trials its readers are handed."""

    def __init__(self) -> None:
        super().__init__()
        self.read = 0

    def get_all_trials(self, *args: Any, **kwargs: Any) -> list[optuna.trial.FrozenTrial]:
        trials = super().get_all_trials(*args, **kwargs)
        self.read += len(trials)
        return trials


def _trials(space: spaces.Space, n: int, state: TrialState, objectives: int,
            rng: np.random.Generator) -> list[optuna.trial.FrozenTrial]:
    out = []
    for _ in range(n):
        rec = draw(space, uniform_choice, rng)
        values = [float(v) for v in rng.normal(size=objectives)] if state.is_finished() else None
        out.append(optuna.trial.create_trial(
            params=rec.params, distributions=rec.distributions, state=state, values=values))
    return out


def measure(strategy: str, space_name: str, finished: int, running: int,
            asks: int) -> dict[str, Any]:
    space = SPACES[space_name]
    name, options = split_label(strategy)
    directions = ["maximize", "minimize"] if name in MULTI else ["maximize"]
    storage = CountingStorage()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sampler = build_sampler(name, options, 0, space, directions)
        study = optuna.create_study(storage=storage, sampler=sampler, directions=directions)
        rng = np.random.default_rng(0)
        study.add_trials(_trials(space, finished, TrialState.COMPLETE, len(directions), rng))
        study.add_trials(_trials(space, running, TrialState.RUNNING, len(directions), rng))
        times, cpu, reads = [], [], []
        for _ in range(asks + 1):
            before = storage.read
            started, cpu_started = time.perf_counter(), time.process_time()
            trial = study.ask()
            space.suggest(trial)
            times.append(1000 * (time.perf_counter() - started))
            cpu.append(1000 * (time.process_time() - cpu_started))
            reads.append(storage.read - before)
            study.tell(trial, state=TrialState.FAIL)
    rest = times[1:] or times
    return {
        "strategy": strategy, "space": space_name, "finished": finished, "running": running,
        "first_ms": times[0], "ms": statistics.median(rest), "max_ms": max(rest),
        "cpu_first_ms": cpu[0], "cpu_ms": statistics.median(cpu[1:] or cpu),
        "reads": statistics.median(reads[1:] or reads), "load1": os.getloadavg()[0],
    }


def remote_reads(strategies: list[str], finished: list[int], running: int, asks: int,
                 directory: Path) -> list[dict[str, Any]]:
    """Rows the storage itself ships per proposal: one SQLite study (cell space, ``running``
    RUNNING trials first) grown to each size in ``finished``, opened as ``search run`` opens a
    PostgreSQL URL (``RetryingStorage`` over Optuna's cached storage over the RDB backend: the
    queue of WAITING trials is read from the database alone); every strategy proposes
    ``asks + 1`` times; the trials its backend query returns (``RDBStorage._get_trials``, what
    a PostgreSQL server would send) are counted per proposal, the first apart (it also catches
    up on the trials added since the last strategy read the study)."""
    space = SPACES["cell"]
    # The stack `search run` builds on a PostgreSQL URL (training.storage._storage._open_storage),
    # here over a SQLite file: RetryingStorage(_CachedStorage(RDBStorage)).
    backend = optuna.storages.RDBStorage(f"sqlite:///{directory / 'remote.db'}")
    storage = RetryingStorage(  # type: ignore[abstract]
        optuna.storages.get_storage(backend), what="sqlite"
    )
    shipped = [0]
    query = backend._get_trials  # noqa: SLF001 - the one read _CachedStorage makes per ask

    def counted(*args: Any, **kwargs: Any) -> list[optuna.trial.FrozenTrial]:
        trials = query(*args, **kwargs)
        shipped[0] += len(trials)
        return trials

    backend._get_trials = counted  # type: ignore[method-assign]  # noqa: SLF001
    study = optuna.create_study(storage=storage, study_name="remote", direction="maximize")
    rng = np.random.default_rng(0)
    study.add_trials(_trials(space, running, TrialState.RUNNING, 1, rng))
    rows: list[dict[str, Any]] = []
    have = 0
    for n in sorted(finished):
        study.add_trials(_trials(space, n - have, TrialState.COMPLETE, 1, rng))
        have = n
        for strategy in strategies:
            name, options = split_label(strategy)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sampler = build_sampler(name, options, 0, space, ["maximize"])
                opened = optuna.load_study(study_name="remote", storage=storage, sampler=sampler)
                per_ask = []
                for _ in range(asks + 1):
                    before = shipped[0]
                    trial = opened.ask()
                    space.suggest(trial)
                    per_ask.append(shipped[0] - before)
                    opened.tell(trial, state=TrialState.FAIL)
            row = {"strategy": strategy, "finished": n, "running": running,
                   "first_rows": per_ask[0], "rows": statistics.median(per_ask[1:]),
                   "max_rows": max(per_ask[1:])}
            rows.append(row)
            print(f"remote {strategy:12} finished {n:6} running {running:5}: "
                  f"{row['rows']:6.0f} rows per proposal (first {row['first_rows']})", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="100/1,000 finished, 1/64 running, 3 asks")
    p.add_argument("--json", help="write the figures to this JSON file")
    p.add_argument("--strategies", nargs="+",  # auto runs one of the others
                   default=[*(s for s in STRATEGIES if s != "auto"), *YARDSTICKS])
    p.add_argument("--spaces", nargs="+", default=list(SPACES), choices=list(SPACES))
    p.add_argument("--finished", nargs="+", type=int)
    p.add_argument("--running", nargs="+", type=int)
    p.add_argument("--asks", type=int, help="timed proposals per cell (default 5, quick 3)")
    p.add_argument(
        "--torch-threads", type=int, default=1,
        help="torch threads for GP (default 1: GP's matrices here are at most a few hundred "
        "rows, and on a shared, loaded machine two threads made a 100 x 100 matmul 15x slower)",
    )
    p.add_argument(
        "--gp-max", type=int, default=1000, help="largest study gp:window=0 is measured on"
    )
    p.add_argument(
        "--remote-reads", action="store_true",
        help="measure instead the rows a SQLite storage ships per proposal as the study grows "
        "(cell space, --running's first value, default 64)",
    )
    args = p.parse_args(argv)
    finished = args.finished or ([100, 1000] if args.quick else [100, 1000, 10000])
    if args.remote_reads:
        return _main_remote(args, finished)
    running = args.running or ([1, 64] if args.quick else [1, 64, 1024])
    asks = args.asks or (3 if args.quick else 5)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    torch.set_num_threads(args.torch_threads)
    load_start = list(os.getloadavg())
    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    for space_name in args.spaces:
        for strategy in args.strategies:
            for n in finished:
                for r in running:
                    if strategy in UNBOUNDED and n > args.gp_max:
                        results.append({"strategy": strategy, "space": space_name,
                                        "finished": n, "running": r,
                                        "skipped": f"measured up to {args.gp_max} finished"})
                        continue
                    row = measure(strategy, space_name, n, r, asks)
                    results.append(row)
                    print(f"{space_name:5} {strategy:12} finished {n:6} running {r:5}: "
                          f"{row['ms']:8.1f} ms (first {row['first_ms']:8.1f}, max "
                          f"{row['max_ms']:8.1f}), cpu {row['cpu_ms']:8.1f} ms, "
                          f"{row['reads']:7.0f} trials read, load {row['load1']:.1f}",
                          flush=True)
    big = [r for r in results if "ms" in r and split_label(r["strategy"])[0] != "gp"
           and r["strategy"] not in YARDSTICKS
           and r["finished"] == max(finished) and r["running"] == max(running)]
    goal = {
        "text": f"every strategy but gp <= {GOAL_MS:.0f} ms at {max(finished)} finished and "
        f"{max(running)} running",
        "worst": max(big, key=lambda r: r["ms"]) if big else None,
        "met": bool(big) and all(r["ms"] <= GOAL_MS for r in big),
        "met_cpu": bool(big) and all(r["cpu_ms"] <= GOAL_MS for r in big),
        "worst_cpu": max(big, key=lambda r: r["cpu_ms"]) if big else None,
    }
    print(f"goal: {goal['text']}: {'met' if goal['met'] else 'not met'}"
          + (f" (worst {goal['worst']['strategy']} on {goal['worst']['space']}: "
             f"{goal['worst']['ms']:.1f} ms)" if goal["worst"] else "")
          + f"; in CPU time: {'met' if goal['met_cpu'] else 'not met'}"
          + (f" (worst {goal['worst_cpu']['strategy']} on {goal['worst_cpu']['space']}: "
             f"{goal['worst_cpu']['cpu_ms']:.1f} ms)" if goal["worst_cpu"] else ""))
    if args.json:
        doc = {
            "benchmark": "proposal_cost",
            "date": now_iso(),
            "machine": machine("optuna", "numpy", "torch"),
            "load": list(os.getloadavg()),
            "load_start": load_start,
            "settings": {"finished": finished, "running": running, "asks": asks,
                         "gp_max": args.gp_max, "quick": args.quick,
                         "torch_threads": args.torch_threads,
                         "total_s": time.perf_counter() - started},
            "goal": goal,
            "results": results,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.json}")
    return 0


def _main_remote(args: argparse.Namespace, finished: list[int]) -> int:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    torch.set_num_threads(args.torch_threads)
    running = (args.running or [64])[0]
    asks = args.asks or (3 if args.quick else 5)
    strategies = [s for s in args.strategies if s not in YARDSTICKS]
    load_start, started = list(os.getloadavg()), time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        rows = remote_reads(strategies, finished, running, asks, Path(tmp))
    flat = {r["strategy"]: [x["rows"] for x in rows if x["strategy"] == r["strategy"]]
            for r in rows}
    goal = {"text": "storage reads per proposal do not grow with the study",
            "met": all(max(v) <= min(v) for v in flat.values()),
            "rows_by_size": flat}
    print(f"goal: {goal['text']}: {'met' if goal['met'] else 'not met'}")
    if args.json:
        doc = {"benchmark": "proposal_cost_remote", "date": now_iso(),
               "machine": machine("optuna", "numpy", "torch"), "load": list(os.getloadavg()),
               "load_start": load_start,
               "settings": {"finished": finished, "running": running, "asks": asks,
                            "storage": "sqlite (Optuna's _CachedStorage over RDBStorage)",
                            "total_s": time.perf_counter() - started},
               "goal": goal, "results": rows}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
