"""How one candidate trains: offline datasets, the model builder, synchronous data-parallel
SGD over MPI, the worker program (``python -m training.worker``) and its launcher.

Importing this package is cheap: torch and mpi4py load only inside the MPI job.
The driver-side surface is :mod:`training.contract` (what both sides share) and
:mod:`training.launch` (starting a trial's job).
"""

from typing import TYPE_CHECKING

from training._config import METRICS, SEARCHABLE, TrainConfig
from training._data import DATASETS, Dataset, load_dataset
from training._spec import TrialSpec

if TYPE_CHECKING:
    from training._session import Session


def __getattr__(name: str) -> object:
    """``training.Session`` (a user's own loop) loads torch and mpi4py: only when asked for."""
    if name == "Session":
        from training._session import Session

        return Session
    raise AttributeError(f"module 'training' has no attribute {name!r}")


__all__ = [
    "DATASETS",
    "METRICS",
    "SEARCHABLE",
    "Session",
    "Dataset",
    "TrainConfig",
    "TrialSpec",
    "load_dataset",
]
