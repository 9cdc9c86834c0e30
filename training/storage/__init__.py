"""Optuna storages and artifact stores, opened alike by the driver and by rank 0 of every trial:
storage URLs (journal files that survive a torn tail, RDB with retries) and where checkpoints
go. Needs Optuna only (no torch), so both sides reach it without a circle.
"""

from training.storage._artifacts import (
    CHECKPOINT_ATTR,
    FREE_ON_RESTORE,
    CheckpointPlan,
    artifact_store,
    fsync_directory,
)
from training.storage._journal import JournalDamaged, SafeJournalFileBackend
from training.storage._storage import (
    DEFAULT_STORAGE,
    RETRY_SECONDS,
    RetryingStorage,
    check_storage_file,
    journal_path,
    load_study,
    open_storage,
    redact,
    retrying_call,
    schema_race,
    storage_file,
    transient_error,
)

__all__ = [
    "CHECKPOINT_ATTR", "DEFAULT_STORAGE", "FREE_ON_RESTORE", "RETRY_SECONDS", "CheckpointPlan",
    "JournalDamaged", "RetryingStorage", "SafeJournalFileBackend", "artifact_store",
    "check_storage_file", "fsync_directory", "journal_path", "load_study", "open_storage",
    "redact", "retrying_call", "schema_race", "storage_file", "transient_error",
]
