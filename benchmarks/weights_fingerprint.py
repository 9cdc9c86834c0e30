"""The trained weights of fixed trials, as hashes: proof that a change which should not alter
training (issue 46's move of ``training/`` into folders) did not.

What runs: each case below is one trial of the built-in trainer through the real rank-side
program (``mpiexec -n RANKS python -m PROGRAM SPEC.json``, the line ``training.launch`` builds),
on scikit-learn digits, with its final weights written by rank 0 (``weights_path``). Every
tensor of the state dict, in key order, goes into one SHA-256 per case, beside the validation
accuracy. The cases cover sync SGD (momentum and small buckets; Adam), sync with pruning during
training, a cell genome, local SGD, and ASGD on 2 ranks (ASGD refuses one rank).

ASGD and local SGD on 2 ranks claim batches as fast as each rank runs (``training.data``'s
claims) and ASGD blends states whenever a peer's write has landed: their weights depend on
timing and differ from one run to the next on the same code. Each such case runs ``REPEATS``
times; it is reported as ``timing-dependent`` when its own repeats differ, and compared only by
its accuracy (not by its hash) with ``--compare``.

This is not a speed benchmark: it prints and writes hashes, and ``--compare OLD.json`` says per
case whether the weights are identical to an earlier run (exit 1 when a deterministic case
differs).

Command::

    python benchmarks/weights_fingerprint.py [--json PATH] [--compare OLD.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import machine, now_iso  # benchmarks/_common/ (the script directory)

REPEATS = 2
BASE: dict[str, Any] = {"dataset": "digits", "epochs": 2, "batch_size": 63, "hidden": 32,
                        "seed": 3}
STACK = {"family": "stack", "layers": [
    {"kind": "conv", "width": 16, "activation": "relu", "dropout": 0.0, "kernel": 3, "pool": True},
    {"kind": "dense", "width": 32, "activation": "relu", "dropout": 0.0},
]}
CASES: dict[str, tuple[int, dict[str, Any]]] = {
    "sync-sgd-momentum-small-buckets": (2, {"optimizer": "sgd", "momentum": 0.9,
                                            "weight_decay": 1e-4, "bucket_kb": 1}),
    "sync-adam": (2, {"optimizer": "adam", "lr": 0.003}),
    "sync-pruned-stack": (2, {"epochs": 4, "genome": STACK,
                              "prune": {"target": 0.5, "start_epoch": 2, "end_epoch": 3}}),
    "sync-cell-genome": (2, {"genome": {"family": "cell", "nodes": 4,
                                        "edges": ["nor_conv_3x3", "skip_connect", "nor_conv_1x1",
                                                  "avg_pool_3x3", "skip_connect", "none"]},
                             "cell_channels": 8}),
    "asgd-2-ranks": (2, {"algorithm": "asgd"}),
    "localsgd-2-ranks": (2, {"algorithm": "localsgd", "local_steps": 4}),
}


def program() -> str:
    """The rank-side program: ``training.jobs.worker`` since the move, ``training.worker``
    before it (so this script also measures the tree it is compared against)."""
    import training

    moved = (Path(training.__file__).parent / "jobs").is_dir()  # the tree this Python imports
    return "training.jobs.worker" if moved else "training.worker"


def run_case(tmp: Path, name: str, ranks: int, config: dict[str, Any], i: int) -> dict[str, Any]:
    import torch

    from training.launch import launcher_argv

    stem = tmp / f"{name}-{i}"
    spec = {"config": {**BASE, **config, "ranks": ranks}, "weights_path": f"{stem}.pt",
            "result_path": f"{stem}.json"}
    Path(f"{stem}.spec.json").write_text(json.dumps(spec))
    argv = launcher_argv("mpiexec -n {ranks}", ranks)
    argv += [sys.executable, "-m", program(), f"{stem}.spec.json"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: the job failed:\n{proc.stdout}{proc.stderr}")
    result = json.loads(Path(f"{stem}.json").read_text())
    state = torch.load(f"{stem}.pt")
    digest = hashlib.sha256()
    for key in sorted(state):
        digest.update(key.encode())
        digest.update(state[key].detach().cpu().contiguous().numpy().tobytes())
    return {"sha256": digest.hexdigest(), "state": result["state"],
            "val_accuracy": result["values"]["val_accuracy"],
            "shapes": {k: list(v.shape) for k, v in state.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--compare", type=Path, help="an earlier --json: exit 1 where one differs")
    args = ap.parse_args()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (ranks, config) in CASES.items():
            runs = [run_case(Path(tmp), name, ranks, config, i) for i in range(REPEATS)]
            stable = len({r["sha256"] for r in runs}) == 1
            out[name] = {"ranks": ranks, "deterministic": stable, "runs": runs}
            verdict = "deterministic" if stable else "timing-dependent"
            print(f"{name:34s} {runs[0]['sha256'][:16]}  acc "
                  f"{', '.join(format(r['val_accuracy'], '.4f') for r in runs)}  {verdict}")
    differs = 0
    verdicts: dict[str, str] = {}
    if args.compare:
        earlier = json.loads(args.compare.read_text())
        old = earlier["cases"]
        for name, now in out.items():
            was = old.get(name)
            if was is None:
                print(f"{name}: not in {args.compare}")
                continue
            if was["deterministic"] and now["deterministic"]:
                same = was["runs"][0]["sha256"] == now["runs"][0]["sha256"]
                differs += not same
                verdicts[name] = "identical" if same else "DIFFER"
                print(f"{name}: weights {verdicts[name]}")
            else:
                verdicts[name] = "timing-dependent"
                accs = [r["val_accuracy"] for r in was["runs"]] + \
                       [f"-> {r['val_accuracy']}" for r in now["runs"]]
                print(f"{name}: timing-dependent; val_accuracy {accs}")
    if args.json:
        doc: dict[str, Any] = {"date": now_iso(), "machine": machine(), "load": os.getloadavg(),
                               "program": program(), "cases": out}
        if args.compare:
            doc["compared_with"] = {"date": earlier.get("date"), "program": earlier.get("program"),
                                    "cases": {k: [r["sha256"] for r in v["runs"]]
                                              for k, v in old.items()},
                                    "verdicts": verdicts}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
