"""Why mnist1d loses accuracy under pruning: learning curves of the real trainer, one rank.

Each named run is ``training.jobs._trainer.Trainer`` in this process (one MPI rank, the global batch
of ``pruning_training.py``: the same trajectory as its 2-rank sync runs up to float sums), on
mnist1d with the benchmark's stack model and learning rate, for the given seeds; every epoch's
validation accuracy is kept, so a 16-epoch run also gives the 8-epoch figure (constant learning
rate: its first 8 epochs are the 8-epoch run). Runs (``RUNS``): ``dense16``; ``at-start16`` and
``l1_16`` (the benchmark's ``at-start`` and ``l1`` at target 0.6, 16 epochs); with
``rescale`` and/or ``input_layer = false`` (``*_rescale``, ``*_keep-input``), and
``l1_rescale_t5`` (target 0.5). Output: one JSON line per run and seed.

Command::

    python benchmarks/pruning_diagnosis.py OUT.jsonl SEEDS RUN [RUN ...]
    python benchmarks/pruning_diagnosis.py out.jsonl 0,1,2 dense16 at-start16 l1_rescale

``results/pruning_diagnosis.json`` (2026-11-26, two such processes side by side under
``nice -n 15``, load 0.4-19 from other work: only accuracies are read) holds the lines.
"""

from __future__ import annotations

import json
import os
import sys
import time

from pruning_training import CASES, STACK, VARIANTS

L1, AT = VARIANTS["l1"], VARIANTS["at-start"]
RS, KI = {"rescale": True}, {"input_layer": False}
RUNS = {  # name: (epochs, learning rate, prune table)
    "dense16": (16, 0.05, None),
    "at-start16": (16, 0.05, AT),
    "l1_16": (16, 0.05, L1),
    "at-start_rescale": (8, 0.05, {**AT, **RS}),
    "at-start_keep-input": (8, 0.05, {**AT, **KI}),
    "l1_rescale": (8, 0.05, {**L1, **RS}),
    "l1_keep-input": (8, 0.05, {**L1, **KI}),
    "l1_rescale_keep-input": (8, 0.05, {**L1, **RS, **KI}),
    "l1_rescale_t5": (8, 0.05, {**L1, **RS, "target": 0.5}),
}


def main(out: str, seeds: list[int], names: list[str]) -> None:
    from mpi4py import MPI

    from training import TrainConfig
    from training.jobs import Trainer

    for name in names:
        epochs, lr, prune = RUNS[name]
        for seed in seeds:
            config = TrainConfig(**{**CASES["mnist1d"], "lr": lr}, epochs=epochs, genome=STACK,
                                 batch_size=64, algorithm="sync", seed=seed, ranks=1,
                                 prune=prune)
            began = time.time()
            result = Trainer(config, MPI.COMM_WORLD).train()
            row = {"name": name, "seed": seed, "flops": result.flops,
                   "seconds": time.time() - began, "loadavg_1min": os.getloadavg()[0],
                   "val_accuracy": [h["val_accuracy"] for h in result.history]}
            with open(out, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(name, seed, row["val_accuracy"][-1], result.flops, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], [int(s) for s in sys.argv[2].split(",")], sys.argv[3:])
