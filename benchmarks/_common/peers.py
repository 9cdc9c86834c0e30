"""Peer optimizers on NAS-Bench-201, outside our driver, on the protocol every optimizer shares
(:mod:`.nb201_protocol`: the encoding, the noise model and seeds shared with our driver, the
incumbent rule; its names are re-exported here).

A peer is a :class:`Peer` in :data:`PEERS`: the modules it needs, the pip name to report when
they are missing, and a function that drives a :class:`NoisyCell` problem for ``budget``
evaluations. :func:`missing` tells, without raising, why a peer cannot run here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spaces import NB201_OPS

from .nb201_protocol import (  # re-exported: the protocol is part of what a peer runs on
    EDGE_NAMES,
    EDGES,
    NOISE_STRIDE,
    BudgetSpent,
    NoisyCell,
    decode,
    encode,
    from_config,
    incumbent_curve,
    observe,
)

__all__ = [
    "BudgetSpent",
    "EDGES",
    "EDGE_NAMES",
    "INSTALL_HINT",
    "NOISE_STRIDE",
    "NoisyCell",
    "PEERS",
    "Peer",
    "decode",
    "encode",
    "from_config",
    "incumbent_curve",
    "missing",
    "observe",
    "run_peer",
]

INSTALL_HINT = "pip install -e '.[peers]'"


# --- adapters: each drives problem(ops) exactly `budget` times ------------------------------


def _optuna_tpe(problem: NoisyCell, seed: int, budget: int, options: dict[str, Any]) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed, **options)
    )
    study.optimize(
        lambda t: problem([t.suggest_categorical(n, list(NB201_OPS)) for n in EDGE_NAMES]),
        n_trials=budget,
    )


def _hyperopt_tpe(problem: NoisyCell, seed: int, budget: int, options: dict[str, Any]) -> None:
    from hyperopt import STATUS_OK, Trials, fmin, hp, tpe

    space = {n: hp.choice(n, list(NB201_OPS)) for n in EDGE_NAMES}
    fmin(
        lambda config: {"loss": -problem(from_config(config)), "status": STATUS_OK},
        space,
        algo=tpe.suggest,
        max_evals=budget,
        trials=Trials(),
        rstate=np.random.default_rng(seed),
        show_progressbar=False,
    )


def _smac_hpo(problem: NoisyCell, seed: int, budget: int, options: dict[str, Any]) -> None:
    import tempfile

    from ConfigSpace import Categorical, ConfigurationSpace
    from smac import HyperparameterOptimizationFacade, Scenario
    from smac.runhistory.dataclasses import TrialValue

    cs = ConfigurationSpace(seed=seed)
    cs.add([Categorical(n, list(NB201_OPS)) for n in EDGE_NAMES])
    with tempfile.TemporaryDirectory() as out:
        scenario = Scenario(cs, n_trials=budget, seed=seed, output_directory=out, **options)
        smac = HyperparameterOptimizationFacade(
            scenario, lambda config, seed=0: 0.0, overwrite=True, logging_level=40
        )
        for _ in range(budget):
            info = smac.ask()
            acc = problem(from_config(dict(info.config)))
            smac.tell(info, TrialValue(cost=100.0 - acc))


def _hebo(problem: NoisyCell, seed: int, budget: int, options: dict[str, Any]) -> None:
    import torch
    from hebo.design_space.design_space import DesignSpace
    from hebo.optimizers.hebo import HEBO

    np.random.seed(seed)  # HEBO draws from the global generators
    torch.manual_seed(seed)
    space = DesignSpace().parse(
        [{"name": n, "type": "cat", "categories": list(NB201_OPS)} for n in EDGE_NAMES]
    )
    opt = HEBO(space, **options)
    for _ in range(budget):
        rec = opt.suggest(n_suggestions=1)
        acc = problem(from_config(rec.iloc[0].to_dict()))
        opt.observe(rec, np.array([[100.0 - acc]]))


def _syne_tune(searcher: str) -> Callable[[NoisyCell, int, int, dict[str, Any]], None]:
    def run(problem: NoisyCell, seed: int, budget: int, options: dict[str, Any]) -> None:
        from .syne_tune_loop import ask_tell_loop  # needs the protocol only: no circle

        ask_tell_loop(searcher, problem, seed, budget, options)

    return run


@dataclass(frozen=True)
class Peer:
    """A peer optimizer: what it needs, how to run it, and how it is labelled."""

    description: str
    modules: tuple[str, ...]  # imported to tell whether it can run here
    dist: str  # the PyPI name (and what `[peers]` installs)
    run: Callable[[NoisyCell, int, int, dict[str, Any]], None]
    options: dict[str, Any] = field(default_factory=dict)
    budget_aware: bool = False  # reads the budget: its figure at 50 comes from a 100-run
    install: str = INSTALL_HINT  # what to run when it is missing
    expensive: bool = False  # >= 30 seeds instead of >= 100


PEERS: dict[str, Peer] = {
    "optuna-tpe": Peer("Optuna TPESampler, defaults (outside our driver)", ("optuna",),
                       "optuna", _optuna_tpe),
    "hyperopt-tpe": Peer("hyperopt tpe.suggest, defaults", ("hyperopt",), "hyperopt",
                         _hyperopt_tpe),
    "synetune-re": Peer("Syne Tune RegularizedEvolution, defaults (population 100, sample 10)",
                        ("syne_tune",), "syne-tune", _syne_tune("re")),
    "synetune-re-20": Peer("Syne Tune RegularizedEvolution, population 20, sample 5 (sized for "
                           "100 evaluations; not its default)", ("syne_tune",), "syne-tune",
                           _syne_tune("re"), {"population_size": 20, "sample_size": 5}),
    "synetune-bore": Peer("Syne Tune BORE, defaults (XGBoost classifier)", ("syne_tune",),
                          "syne-tune", _syne_tune("bore"), expensive=True),
    "synetune-kde": Peer("Syne Tune KDE, defaults", ("syne_tune",), "syne-tune",
                         _syne_tune("kde")),
    "smac-hpo": Peer("SMAC3 HyperparameterOptimizationFacade, defaults (random forest; its "
                     "initial design is sized from n_trials = 100)",
                     ("smac", "ConfigSpace"), "smac", _smac_hpo, budget_aware=True,
                     expensive=True),
    "hebo": Peer("HEBO 0.3.6, defaults (installed with --no-deps: its pins conflict with ours)",
                 ("hebo.optimizers.hebo",), "hebo", _hebo, expensive=True,
                 install="pip install --no-deps hebo==0.3.6 disjoint-set (hebo pins "
                 "numpy<1.25 and pymoo==0.6.0; it runs with numpy 2 and pymoo 0.6.2)"),
}


def missing(name: str) -> str | None:
    """None if peer ``name`` can run here; else why not (the exact import error and the
    install hint). Never raises for a missing or broken package."""
    peer = PEERS[name]
    for module in peer.modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 -- any import failure is reported, not raised
            return f"{type(exc).__name__}: {exc} ({peer.install})"
    return None


def run_peer(name: str, dataset: str, seed: int, budget: int) -> NoisyCell:
    """One run of peer ``name``: the problem with its history (exactly ``budget`` evaluations
    unless the peer stopped early)."""
    peer = PEERS[name]
    problem = NoisyCell(dataset=dataset, seed=seed, budget=budget)
    peer.run(problem, seed, budget, dict(peer.options))
    return problem
