"""The session: the one front of the training core on a trial's ranks (rank, size, device,
each rank's data shard, the model and optimizer wrapped with an algorithm, ``report`` with the
pruner's decision on every rank, checkpoints), the bounded agreement on its calls, and rank 0's
reporting to the Optuna trial. Reporting needs only Optuna; the session loads torch on use.
"""

from training._lazy import lazy
from training.session._decisions import (
    CONTINUE,
    PAUSE,
    STOP,
    VECTOR_ATTR,
    Decision,
    NullReporter,
    Reporter,
)
from training.session._reporting import OptunaReporter, StaleTrial, build_pruner, trial_reporter

__getattr__ = lazy(__name__, {
    "Session": "_session",
    "describe_device": "_session",
    "pick_device": "_session",
    "DistributedOptimizer": "_wrap",
    "wrap": "_wrap",
})

__all__ = [
    "CONTINUE", "PAUSE", "STOP", "VECTOR_ATTR", "Decision", "DistributedOptimizer",
    "NullReporter", "OptunaReporter", "Reporter", "Session", "StaleTrial", "build_pruner",
    "describe_device",
    "pick_device", "trial_reporter", "wrap",
]
