"""Learning curves recorded once, without pruning, for benchmarks/pruning_replay.py to replay.

A curve file holds, per dataset, the sampled configurations in order (configuration ``i`` is the
``i``-th draw of a seeded ``RandomSampler`` through the study's own search space, so it is the same
on every dataset) and, for each, its validation accuracy and wall seconds after every epoch. It is
written after every configuration (atomically), so an interrupted recording resumes where it
stopped; a file recorded with other settings is refused rather than mixed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from search import parse_study
from search.studyfile._study_file import StudyFile
from training import Dataset

SAMPLE_SEED = 0  # the configurations' RandomSampler seed


def study_of(s: dict[str, Any], dataset: str) -> StudyFile:
    """The study file (parsed) whose space and training the recording uses."""
    return parse_study(
        {
            "name": "pruning-replay",
            "training": {
                "dataset": dataset,
                "epochs": s["epochs"],
                "batch_size": s["batch_size"],
                "optimizer": s["optimizer"],
                "ranks": 1,
                "algorithm": "sync",
            },
            "space": {"lr": s["lr"], "genome": s["genome"]},
        }
    )


def sample_configs(sf: StudyFile, n: int) -> list[dict[str, Any]]:
    """The first ``n`` configurations of the space (seeded random search), as JSON-able dicts."""
    space = sf.search_space
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=SAMPLE_SEED))
    out = []
    for i in range(n):
        trial = study.ask()
        values = space.suggest(trial)
        genome = values.pop("genome")
        out.append(
            {
                "index": i,
                "params": dict(trial.params),  # what an Optuna trial of the study would hold
                "values": values,  # the searched [training] fields (lr)
                "genome": genome.to_dict(),
                "summary": genome.summary(),
            }
        )
        study.tell(trial, 0.0)
    return out


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def _write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)  # a reader (or a kill) never sees half a file


def train_curve(sf: StudyFile, config: dict[str, Any], data: Dataset) -> dict[str, Any]:
    """Train one configuration for every epoch on ``MPI.COMM_SELF``, in process, no pruning."""
    from mpi4py import MPI

    from training.jobs import Trainer

    cfg = sf.training.with_params(config["values"]).model_copy(
        update={"genome": config["genome"]}
    )
    load = os.getloadavg()[0]
    started = time.perf_counter()
    result = Trainer(cfg, MPI.COMM_SELF, data=data).train()
    wall = time.perf_counter() - started
    cumulative = [row["train_time_s"] for row in result.history]
    return {
        "val_accuracy": [row["val_accuracy"] for row in result.history],
        "train_loss": [row["train_loss"] for row in result.history],
        # wall seconds of each epoch (training + evaluation), from the trainer's own clock
        "epoch_seconds": [b - a for a, b in zip([0.0, *cumulative], cumulative, strict=False)],
        "state": result.state,
        "test_accuracy": result.test_accuracy,
        "n_params": result.n_params,
        "wall_s": wall,
        "load_before": load,
    }


def record(
    path: Path,
    s: dict[str, Any],
    datasets: list[str],
    n_configs: int,
    *,
    log: Callable[..., None] = print,
) -> dict[str, Any]:
    """Record the missing curves of the first ``n_configs`` configurations on each dataset."""
    from training import load_dataset

    doc = _read(path)
    wanted = {k: s[k] for k in ("epochs", "batch_size", "optimizer", "lr", "genome")}
    wanted["sample_seed"] = SAMPLE_SEED
    if doc and doc.get("settings") != wanted:
        raise SystemExit(
            f"{path} was recorded with other settings ({doc.get('settings')}); "
            "move it away or record into another --curves path"
        )
    doc.setdefault("benchmark", "pruning_curves")
    doc["settings"] = wanted
    doc.setdefault("datasets", {})
    for dataset in datasets:
        sf = study_of(s, dataset)
        configs = sample_configs(sf, n_configs)
        have = doc["datasets"].setdefault(dataset, {"configs": [], "record_s": 0.0})
        done = {c["index"]: c for c in have["configs"]}
        for c in done.values():
            if c["params"] != configs[c["index"]]["params"]:
                raise SystemExit(f"{path}: {dataset} configuration {c['index']} differs")
        todo = [c for c in configs if c["index"] not in done]
        if not todo:
            log(f"{dataset}: all {n_configs} configurations recorded")
            continue
        data = load_dataset(dataset, sf.training.val_fraction)
        log(f"{dataset}: {len(done)} recorded, {len(todo)} to go")
        for c in todo:
            curve = train_curve(sf, c, data)
            done[c["index"]] = {**c, **curve}
            have["configs"] = [done[i] for i in sorted(done)]
            have["record_s"] += curve["wall_s"]
            _write(path, doc)
            log(
                f"{dataset} {c['index'] + 1:>4}/{n_configs}  {curve['wall_s']:6.1f} s  final "
                f"{curve['val_accuracy'][-1]:.4f}  lr {c['values']['lr']:.2e}  {c['summary']}",
                flush=True,
            )
    return doc
