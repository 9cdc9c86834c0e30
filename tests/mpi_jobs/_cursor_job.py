"""MPI program for tests and benchmarks/data_layer.py: one run of a trial on record shards that
checkpoints within its epochs, may kill itself (SIGKILL, every rank) after a given step, and
may resume from a checkpoint id: the real trainer, sampler, reader and checkpoint store.

Each rank appends the rows its sampler hands the loader to ``TRACE-<rank>.txt`` (one line a
batch, ``epoch:row,row,...``), and a line ``C epoch:consumed`` when a checkpoint within the
epoch is taken; rank 0 appends each checkpoint's id to ``TRACE-ids.txt``. With no loader
workers the sampler hands out a batch only when the loop asks for it, so the rows of a run's
trace up to a ``C`` line are exactly the rows its checkpoint's model was trained on.

Usage: mpiexec -n W python tests/mpi_jobs/_cursor_job.py SPEC.json
(SPEC: shards, store, trace, algorithm, epochs, batch_size, every_steps, die_after, resume)
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from _checkpoint_job import checkpointer  # same folder: sys.path[0]
from mpi4py import MPI
from optuna.artifacts import FileSystemArtifactStore

from training._config import TrainConfig
from training.jobs._trainer import Trainer


class Tracing(Trainer):
    spec: dict[str, Any] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        rank = self.comm.rank
        self.trace = open(f"{self.spec['trace']}-{rank}.txt", "a")  # noqa: SIM115
        self.epoch_steps_taken = 0
        sampler = self.sampler

        def traced() -> Any:
            epoch = sampler.epoch
            for rows in sampler:
                self.trace.write(f"{epoch}:{','.join(str(int(r)) for r in rows)}\n")
                self.trace.flush()
                yield rows

        self.loader = _Loader(self.data.train, traced)  # what make_loader gives without workers

    def _step(self, batch: Any, global_batch: int, last_in_epoch: bool) -> float:
        loss = super()._step(batch, global_batch, last_in_epoch)
        self.epoch_steps_taken += 1
        die = self.spec.get("die_after")
        if die is not None and self.epoch_steps_taken >= die:
            self.trace.close()
            os.kill(os.getpid(), signal.SIGKILL)  # as a node's loss would: no clean-up at all
        return loss

    def checkpoint_state(self) -> dict[str, Any]:
        self.trace.write(f"C {self.sampler.epoch}:{self.sampler.stop}\n")
        self.trace.flush()
        return super().checkpoint_state()


class _Loader:
    """The trainer's own whole-batch loader over the traced sampler."""

    def __init__(self, dataset: Any, rows: Any) -> None:
        self.dataset, self.rows = dataset, rows

    def __iter__(self) -> Any:
        for r in self.rows():
            yield self.dataset.__getitems__(r)


def main(spec_file: str) -> None:
    spec = json.loads(Path(spec_file).read_text())
    Tracing.spec = spec
    comm = MPI.COMM_WORLD
    store = FileSystemArtifactStore(spec["store"])
    ckpt = checkpointer(comm, store, every=0)
    ckpt.plan = type(ckpt.plan)(store="unused", every=0, every_steps=spec["every_steps"], keep=50)
    if comm.rank == 0:
        upload = ckpt._upload  # noqa: SLF001

        def recorded(path: str, epoch: int) -> str:
            artifact = upload(path, epoch)  # type: ignore[misc]
            with open(f"{spec['trace']}-ids.txt", "a") as f:
                f.write(artifact + "\n")
            return artifact

        ckpt._upload = recorded  # noqa: SLF001
    config = TrainConfig(dataset=f"shards:{spec['shards']}", epochs=spec["epochs"],
                         batch_size=spec["batch_size"], ranks=comm.size, hidden=16, lr=0.05,
                         algorithm=spec["algorithm"], shuffle_window=spec.get("window", 2),
                         data_cache=spec.get("cache"))
    trainer = Tracing(config, comm, checkpointer=ckpt, resume_from=spec.get("resume"))
    result = trainer.train()
    if comm.rank == 0:
        Path(spec["trace"] + "-result.json").write_text(json.dumps({
            "state": result.state, "steps_per_rank": result.steps_per_rank,
            "start_epoch": result.start_epoch, "values": result.values,
            "first_step_time": result.first_step_time}))


if __name__ == "__main__":
    main(sys.argv[1])
