"""How one candidate trains: offline datasets, the model builder, synchronous data-parallel
SGD over MPI, the worker program (``python -m training.worker``) and its launcher.

What users bring (``[training] model``, ``dataset``, ``loss``, ``metrics``; see
docs/user-models.md): :class:`DataInfo` (what a model builder learns about the data),
:class:`TorchDatasets` (map-style datasets read lazily) and :func:`build_genome_module`.

Importing this package is cheap: torch and mpi4py load only inside the MPI job.
The driver-side surface is :mod:`training.contract` (what both sides share) and
:mod:`training.launch` (starting a trial's job).
"""

from typing import TYPE_CHECKING

from training._config import METRICS, SEARCHABLE, TrainConfig
from training._data import DATASETS, Dataset, load_dataset
from training._plugins import DataInfo, TorchDatasets, build_genome_module
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
    "DataInfo",
    "TorchDatasets",
    "build_genome_module",
    "METRICS",
    "SEARCHABLE",
    "Session",
    "Dataset",
    "TrainConfig",
    "TrialSpec",
    "load_dataset",
]
