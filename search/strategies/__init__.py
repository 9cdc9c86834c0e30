"""Search strategies as Optuna samplers, and the registry that maps a study file's strategy and
pruner names to them.
May import optuna, torch, numpy, ``spaces``, ``training.contract``, ``search.pruners`` and
``search._errors``.

Search strategies that Optuna lacks, as Optuna samplers: aging evolution, a REINFORCE
controller, NSGA-II's child generation with the genome operators, and a predictor (a Gaussian
process over the space's embedding).

Each reads its state (population, policy) from the study's trials in storage, so a resumed study
continues where it stopped; each is seeded per trial (same seed, same sequence).
"""

import importlib
from typing import Any

from search.strategies._base import ProposalSampler, candidate_key
from search.strategies._evolution import EvolutionSampler
from search.strategies._gp import WindowedGPSampler
from search.strategies._nsga2 import GenomeChildGeneration, GenomeNSGAIISampler
from search.strategies._predictor import PredictorSampler
from search.strategies._reinforce import Policy, ReinforceSampler
from search.strategies._tpe import DistinctTPESampler

__all__ = [
    "DistinctTPESampler",
    "EvolutionSampler",
    "GenomeChildGeneration",
    "GenomeNSGAIISampler",
    "PRUNERS",
    "Policy",
    "PredictorSampler",
    "ProposalSampler",
    "PrunerSpec",
    "ReinforceSampler",
    "STRATEGIES",
    "STRATEGY_OPTIONS",
    "WindowedGPSampler",
    "build_sampler",
    "candidate_key",
    "pruner_spec",
]

# The registry (names -> samplers and pruners) on first use: it imports
# training.contract.
_LAZY = {
    "STRATEGIES": "search.strategies._registry",
    "STRATEGY_OPTIONS": "search.strategies._registry",
    "PRUNERS": "search.strategies._registry",
    "PrunerSpec": "search.strategies._registry",
    "build_sampler": "search.strategies._registry",
    "pruner_spec": "search.strategies._registry",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
