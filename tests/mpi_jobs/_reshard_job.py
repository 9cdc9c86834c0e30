"""MPI program for tests: a trial that changes width between segments (issue 31).

Run on 3 ranks. Each segment is a fresh Trainer on a sub-communicator of the first W ranks (as
a new job of W ranks would be), resuming from the previous segment's checkpoint; a reporter
pauses it at the segment's last epoch, which writes the checkpoint.

- sync: 3 epochs at a fixed width of 2 ranks, against 2 -> 1 -> 3 ranks (an epoch each), the
  global batch fixed; momentum on, so the optimizer state travels too.
- asgd, localsgd, simuparallel: 2 -> 3 -> 2 ranks; the states restored at each resize are
  compared with the rule of training.state._reshard (grow: rank q copies rank q % P; shrink: rank q
  is the mean of ranks p % Q == q), and the trial trains on to the end.

Usage: mpiexec -n 3 python tests/mpi_jobs/_reshard_job.py OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _checkpoint_job import checkpointer  # same folder: sys.path[0]
from mpi4py import MPI
from optuna.artifacts import FileSystemArtifactStore

from training._config import TrainConfig
from training.algorithms._base import flat_parameters
from training.jobs._trainer import Trainer
from training.session import CONTINUE, PAUSE


class Recording(Trainer):
    """A trainer that keeps what the restore gave this rank, before any step."""

    restored: dict[str, Any] = {}

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        super().load_checkpoint_state(state)
        self.restored = {"weights": flat_parameters(self.model).tolist(),
                         "optimizer": _momentum(self.optimizer), "steps": self.steps}


class PauseAt:
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def decide(self, epoch: int, row: Any) -> str:
        return PAUSE if epoch == self.epoch else CONTINUE


def segment(world: MPI.Comm, store: Any, config: TrainConfig, width: int, *, resume: str | None,
            pause_at: int | None) -> dict[str, Any] | None:
    """Train ``config`` on the first ``width`` ranks of ``world``; returns (on those ranks) the
    checkpoint id it wrote, its flat weights before and after, the restored momentum."""
    comm = world.Split(0 if world.rank < width else MPI.UNDEFINED, key=world.rank)
    out = None
    if comm != MPI.COMM_NULL:
        config = config.model_copy(update={"ranks": width})
        reporter = PauseAt(pause_at) if pause_at is not None and comm.rank == 0 else None
        t = Recording(config, comm, reporter=reporter, checkpointer=checkpointer(comm, store, 0),
                      resume_from=resume)
        result = t.train()
        ids = t.checkpointer.written if comm.rank == 0 else None  # type: ignore[union-attr]
        out = {"ckpt": comm.bcast(ids[-1] if ids else None, root=0), "restored": t.restored,
               "restored_all": comm.gather(t.restored.get("weights")),
               "weights": flat_parameters(t.model).tolist(), "state": result.state,
               "accuracy": result.values.get("val_accuracy")}
        comm.Free()
    out = world.bcast(out, root=0)  # world rank 0 is in every segment
    if world.rank == 0 and out["ckpt"] is not None:  # the rank states the checkpoint holds
        with store.open_reader(out["ckpt"]) as f:
            out["states"] = torch.load(f, weights_only=True)["rank_states"]
    return out


def _momentum(opt: torch.optim.Optimizer) -> list[float]:
    buffers = [s["momentum_buffer"].reshape(-1) for s in opt.state_dict()["state"].values()]
    return torch.cat(buffers).tolist() if buffers else []


def _flat(model_state: dict[str, torch.Tensor]) -> np.ndarray:
    return np.concatenate([v.reshape(-1).cpu().numpy() for v in model_state.values()])


def main(out: str) -> None:
    world = MPI.COMM_WORLD
    directory = Path(out).parent / "artifacts"
    if world.rank == 0:
        directory.mkdir(exist_ok=True)
    world.Barrier()
    store = FileSystemArtifactStore(str(directory))
    result: dict[str, Any] = {}

    base = TrainConfig(dataset="digits", epochs=3, hidden=32, lr=0.05, momentum=0.9,
                       batch_size=60, ranks=2, algorithm="sync", dropout=0.0)
    fixed = segment(world, store, base, 2, resume=None, pause_at=None)
    a = segment(world, store, base, 2, resume=None, pause_at=1)
    b = segment(world, store, base, 1, resume=a["ckpt"], pause_at=2)  # type: ignore[index]
    c = segment(world, store, base, 3, resume=b["ckpt"], pause_at=None)  # type: ignore[index]
    if world.rank == 0:
        assert fixed and a and b and c
        saved_a = a["states"][0]
        result["sync"] = {
            "max_weight_difference": float(np.abs(np.array(fixed["weights"])
                                                  - np.array(c["weights"])).max()),
            "restored_is_ranks0": bool(np.array_equal(np.array(b["restored"]["weights"]),
                                                      _flat(saved_a["model"]))),
            "momentum_restored": bool(np.array_equal(
                np.array(b["restored"]["optimizer"]), np.array(_momentum_of(saved_a)))),
            "momentum_nonzero": bool(np.abs(np.array(b["restored"]["optimizer"])).max() > 0),
            "states": [a["state"], b["state"], c["state"]],
            "accuracy": c["accuracy"],
        }

    for algorithm in ("asgd", "localsgd", "simuparallel"):
        config = base.model_copy(update={"algorithm": algorithm, "local_steps": 7,
                                         "dropout": 0.1})
        a = segment(world, store, config, 2, resume=None, pause_at=1)
        b = segment(world, store, config, 3, resume=a["ckpt"], pause_at=2)  # type: ignore[index]
        c = segment(world, store, config, 2, resume=b["ckpt"], pause_at=None)  # type: ignore[index]
        if world.rank == 0:
            assert a and b and c
            a_states = [_flat(s["model"]) for s in a["states"]]
            b_states = [_flat(s["model"]) for s in b["states"]]
            grown = [np.array(w) for w in world_restored(b)]
            shrunk = [np.array(w) for w in world_restored(c)]
            result[algorithm] = {
                "grow_copies": [bool(np.array_equal(grown[q], a_states[q % 2])) for q in range(3)],
                "grow_ranks_differ": bool(np.abs(a_states[0] - a_states[1]).max() > 0),
                "shrink_merges": [
                    float(np.abs(shrunk[0] - (b_states[0] + b_states[2]) / 2).max()),
                    float(np.abs(shrunk[1] - b_states[1]).max()),
                ],
                "shrink_ranks_differ": bool(np.abs(b_states[0] - b_states[2]).max() > 0),
                "states": [a["state"], b["state"], c["state"]],
                "accuracy": c["accuracy"],
            }
    if world.rank == 0:
        Path(out).write_text(json.dumps(result))


def _momentum_of(state: dict[str, Any]) -> list[float]:
    buffers = [s["momentum_buffer"].reshape(-1) for s in state["optimizer"]["state"].values()]
    return torch.cat(buffers).tolist()


def world_restored(seg: dict[str, Any]) -> list[list[float]]:
    return seg["restored_all"]  # every rank's restored weights, in rank order


if __name__ == "__main__":
    main(sys.argv[1])
