"""Peers of the anytime benchmark (``benchmarks/anytime.py``) on a learning-curve table, outside
our driver, each with its library's defaults, on the protocol every tool there shares:

- ``workers`` run at once on the table's clock: a job of ``b`` epochs on the configuration
  nearest to the one asked (``search.simulated._curves``' rule) takes its recorded start plus
  its first ``b`` epochs' recorded seconds, trained from scratch (these tools do not resume);
- a tool sees a job's value when the job ends (Optuna's pruner: after every epoch, as it asks);
  a run that diverged before its ``b``-th epoch is a crash (the library's worst cost);
- nothing starts once the budget (simulated seconds) is spent.

The discrete-event loop below is the peers' harness, not a copy of our driver's rules: what a
free worker does next is each library's own ``ask``.

    .peers-venv/bin/python benchmarks/_common/anytime_peers.py dehb TABLE WORKERS SEED BUDGET_S

prints one JSON line: ``{"reports": [[time, row, epoch, value], ...], "jobs": n, "wall_s": ...,
"versions": {...}}``; ``benchmarks/anytime.py`` scores it as it scores ours.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

if __name__ == "__main__":  # run as a script from the repository root: find search/
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from search.simulated._curves import _index, load_table  # noqa: E402 -- after the path fix


@dataclass
class Job:
    params: dict[str, Any]
    epochs: int
    handle: Any


class Harness:
    """The table's clock and answers for one run of one tool."""

    def __init__(self, path: str, workers: int, budget_s: float) -> None:
        self.table = load_table(path)
        self.index = _index(path)
        self.workers, self.budget_s = workers, budget_s
        sign = 1.0 if self.table.maximize else -1.0
        done = [c[-1] for c, s in zip(self.table.curves, self.table.states, strict=True)
                if s == "complete" and c]
        self.crash = -sign * max(abs(v) for v in done) * 10  # a loss far worse than any seen
        self.sign = sign
        self.reports: list[tuple[float, int, int, float]] = []
        self.jobs = 0

    def loss(self, value: float) -> float:
        """What a minimising library is told for a metric value."""
        return -self.sign * value

    def run(self, ask: Callable[[], Job | None],
            tell: Callable[[Job, float | None, float, bool], None],
            report: Callable[[Job, int, float], bool] | None = None) -> None:
        """Keep ``workers`` jobs running until the budget is spent. ``tell(job, value (None: a
        crash), seconds it ran, stopped)`` when a job ends; with ``report(job, epoch, value) ->
        go on``, the tool judges every epoch (a pruner) and ``stopped`` says it stopped the job,
        else it sees only the job's last epoch."""
        t = self.table
        heap: list[tuple[float, int, Job, int, int, float]] = []  # (when, seq, job, row, ...)
        seq = itertools.count()
        now, free = 0.0, self.workers

        def next_event(job: Job, row: int, epoch: int, start: float) -> None:
            """Epoch ``epoch`` of the job ends (per-epoch tools), or its last one does."""
            last = min(job.epochs, len(t.curves[row]))
            upto = min(epoch, last) if report is not None else last
            at = start + t.start_s[row] + sum(t.epoch_s[row][:upto])
            heapq.heappush(heap, (at, next(seq), job, row, upto, start))

        while True:
            while free and now < self.budget_s:
                job = ask()
                if job is None:
                    break
                self.jobs += 1
                free -= 1
                next_event(job, self.index.nearest(job.params), 1, now)
            if not heap:
                return
            now, _, job, row, epoch, start = heapq.heappop(heap)
            if now > self.budget_s:
                return
            curve = t.curves[row]
            value = curve[epoch - 1]  # (never past the last recorded epoch: next_event)
            if epoch < job.epochs and report is not None:  # a per-epoch tool sees it
                self.reports.append((now, row, epoch, value))
                if not report(job, epoch, value):
                    tell(job, value, now - start, True)  # stopped by the tool
                elif epoch < len(curve):
                    next_event(job, row, epoch + 1, start)
                    continue
                else:
                    tell(job, None, now - start, False)  # the run diverged after this epoch
            elif epoch < job.epochs:  # it diverged before the epochs asked: a crash
                tell(job, None, now - start, False)
            else:
                self.reports.append((now, row, epoch, value))
                tell(job, value, now - start, False)
            free += 1


