"""The distributed algorithms: sync SGD (bucketed overlapping allreduce), ASGD (one-sided state
exchange), the baselines (SimuParallelSGD, local SGD, BATCH) and paced ranks for experiments.
Add an algorithm: a subclass of :class:`Algorithm` in its own module, one line in ``ALGORITHMS``.

The registry and ``Pace`` import neither torch nor MPI (the driver reads the names); the rest
loads on first use.
"""

from training._lazy import lazy
from training.algorithms._pace import Pace
from training.algorithms._registry import ALGORITHMS, algorithm_class, make_algorithm

__getattr__ = lazy(__name__, {
    "Algorithm": "_base",
    "average_parameters": "_base",
    "broadcast_parameters": "_base",
    "flat_parameters": "_base",
    "set_flat_parameters": "_base",
    "GradientAllreduce": "_sync",
    "SyncSGD": "_sync",
    "ASGD": "_asgd",
    "BatchGD": "_baselines",
    "LocalSGD": "_baselines",
    "SimuParallelSGD": "_baselines",
})

__all__ = [
    "ALGORITHMS", "ASGD", "Algorithm", "BatchGD", "GradientAllreduce", "LocalSGD", "Pace",
    "SimuParallelSGD", "SyncSGD", "algorithm_class", "average_parameters",
    "broadcast_parameters", "flat_parameters", "make_algorithm", "set_flat_parameters",
]
