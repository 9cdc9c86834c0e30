"""Where checkpoints go: the plan the driver hands each trial, and Optuna's artifact stores.

Torch-free (the driver imports it); the writing and reading is training/state/_checkpoint.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

CHECKPOINT_ATTR = "detol:checkpoint"
# The training settings a checkpoint restores across: they say how fast (or how long) to train,
# not what is trained -- no tensor's shape and no algorithm state depends on them (sync SGD's
# buckets are views rebuilt at start; threads, MPICH's progress thread, an own loop's agreement
# timeout and the data loader's worker processes hold no state). Every other setting of the
# configuration must match the resuming trial's (training/state/_checkpoint.py), and a study may
# change
# only these between runs (search/driver/_study.py). ``checkpoints.*`` is not part of a trial's
# configuration at all. ``ranks`` too: the built-in trainer's checkpoints reshard from P to Q
# ranks (training.state._reshard), the global batch staying what it is.
FREE_ON_RESTORE = (
    "epochs", "ranks", "bucket_kb", "threads_per_rank", "mpi_async_progress", "agree_timeout_s",
    "loader_workers", "data_cache", "data_cache_gb",
)


@dataclass(frozen=True)
class CheckpointPlan:
    """Where checkpoints go and how often: from the study file's ``[checkpoints]`` table."""

    store: str  # a directory, s3://bucket or gs://bucket
    every: int = 0  # epochs between two checkpoints; 0: only when the trial pauses
    every_steps: int = 0  # also within an epoch, every this many global batches; 0: never
    keep: int = 2  # newest checkpoints kept per trial

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> CheckpointPlan | None:
        return cls(**data) if data else None

    def due(self, epoch: int) -> bool:
        return self.every > 0 and epoch % self.every == 0


def artifact_store(url: str) -> Any:
    """An Optuna artifact store for ``url``: a directory (created), ``s3://`` or ``gs://``."""
    from optuna import artifacts

    scheme, _, rest = url.partition("://")
    if scheme == "s3" and rest:
        bucket = rest.split("/", 1)[0]
        return artifacts.Boto3ArtifactStore(bucket)
    if scheme == "gs" and rest:
        bucket = rest.split("/", 1)[0]
        return artifacts.GCSArtifactStore(bucket)
    if rest and scheme != "file":
        raise ValueError(
            f"checkpoints.store {url!r}: expected a directory, s3://BUCKET or gs://BUCKET"
        )
    path = rest if scheme == "file" else url
    os.makedirs(path, exist_ok=True)
    return _atomic_store_class()(path)


def _atomic_store_class() -> type:
    """``FileSystemArtifactStore`` whose ``write`` is all or nothing (issue 27): Optuna's writes
    the final file in place, so a rank killed mid-write (or a machine that loses its page cache)
    leaves a half file under a name the trial's artifact list already holds. Here the bytes go to
    a temporary name in the same directory, are fsynced, and are renamed over the final one."""
    import shutil
    from typing import BinaryIO

    from optuna.artifacts import FileSystemArtifactStore

    class AtomicFileSystemArtifactStore(FileSystemArtifactStore):
        def write(self, artifact_id: str, content_body: BinaryIO) -> None:
            final = self._get_filepath(artifact_id)
            tmp = final.with_name(f".{final.name}.tmp{os.getpid()}")
            try:
                with open(tmp, "wb") as f:
                    shutil.copyfileobj(content_body, f)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, final)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            fsync_directory(str(final.parent))

    return AtomicFileSystemArtifactStore


def fsync_directory(path: str) -> None:
    """Make a rename in ``path`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
