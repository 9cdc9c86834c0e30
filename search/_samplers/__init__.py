"""Search strategies that Optuna lacks, as Optuna samplers: aging evolution, a REINFORCE
controller, NSGA-II's child generation with the genome operators, and a predictor (a Gaussian
process over the space's embedding).

Each reads its state (population, policy) from the study's trials in storage, so a resumed study
continues where it stopped; each is seeded per trial (same seed, same sequence).
"""

from search._samplers._base import ProposalSampler, candidate_key
from search._samplers._evolution import EvolutionSampler
from search._samplers._gp import WindowedGPSampler
from search._samplers._nsga2 import GenomeChildGeneration, GenomeNSGAIISampler
from search._samplers._predictor import PredictorSampler
from search._samplers._reinforce import Policy, ReinforceSampler
from search._samplers._tpe import DistinctTPESampler

__all__ = [
    "DistinctTPESampler",
    "EvolutionSampler",
    "GenomeChildGeneration",
    "GenomeNSGAIISampler",
    "Policy",
    "PredictorSampler",
    "ProposalSampler",
    "ReinforceSampler",
    "WindowedGPSampler",
    "candidate_key",
]