def configspace(table: Any, seed: int) -> Any:
    """The table's space (its Optuna distributions) as a ConfigSpace space."""
    import ConfigSpace as CS
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
        json_to_distribution,
    )

    cs = CS.ConfigurationSpace(seed=seed)
    for name in sorted(table.distributions):
        d = json_to_distribution(table.distributions[name])
        if isinstance(d, CategoricalDistribution):
            cs.add(CS.Categorical(name, list(d.choices)))
        elif isinstance(d, IntDistribution):
            cs.add(CS.Integer(name, (int(d.low), int(d.high)), log=d.log))
        elif isinstance(d, FloatDistribution):
            cs.add(CS.Float(name, (float(d.low), float(d.high)), log=d.log))
    return cs


def as_dict(config: Any) -> dict[str, Any]:
    return dict(config) if not isinstance(config, dict) else config


def run_dehb(h: Harness, seed: int) -> None:
    from dehb import DEHB
    from loguru import logger

    logger.remove()  # DEHB logs every step to stdout, where this script's answer goes
    logger.add(sys.stderr, level="ERROR")
    cs = configspace(h.table, seed)
    dehb = DEHB(cs=cs, dimensions=len(list(cs.values())), min_fidelity=1,
                max_fidelity=h.table.epochs, n_workers=h.workers, seed=seed,
                output_path=tempfile.mkdtemp(prefix="dehb-"), save_freq="end")

    def ask() -> Job:
        info = dehb.ask()
        config = info["config"]
        if not isinstance(config, dict) and not hasattr(config, "keys"):  # a vector
            config = dehb.vector_to_configspace(config)
        return Job(as_dict(config), max(1, round(float(info["fidelity"]))), info)

    def tell(job: Job, value: float | None, seconds: float, stopped: bool) -> None:
        loss = h.crash if value is None else h.loss(value)
        dehb.tell(job.handle, {"fitness": loss, "cost": seconds})

    h.run(ask, tell)


def run_smac(h: Harness, seed: int, facade: str) -> None:
    from smac import HyperbandFacade, MultiFidelityFacade, Scenario
    from smac.runhistory.dataclasses import TrialValue

    cs = configspace(h.table, seed)
    scenario = Scenario(cs, deterministic=True, n_trials=10**9, min_budget=1,
                        max_budget=h.table.epochs, seed=seed,
                        output_directory=tempfile.mkdtemp(prefix="smac-"))
    cls = MultiFidelityFacade if facade == "mf" else HyperbandFacade
    smac = cls(scenario, lambda config, seed=0, budget=1: 0.0, overwrite=True,
               logging_level=40)

    def ask() -> Job:
        info = smac.ask()
        return Job(as_dict(info.config), max(1, round(float(info.budget or h.table.epochs))), info)

    def tell(job: Job, value: float | None, seconds: float, stopped: bool) -> None:
        loss = h.crash if value is None else h.loss(value)
        smac.tell(job.handle, TrialValue(cost=loss, time=seconds))

    h.run(ask, tell)


