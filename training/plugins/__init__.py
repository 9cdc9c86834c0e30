"""What users bring: their model, dataset, loss and metrics as ``package.module:function`` names
(resolved on the ranks), and the up-front check that imports and runs them once in a fresh
Python before a study starts (``python -m training.plugins.check``). Torch-free at import.
"""

from training._lazy import lazy
from training.plugins._plugins import (
    DataInfo,
    PluginError,
    TorchDatasets,
    build_genome_module,
    build_model,
    make_batch_sums,
    make_loss,
    make_metrics,
    resolve,
)
from training.plugins._resolve import (
    OURS,
    check_name,
    collision_message,
    import_function,
    ours,
    resolve_train,
)

# Not imported here: ``python -m training.plugins.check`` runs that module as a program.
__getattr__ = lazy(__name__, {"check_own_loop": "check", "check_plugins": "check"})

__all__ = [
    "OURS", "DataInfo", "PluginError", "TorchDatasets", "build_genome_module", "build_model",
    "check_name", "check_own_loop", "check_plugins", "collision_message", "import_function",
    "make_batch_sums", "make_loss", "make_metrics", "ours", "resolve", "resolve_train",
]
