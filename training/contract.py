"""What the search driver and a trial job agree on, without importing torch or mpi4py.

The driver (``search/``) builds a :class:`TrialSpec` around a validated :class:`TrainConfig`,
names the storage both sides open (:func:`open_storage`; passwords never printed:
:func:`redact`) and the pruner rank 0 rebuilds (:func:`build_pruner`). How the job is started
is :mod:`training.launch`.

>>> from training.contract import redact
>>> redact("postgresql://me:secret@db/optuna")
'postgresql://me:***@db/optuna'
"""

from training._config import (
    METRICS,
    MIN_RANKS,
    SEARCHABLE,
    USED_BY,
    TrainConfig,
    ranks_message,
)
from training._spec import TrialSpec
from training.data import check_dataset_loads
from training.launch import DEFAULT_LAUNCHER, SINGLE_NODE_ENV
from training.plugins import PluginError, check_name, import_function
from training.plugins.check import check_own_loop, check_plugin_draws, check_plugins
from training.pruning import field_of as prune_field
from training.session import CONTINUE, VECTOR_ATTR, OptunaReporter, build_pruner
from training.storage import (
    CHECKPOINT_ATTR,
    DEFAULT_STORAGE,
    FREE_ON_RESTORE,
    CheckpointPlan,
    artifact_store,
    check_storage_file,
    journal_path,
    open_storage,
    redact,
    retrying_call,
    storage_file,
    transient_error,
)

__all__ = [
    "CONTINUE",
    "OptunaReporter",
    "check_name",
    "import_function",
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
    "check_plugin_draws",
    "check_plugins",
    "check_storage_file",
    "journal_path",
    "open_storage",
    "prune_field",
    "ranks_message",
    "redact",
    "retrying_call",
    "storage_file",
    "transient_error",
]
