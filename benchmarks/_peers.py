"""Peer optimizers on NAS-Bench-201, outside our driver, on the protocol every optimizer shares.

The protocol (identical for our strategies, which ``benchmarks/nb201.py`` runs through
``search.Driver``): the search space is 6 categorical decisions, one per cell edge in NB201's
edge order (0->1, 0->2, 1->2, 0->3, 1->3, 2->3), each among the 5 ops of
:data:`spaces.NB201_OPS`. Each evaluation is answered by :func:`search._nb201.evaluate` -- the
200-epoch validation accuracy of *one* random training seed -- with the noise seed the driver
would use (``run seed * 1_000_003 + evaluation index``), so a peer and our strategy with the same
run seed draw from the same noise stream. Evaluations are sequential. The incumbent is the
evaluation with the best *observed* value (the first one on ties, as in ``nb201.run_one``), and a
run is scored by the table's seed-averaged accuracy of that incumbent
(:func:`search._nb201.mean_accuracy`).

A peer is a :class:`Peer` in :data:`PEERS`: the modules it needs, the pip name to report when
they are missing, and a function that drives a :class:`NoisyCell` problem for ``budget``
evaluations. :func:`missing` tells, without raising, why a peer cannot run here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spaces import NB201_OPS

EDGES = ("1<-0", "2<-0", "2<-1", "3<-0", "3<-1", "3<-2")  # NB201 edge order, genome order
EDGE_NAMES = tuple(f"edge{i}" for i in range(len(EDGES)))  # hyperparameter names for peers
NOISE_STRIDE = 1_000_003  # search._driver: noise seed = strategy seed * stride + trial number
INSTALL_HINT = "pip install -e '.[peers]'"


def encode(ops: Sequence[str]) -> str:
    """Six op names in NB201 edge order -> the table key (``"333132"`` for the best CIFAR-10
    cell); a ValueError naming the edge for anything else. Every one of the 5**6 = 15,625
    keys is a table row, also the cells with no path from input to output (which
    :class:`~spaces.CellGenome` refuses and our cell space never proposes): a peer searches the
    flat 6-categorical space."""
    ops = tuple(ops)
    if len(ops) != len(EDGES):
        raise ValueError(f"ops: expected {len(EDGES)} edges in NB201 order, got {len(ops)}")
    for name, op in zip(EDGE_NAMES, ops, strict=True):
        if op not in NB201_OPS:
            raise ValueError(f"{name}: {op!r} is not an NB201 op {list(NB201_OPS)}")
    return "".join(str(NB201_OPS.index(op)) for op in ops)


def decode(key: str) -> tuple[str, ...]:
    """The table key -> six op names (inverse of :func:`encode`)."""
    if len(key) != len(EDGES) or any(c not in "01234" for c in key):
        raise ValueError(f"key: expected 6 digits 0-4, got {key!r}")
    return tuple(NB201_OPS[int(c)] for c in key)


def from_config(config: dict[str, Any]) -> tuple[str, ...]:
    """A peer's configuration ``{"edge0": op, ..., "edge5": op}`` -> ops in edge order."""
    return tuple(str(config[name]) for name in EDGE_NAMES)


class BudgetSpent(RuntimeError):
    """A peer asked for more evaluations than its budget."""


@dataclass
class NoisyCell:
    """One run's objective: ``problem(ops)`` -> the observed (one-seed) accuracy in percent.

    Keeps the history (key, observed) in evaluation order; :meth:`incumbent_curve` scores it.
    """

    dataset: str
    seed: int
    budget: int
    keys: list[str] = field(default_factory=list)
    observed: list[float] = field(default_factory=list)

    def __call__(self, ops: Sequence[str]) -> float:
        if len(self.keys) >= self.budget:
            raise BudgetSpent(f"budget of {self.budget} evaluations spent")
        key = encode(ops)
        value = observe(key, self.dataset, self.seed * NOISE_STRIDE + len(self.keys))
        self.keys.append(key)
        self.observed.append(value)
        return value

    def incumbent_curve(self) -> list[float]:
        """After each evaluation, the seed-averaged accuracy of the best observed cell so far."""
        return incumbent_curve(self.keys, self.observed, self.dataset)


def observe(key: str, dataset: str, noise_seed: int) -> float:
    """One noisy evaluation of table key ``key``: exactly :func:`search._nb201.evaluate`'s
    noise model (one training seed drawn by ``np.random.default_rng(noise_seed)``), on the key
    rather than a genome, so disconnected cells answer too."""
    from search._nb201 import table

    t = table(dataset)
    row = t.rows[key]
    seed = int(np.random.default_rng(noise_seed).integers(t.seeds[row]))
    return float(t.accuracy[row, seed])


def incumbent_curve(keys: Sequence[str], observed: Sequence[float], dataset: str) -> list[float]:
    """The incumbent rule: the best observed value so far (first on ties), scored by the
    table's seed mean."""
    from search._nb201 import mean_accuracy

    best, score, curve = -np.inf, np.nan, []
    for key, value in zip(keys, observed, strict=True):
        if value > best:
            best, score = value, mean_accuracy(key, dataset)
        curve.append(score)
    return curve


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
        from _syne_tune import ask_tell_loop  # benchmarks/_syne_tune.py

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
