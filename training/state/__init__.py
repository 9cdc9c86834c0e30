"""A trial's training state: checkpoints (rank 0 writes, every rank restores, in the study's
artifact store) and resharding a checkpoint of P ranks onto Q. Loads torch on first use.
"""

from training._lazy import lazy

__getattr__ = lazy(__name__, {
    "CheckpointError": "_checkpoint",
    "CheckpointMismatch": "_checkpoint",
    "Checkpointer": "_checkpoint",
    "check_compatible": "_checkpoint",
    "copy_state": "_reshard",
    "reshard": "_reshard",
})

__all__ = ["CheckpointError", "CheckpointMismatch", "Checkpointer", "check_compatible",
           "copy_state", "reshard"]
