"""MPI program for tests: the built-in trainer on research code's shapes, on real ranks.

1. Dict samples, tuple outputs and mapping outputs train the very weights of the built-in path.
2. transformers' ViT (random weights) on dict samples, its own loss, AdamW with a linear
   schedule and warmup, bf16 autocast, gradient clipping: sync and asgd.
3. grad_clip bounds each step; bf16 changes the arithmetic; a cosine schedule with AdamW resumes
   from a checkpoint to the same weights.

Usage: mpiexec -n 2 python tests/mpi_jobs/_research_job.py OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from _checkpoint_job import checkpointer
from mpi4py import MPI
from optuna.artifacts import FileSystemArtifactStore

from training._config import TrainConfig
from training.algorithms._base import flat_parameters
from training.jobs._trainer import Trainer

R = "_research_plugins"
BASE = {"dataset": "digits", "epochs": 2, "hidden": 32, "layers": 2, "lr": 0.05, "seed": 3,
        "model": "_user_plugins:build"}


def _weights(config: dict, comm: MPI.Comm) -> tuple[np.ndarray, dict]:
    trainer = Trainer(TrainConfig(**config, ranks=comm.size), comm)
    result = trainer.train()
    return flat_parameters(trainer.model), {**result.values, "flops": result.flops}


def shapes(comm: MPI.Comm) -> dict:
    base, base_values = _weights(BASE, comm)
    out = {"values": base_values}
    for name, change in {
        "dict_samples": {"dataset": f"{R}:dict_digits"},
        "tuple_output": {"dataset": f"{R}:dict_digits", "model": f"{R}:tuple_model"},
        "mapping_output": {"model": f"{R}:mapping_model"},
    }.items():
        w, values = _weights({**BASE, **change}, comm)
        out[name] = {"max_weight_difference": float(np.max(np.abs(w - base))), **values}
    return out


def _linear_macs(model: torch.nn.Module, sample: dict) -> int:
    """Multiply-adds of the nn.Linear layers alone (no attention products)."""
    total = 0

    def hook(m: torch.nn.Module, inputs: object, output: torch.Tensor) -> None:
        nonlocal total
        total += output.numel() * m.in_features

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        model.eval()
        model(**sample)
    for h in handles:
        h.remove()
    return total


def hugging_face(comm: MPI.Comm, algorithm: str) -> dict:
    config = TrainConfig(dataset=f"{R}:pixel_digits", model=f"{R}:tiny_vit", loss="model",
                         optimizer="adamw", lr=3e-3, weight_decay=0.01, lr_schedule="linear",
                         warmup_epochs=0.5, precision="bf16", grad_clip=1.0, epochs=6,
                         batch_size=32, ranks=comm.size, algorithm=algorithm, seed=1)
    trainer = Trainer(config, comm)
    result = trainer.train()
    return {"state": result.state, "values": result.values, "flops": result.flops,
            "linear_macs": _linear_macs(trainer.model, trainer.sample),
            "curve": [h["val_accuracy"] for h in result.history],
            "train_loss": [h["train_loss"] for h in result.history],
            "lr_at_end": trainer.optimizer.param_groups[0]["lr"]}


def clipped(comm: MPI.Comm) -> dict:
    config = TrainConfig(**{**BASE, "epochs": 1, "momentum": 0.0, "lr": 0.1, "grad_clip": 1e-3},
                         ranks=comm.size)
    trainer = Trainer(config, comm)
    start = flat_parameters(trainer.model)
    trainer.train()
    moved = float(np.linalg.norm(flat_parameters(trainer.model) - start))
    return {"moved": moved, "bound": trainer.steps * config.lr * config.grad_clip}


def precision(comm: MPI.Comm) -> dict:
    fp32, v32 = _weights(BASE, comm)
    bf16, v16 = _weights({**BASE, "precision": "bf16"}, comm)
    return {"max_weight_difference": float(np.max(np.abs(fp32 - bf16))),
            "fp32": v32["val_accuracy"], "bf16": v16["val_accuracy"]}


def resume(comm: MPI.Comm, out: Path) -> dict:
    directory = out.parent / "artifacts"
    directory.mkdir(exist_ok=True)
    store = FileSystemArtifactStore(str(directory))
    config = TrainConfig(**{**BASE, "epochs": 4, "optimizer": "adamw", "lr": 0.01,
                            "lr_schedule": "cosine", "warmup_epochs": 1.0}, ranks=comm.size)
    straight = Trainer(config, comm, checkpointer=checkpointer(comm, store, every=2))
    straight.train()
    (epoch2,) = comm.bcast(straight.checkpointer.written if comm.rank == 0 else None, root=0)
    again = Trainer(config, comm, checkpointer=checkpointer(comm, store, every=0),
                    resume_from=epoch2)
    res = again.train()
    constant = Trainer(TrainConfig(**{**BASE, "epochs": 4, "optimizer": "adamw", "lr": 0.01},
                                   ranks=comm.size), comm)
    constant.train()
    return {
        "start_epoch": res.start_epoch,
        "max_weight_difference": float(np.max(np.abs(
            flat_parameters(straight.model) - flat_parameters(again.model)))),
        "constant_difference": float(np.max(np.abs(
            flat_parameters(straight.model) - flat_parameters(constant.model)))),
    }


def repeats(comm: MPI.Comm) -> dict:
    """3 seeds in one trial (dropout on: each keeps its own random stream) against 3 trials."""
    config = {**BASE, "dropout": 0.2, "model": None}
    together = Trainer(TrainConfig(**config, repeats=3, ranks=comm.size), comm).train()
    alone = [Trainer(TrainConfig(**{**config, "seed": 3 + i}, ranks=comm.size), comm).train()
             for i in range(3)]
    return {"together": together.values, "spread": together.repeats,
            "alone": [r.values for r in alone],
            "history": [h["val_loss"] for h in together.history],
            "alone_history": [[h["val_loss"] for h in r.history] for r in alone]}


def main(out: str) -> None:
    comm = MPI.COMM_WORLD
    torch.set_num_threads(1)
    result = {"shapes": shapes(comm), "hf_sync": hugging_face(comm, "sync"),
              "hf_asgd": hugging_face(comm, "asgd"), "clipped": clipped(comm),
              "precision": precision(comm), "resume": resume(comm, Path(out)),
              "repeats": repeats(comm)}
    if comm.rank == 0:
        Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
