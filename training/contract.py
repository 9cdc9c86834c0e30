"""What the search driver and a trial job agree on, without importing torch or mpi4py.

The driver (``search/``) builds a :class:`TrialSpec` around a validated :class:`TrainConfig`,
names the storage both sides open (:func:`open_storage`; passwords never printed:
:func:`redact`) and the pruner rank 0 rebuilds (:func:`build_pruner`). How the job is started
is :mod:`training.launch`.

>>> from training.contract import redact
>>> redact("postgresql://me:secret@db/optuna")
'postgresql://me:***@db/optuna'
"""

from training._artifacts import (
    CHECKPOINT_ATTR,
    FREE_ON_RESTORE,
    CheckpointPlan,
    artifact_store,
)
from training._config import (
    METRICS,
    MIN_RANKS,
    SEARCHABLE,
    USED_BY,
    TrainConfig,
    ranks_message,
)
from training._data import check_dataset_loads
from training._launcher import DEFAULT_LAUNCHER, SINGLE_NODE_ENV
from training._plugin_check import check_own_loop, check_plugins
from training._plugins import PluginError
from training._prune_config import field_of as prune_field
from training._prune_config import unprunable
from training._reporting import VECTOR_ATTR, build_pruner
from training._spec import TrialSpec
from training._storage import (
    DEFAULT_STORAGE,
    journal_path,
    open_storage,
    redact,
    retrying_call,
    storage_file,
    transient_error,
)

__all__ = [
    "CHECKPOINT_ATTR",
    "CheckpointPlan",
    "DEFAULT_LAUNCHER",
    "DEFAULT_STORAGE",
    "FREE_ON_RESTORE",
    "METRICS",
    "PluginError",
    "MIN_RANKS",
    "SEARCHABLE",
    "SINGLE_NODE_ENV",
    "USED_BY",
    "VECTOR_ATTR",
    "TrainConfig",
    "TrialSpec",
    "artifact_store",
    "build_pruner",
    "check_dataset_loads",
    "check_own_loop",
    "check_plugins",
    "journal_path",
    "open_storage",
    "prune_field",
    "unprunable",
    "ranks_message",
    "redact",
    "retrying_call",
    "storage_file",
    "transient_error",
]