def run_optuna_tpe_hyperband(h: Harness, seed: int) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    from optuna.distributions import json_to_distribution

    dists = {n: json_to_distribution(d) for n, d in h.table.distributions.items()}
    study = optuna.create_study(
        direction="maximize" if h.table.maximize else "minimize",
        sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=optuna.pruners.HyperbandPruner(min_resource=1, max_resource=h.table.epochs))

    def ask() -> Job:
        trial = study.ask(dists)
        return Job(dict(trial.params), h.table.epochs, trial)

    def report(job: Job, epoch: int, value: float) -> bool:
        job.handle.report(value, epoch)
        return not job.handle.should_prune()

    def tell(job: Job, value: float | None, seconds: float, stopped: bool) -> None:
        if value is None:
            study.tell(job.handle, state=optuna.trial.TrialState.FAIL)
        elif stopped:
            study.tell(job.handle, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(job.handle, value)

    h.run(ask, tell, report)


def run_synetune(h: Harness, seed: int, method: str) -> None:
    """Syne Tune's own simulator (``UserBlackboxBackend`` + ``SimulatorCallback``): the table
    as a blackbox whose configurations are answered by the nearest recorded one, each epoch's
    elapsed time the recorded start and epochs; its scheduler decides stops and promotions.
    Its results go to a temporary folder (``SYNETUNE_FOLDER``), removed after."""
    os.environ["SYNETUNE_FOLDER"] = tempfile.mkdtemp(prefix="synetune-")
    import contextlib
    import inspect
    import shutil

    import numpy as np
    from optuna.distributions import (
        CategoricalDistribution,
        IntDistribution,
        json_to_distribution,
    )
    from syne_tune import StoppingCriterion, Tuner
    from syne_tune.backend.simulator_backend.simulator_backend import SimulatorConfig
    from syne_tune.backend.simulator_backend.simulator_callback import SimulatorCallback
    from syne_tune.blackbox_repository.blackbox import Blackbox
    from syne_tune.blackbox_repository.simulated_tabular_backend import UserBlackboxBackend
    from syne_tune.config_space import choice, lograndint, loguniform, randint, uniform
    from syne_tune.experiments import load_experiment
    from syne_tune.optimizer import baselines

    t, epochs = h.table, h.table.epochs
    space: dict[str, Any] = {}
    for name, raw in t.distributions.items():
        d = json_to_distribution(raw)
        if isinstance(d, CategoricalDistribution):
            space[name] = choice(list(d.choices))
        elif isinstance(d, IntDistribution):
            space[name] = (lograndint if d.log else randint)(int(d.low), int(d.high))
        else:
            space[name] = (loguniform if d.log else uniform)(float(d.low), float(d.high))
    worst = h.crash * -h.sign  # a crash as a metric value

    class TableBlackbox(Blackbox):
        def __init__(self) -> None:
            super().__init__(configuration_space=space,
                             fidelity_space={"epoch": randint(1, epochs)},
                             objectives_names=["value", "elapsed_time"])

        @property
        def fidelity_values(self) -> np.ndarray:
            return np.arange(1, epochs + 1)

        def _objective_function(self, configuration: dict[str, Any],
                                fidelity: dict | None = None, seed: int | None = None) -> Any:
            row = h.index.nearest(configuration)
            curve, times = t.curves[row], np.cumsum([t.start_s[row], *t.epoch_s[row]])[1:]
            out = np.zeros((epochs, 2))
            for k in range(epochs):  # after a divergence: a crash, at no further cost
                out[k] = (curve[k], times[k]) if k < len(curve) else (worst, times[-1])
            if fidelity is None:
                return out
            k = int(fidelity["epoch"]) - 1
            return {"value": out[k, 0], "elapsed_time": out[k, 1]}

    cls = getattr(baselines, method)
    if "do_minimize" in inspect.signature(cls).parameters:  # Syne Tune 0.14 and later
        names = {"time_attr": "epoch", "do_minimize": not t.maximize}
    else:  # 0.13, the last with MOBSTER and Hyper-Tune (benchmarks/peers_venv.sh: its own venv)
        names = {"resource_attr": "epoch", "mode": "max" if t.maximize else "min"}
    scheduler = cls(space, metric="value", max_t=epochs, random_seed=seed, **names)
    # Its tuner polls the workers every ``tuner_sleep_time`` simulated seconds (5 s by default:
    # longer than a whole diabetes trial); a twentieth of the median epoch keeps its scheduler
    # about as prompt as our driver on this clock.
    epoch_s = sorted(s for row in t.epoch_s for s in row)
    # The protocol charges no tool for its decisions or messages: Syne Tune's simulator by default
    # adds 0.05 s per start, stop and report (8 diabetes epochs each) and the real time its
    # scheduler spends; both are set to nothing here, as our driver's service time is on this
    # clock (search.simulated._clock: "curves" 0.0) and the other peers' asks cost nothing.
    backend = UserBlackboxBackend(blackbox=TableBlackbox(), elapsed_time_attr="elapsed_time",
                                  tuner_sleep_time=epoch_s[len(epoch_s) // 2] / 20,
                                  simulator_config=SimulatorConfig(
                                      delay_on_trial_result=0.0,
                                      delay_complete_after_final_report=0.0,
                                      delay_complete_after_stop=0.0, delay_start=0.0,
                                      delay_stop=0.0))
    backend.time_keeper.real_time_since_last_recent_exit = lambda: 0.0
    tuner = Tuner(trial_backend=backend, scheduler=scheduler,
                  stop_criterion=StoppingCriterion(max_wallclock_time=h.budget_s),
                  n_workers=h.workers, sleep_time=0, callbacks=[SimulatorCallback()],
                  save_tuner=False, suffix_tuner_name=True, metadata={"seed": seed})
    with contextlib.redirect_stdout(sys.stderr):  # its banner and progress: not our answer
        tuner.run()
    results = load_experiment(tuner.name).results
    shutil.rmtree(os.environ["SYNETUNE_FOLDER"], ignore_errors=True)
    configs = {}
    for _, r in results.iterrows():
        trial = int(r["trial_id"])
        if trial not in configs:
            configs[trial] = h.index.nearest(
                {n: r[f"config_{n}"] for n in space if f"config_{n}" in r})
        if r["st_tuner_time"] <= h.budget_s and math.isfinite(r["value"]) and r["value"] != worst:
            h.reports.append((float(r["st_tuner_time"]), configs[trial], int(r["epoch"]),
                              float(r["value"])))
    h.jobs = len(configs)


PEERS: dict[str, Callable[[Harness, int], None]] = {
    "synetune-asha": lambda h, s: run_synetune(h, s, "ASHA"),
    "synetune-bohb": lambda h, s: run_synetune(h, s, "BOHB"),
    # Syne Tune 0.13 (0.14 dropped them): its own environment, --peer-python TOOL=PATH
    "synetune-mobster": lambda h, s: run_synetune(h, s, "MOBSTER"),
    "synetune-hypertune": lambda h, s: run_synetune(h, s, "HyperTune"),
    "dehb": run_dehb,
    "smac-hyperband": lambda h, s: run_smac(h, s, "hb"),
    "smac-mf": lambda h, s: run_smac(h, s, "mf"),  # SMAC3's BOHB-like facade (RF + Hyperband)
    "optuna-tpe-hyperband": run_optuna_tpe_hyperband,
}


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("dehb", "smac", "optuna", "ConfigSpace", "syne-tune", "numpy"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out


def main(argv: list[str]) -> int:
    name, path, workers, seed, budget = argv
    if name not in PEERS:
        print(f"unknown peer {name!r} (known: {list(PEERS)})", file=sys.stderr)
        return 2
    h = Harness(path, int(workers), float(budget))
    started = time.perf_counter()
    PEERS[name](h, int(seed))
    answer = json.dumps({"reports": h.reports, "jobs": h.jobs,
                         "wall_s": round(time.perf_counter() - started, 2),
                         "versions": versions()})
    # straight to file descriptor 1: Syne Tune 0.13 leaves sys.stdout pointing elsewhere
    os.write(1, (answer + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
