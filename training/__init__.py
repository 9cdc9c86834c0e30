"""How one candidate trains, by extension point:

- ``algorithms/``  sync SGD, ASGD and the baselines behind one small interface, and their registry
- ``data/``        the built-in datasets, loaders, and each rank's share of every epoch
- ``models/``      genomes and the built-in MLP as torch modules; parameters and FLOPs
- ``pruning/``     structured pruning during training
- ``session/``     the front a trial's ranks train through (own loops and the built-in trainer)
- ``state/``       checkpoints and resharding
- ``plugins/``     a user's model, dataset, loss and metrics, and their up-front check
- ``storage/``     Optuna storages and artifact stores (both sides open them)
- ``launch/``      the host side: the ``mpiexec`` line, the cold job, warm pools (no torch)
- ``jobs/``        what runs on the ranks: the programs, the trainer, a user's own loop

What users bring (``[training] model``, ``dataset``, ``loss``, ``metrics``; see
docs/user-models.md): :class:`DataInfo` (what a model builder learns about the data),
:class:`TorchDatasets` (map-style datasets read lazily) and :func:`build_genome_module`.
A user's own loop gets a :class:`Session`.

Importing this package is cheap: torch and mpi4py load only inside the MPI job. The driver-side
surface is :mod:`training.contract` (what both sides share) and :mod:`training.launch`.
"""

from training._config import METRICS, SEARCHABLE, TrainConfig
from training._lazy import lazy
from training._spec import TrialSpec
from training.data import DATASETS, Dataset, load_dataset
from training.plugins import DataInfo, TorchDatasets, build_genome_module

# ``training.Session`` (a user's own loop) loads torch and mpi4py: only when asked for.
__getattr__ = lazy("training.session", {"Session": "_session"})

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
