"""Checkpoints: a trial's whole training state at the end of an epoch, in an Optuna artifact store.

Rank 0 writes, every rank restores. One file holds every rank's part (model, optimizer, the
algorithm's own state, torch's random state, steps taken), because the ranks of ASGD and local
SGD hold different weights between averages. A checkpoint of the built-in trainer (header
``"reshard": True``, training.Session.save_checkpoint(state, reshard=True)) written by P ranks
restores on any Q ranks: rank 0 makes the Q states by the rule of training.state._reshard before it
hands them out. An own loop's restores on P ranks only unless it saved with ``reshard=True``: a
job of another size is refused before it trains. Beside them: the epoch, the
learning curve so far, the training seconds spent, the configuration, and the settings of it that
do not matter for restoring (``free_on_restore``: how long and how fast to train, never a shape
or an algorithm's state; training.storage._artifacts.FREE_ON_RESTORE). Every other setting must
match
the resuming trial's; a free one may differ (a study resumed with another ``bucket_kb``).

The file is uploaded with ``optuna.artifacts.upload_artifact`` to the trial that wrote it, so
optuna-dashboard lists it and a notebook finds it; the trial's user attribute
``detol:checkpoint`` names the newest one (``{"id", "epoch", "store"}``). Older ones beyond
``keep`` are removed from the store (their entries stay in the trial's artifact list).

What decides *when* (every N epochs, on a pause) is the trainer's and the driver's business;
this module knows *how*.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, MutableMapping
from typing import Any

import torch
from mpi4py import MPI

from training.state._reshard import copy_state, reshard
from training.storage import FREE_ON_RESTORE, CheckpointPlan

FORMAT = 1


class CheckpointError(ValueError):
    """A checkpoint cannot be read or does not fit the trial that wants to resume from it."""


class CheckpointMismatch(CheckpointError):
    """The checkpoint was written by another configuration or another number of ranks."""


def check_compatible(saved: dict[str, Any], config: dict[str, Any], ranks: int) -> None:
    """CheckpointMismatch unless ``saved`` (a checkpoint's header) can resume ``config``."""
    if saved.get("format") != FORMAT:
        raise CheckpointMismatch(
            f"checkpoint format {saved.get('format')!r}, this version reads {FORMAT}"
        )
    if saved["ranks"] != ranks and not saved.get("reshard", False):
        raise CheckpointMismatch(
            f"the checkpoint was written by {saved['ranks']} ranks; this job has {ranks} "
            "(each rank's state is restored on the same rank: an own loop's checkpoint does "
            "not change width)"
        )
    theirs, ours = saved["config"], config
    # Free only where both the writer and this reader say so (a checkpoint of an older detol
    # names none: this version's list applies).
    free = set(FREE_ON_RESTORE) & set(saved.get("free_on_restore", FREE_ON_RESTORE))
    differ = sorted(k for k in set(theirs) | set(ours) if k not in free
                    and theirs.get(k) != ours.get(k))
    if differ:
        what = ", ".join(f"{k}: {theirs.get(k)!r} != {ours.get(k)!r}" for k in differ[:4])
        raise CheckpointMismatch(f"the checkpoint was written by another configuration ({what})")


class Checkpointer:
    """Saves and restores a trainer's state on ``comm``. ``upload`` (rank 0 only) stores a file
    and returns its artifact id; ``remove`` deletes an artifact; ``download`` fetches one."""

    def __init__(
        self,
        plan: CheckpointPlan,
        comm: MPI.Comm,
        *,
        upload: Callable[[str, int], str] | None = None,
        download: Callable[[str, str], None] | None = None,
        remove: Callable[[str], None] | None = None,
        memory: MutableMapping[str, dict[str, Any]] | None = None,
        link: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.plan = plan
        self.comm = comm
        self._upload = upload
        self._link = link  # rank 0: records an uploaded checkpoint (id, header) on its trial
        self._download = download
        self._remove = remove
        # Rank 0 of a warm pool (training.jobs._regroup.Shelf): a checkpoint written here is kept in
        # memory too, so a continuation served by the same pool restores it without reading the
        # file back, on whatever width it runs (the in-place resize).
        self.memory = memory
        self.restore_seconds = 0.0  # wall time of the last load, scatter included
        self.restored_from = ""  # "memory" or "store"
        self.written: list[str] = []  # this trial's artifact ids, oldest first
        self.seconds = 0.0  # wall time rank 0 spent saving (gather + write + upload)
        self.bytes = 0  # size of the newest checkpoint file
        self.reshard_seconds = 0.0  # rank 0: time spent making Q states out of P (a resize)

    def save(self, header: dict[str, Any], rank_state: dict[str, Any]) -> str | None:
        """Collective (waits for all ranks): rank 0 writes ``header`` and every rank's
        ``rank_state`` as one file, uploads it; returns the artifact id there."""
        t = MPI.Wtime()
        states = self.comm.gather(rank_state, root=0)  # waits for all ranks
        if self.comm.rank != 0:
            return None
        if self._upload is None:
            raise RuntimeError("rank 0 needs an upload function to write checkpoints")
        with tempfile.TemporaryDirectory(prefix="detol-ckpt-") as tmp:
            path = os.path.join(tmp, f"checkpoint-epoch{header['epoch']}.pt")
            data = {**header, "format": FORMAT, "free_on_restore": list(FREE_ON_RESTORE),
                    "rank_states": states}
            torch.save(data, path)
            self.bytes = os.path.getsize(path)
            artifact_id = self._upload(path, int(header["epoch"]))
        if self._link is not None:
            self._link(artifact_id, header)
        if self.memory is not None:  # rank 0's own state is the live trainer's: copied
            self.memory[artifact_id] = {**data, "rank_states": [copy_state(s) for s in states]}
        self.written.append(artifact_id)
        while len(self.written) > max(1, self.plan.keep):
            old = self.written.pop(0)
            if self._remove is not None:
                self._remove(old)
        self.seconds += MPI.Wtime() - t
        return artifact_id

    def _read(self, artifact_id: str) -> dict[str, Any]:
        """Rank 0: the checkpoint file ``artifact_id``, downloaded and read."""
        assert self._download is not None
        with tempfile.TemporaryDirectory(prefix="detol-ckpt-") as tmp:
            path = os.path.join(tmp, "checkpoint.pt")
            self._download(artifact_id, path)
            return torch.load(path, map_location="cpu", weights_only=True)

    def load(self, artifact_id: str, config: dict[str, Any]) -> tuple[dict[str, Any], dict]:
        """Collective: rank 0 downloads ``artifact_id`` and checks it against ``config``; each
        rank gets (the header, its own state). A mismatch raises on every rank."""
        payload: Any = None
        began = MPI.Wtime()
        if self.comm.rank == 0:
            kept = self.memory.get(artifact_id) if self.memory is not None else None
            if kept is None and self._download is None:
                raise RuntimeError("rank 0 needs a download function to restore checkpoints")
            try:
                if kept is not None:  # written by this pool: no file read back
                    # copies: a restored optimizer may share its tensors, then train them
                    data = {**kept, "rank_states": [copy_state(s) for s in kept["rank_states"]]}
                else:
                    data = self._read(artifact_id)
                self.restored_from = "memory" if kept is not None else "store"
                check_compatible(data, config, self.comm.size)
                states = data.pop("rank_states")
                if len(states) != self.comm.size:  # another width: training.state._reshard's rule
                    t = MPI.Wtime()
                    theirs = data["config"]
                    algorithm = data.get("algorithm") or theirs["algorithm"]  # own loop: header
                    states = reshard(states, self.comm.size, algorithm=str(algorithm),
                                     seed=int(theirs.get("seed", 0)), epoch=int(data["epoch"]))
                    self.reshard_seconds = MPI.Wtime() - t
                payload = [(data, s) for s in states]
            except Exception as exc:  # noqa: BLE001 - every rank raises the same error
                payload = [exc] * self.comm.size
        mine = self.comm.scatter(payload, root=0)  # waits for rank 0
        self.restore_seconds = MPI.Wtime() - began
        if isinstance(mine, Exception):
            raise CheckpointError(f"cannot resume from checkpoint {artifact_id}: {mine}")
        return mine
