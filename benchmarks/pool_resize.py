"""What a width change costs a trial: in place on a warm pool vs through the checkpoint file
(issue 31; training._regroup).

Per model, on real MPI ranks: a 1-rank segment trains one epoch and pauses (its checkpoint is
written: ``save_s``, the same in both arms), then its continuation runs on 2 ranks from epoch 2:

- *in place*: on the same warm pool of 2 ranks (``pool_ranks = 2``), a new sub-communicator of
  the same processes; rank 0 restores the paused state from the pool's memory.
- *through the checkpoint* (the yardstick): a cold 2-rank job (``mpiexec``, imports) that reads
  the checkpoint file back.

Figures: ``to_first_step_s``, from asking the continuation to its first training step (launch
or pool round trip, restore, reshard, scatter: the whole resize as the trial sees it), the
restore alone (``restore_s``), and a 2-rank epoch's wall time (the 2 % goal is of a rung's).
``--repeats`` continuations per arm; medians. Timings under load are noise: the load is
recorded, and the ratio of the two arms, measured side by side, is the figure to read.

Command::

    python benchmarks/pool_resize.py [--quick] [--json PATH] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _common import machine, now_iso  # noqa: E402

MODELS = {"digits-mlp": {"hidden": 128, "layers": 2},
          "wide-mlp": {"hidden": 1024, "layers": 4}}
PAUSE_AT_1 = {"factory": "search.pruners._promotion:PromotingHalving",
              "kwargs": {"min_resource": 1, "reduction_factor": 2, "max_resource": 3}}


def _run(tmp: Path, shape: dict[str, Any], ranks: int, *, warm: bool,
         resume: str | None = None, pause: bool = False) -> dict[str, Any]:
    import optuna

    from training.contract import open_storage
    from training.launch import run_trial

    storage = str(tmp / "s.journal")
    study = optuna.create_study(study_name="r", storage=open_storage(storage),
                                direction="maximize", load_if_exists=True)
    trial = study.ask()
    config = {"dataset": "digits", "epochs": 2, "seed": 3, "algorithm": "sync",
              "ranks": ranks, **shape}
    spec = {"config": config, "warm": warm, "pool_ranks": 2, "timeout_s": 600,
            "ask_time": time.time(), "study_name": "r", "storage_url": storage,
            "trial_id": trial._trial_id, "pruner": PAUSE_AT_1 if pause else None,
            "resume_from": resume, "env": {"OMP_NUM_THREADS": "1"},
            "checkpoints": {"store": str(tmp / "artifacts"), "every": 0, "keep": 8}}
    result = run_trial(spec)
    if result["state"] not in ("paused", "complete"):
        raise RuntimeError(result.get("exit_reason"))
    return result


def measure(shape: dict[str, Any], repeats: int) -> dict[str, Any]:
    from training._warm_pool import shutdown_pools

    with tempfile.TemporaryDirectory(prefix="detol-pool-resize-") as name:
        tmp = Path(name)
        arms: dict[str, list[dict[str, Any]]] = {"in_place": [], "checkpoint": []}
        saves = []
        for _ in range(repeats):
            narrow = _run(tmp, shape, 1, warm=True, pause=True)  # on the pool: warm after one
            saves.append(narrow["checkpoint_s"])
            ckpt = narrow["checkpoint"]["id"]
            for arm, warm in (("in_place", True), ("checkpoint", False)):
                r = _run(tmp, shape, 2, warm=warm, resume=ckpt)
                if r.get("restored_from") != ("memory" if warm else "store"):
                    raise RuntimeError(f"{arm}: restored from {r.get('restored_from')}")
                arms[arm].append({"to_first_step_s": r["launch_overhead_s"],
                                  "restore_s": r["restore_s"],
                                  "epoch_s": r["train_time_s"] / max(1, r["epochs_run"])})
        shutdown_pools()
    out: dict[str, Any] = {"save_s": statistics.median(saves), "n_params": narrow["n_params"]}
    for arm, rows in arms.items():
        out[arm] = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        out[arm]["runs"] = rows
    out["ratio_to_first_step"] = (out["checkpoint"]["to_first_step_s"]
                                  / out["in_place"]["to_first_step_s"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="digits MLP only, 1 repeat")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    models = {"digits-mlp": MODELS["digits-mlp"]} if args.quick else MODELS
    repeats = 1 if args.quick else args.repeats
    load_before = os.getloadavg()
    results = {}
    for name, shape in models.items():
        r = measure(shape, repeats)
        results[name] = r
        print(f"{name} ({r['n_params']:,} parameters): pause save {r['save_s']:.3f} s; "
              f"continuation to first step: in place {r['in_place']['to_first_step_s']:.3f} s "
              f"(restore {r['in_place']['restore_s']:.3f} s), through the checkpoint "
              f"{r['checkpoint']['to_first_step_s']:.3f} s (restore "
              f"{r['checkpoint']['restore_s']:.3f} s): {r['ratio_to_first_step']:.1f}x; "
              f"2-rank epoch {r['in_place']['epoch_s']:.2f} s")
    print(f"load {load_before} -> {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps({
            "benchmark": "pool_resize", "date": now_iso(), "quick": args.quick,
            "repeats": repeats, "machine": machine("torch", "mpi4py", loadavg_before=load_before,
                                                   loadavg_after=os.getloadavg()),
            "models": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
