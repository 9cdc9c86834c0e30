"""What a width change costs a trial: in place on a warm pool vs through the checkpoint file
(issue 31; training.jobs._regroup).

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

MODELS: dict[str, dict[str, Any]] = {
    "digits-mlp": {"hidden": 128, "layers": 2},
    "wide-mlp": {"hidden": 1024, "layers": 4},
    # The largest model in benchmarks/ (resnet_ddp.py): torchvision's ResNet-18 as a user's plug-in
    # (examples/fashion_png) on Fashion-MNIST PNG files that this script writes first.
    "resnet18-png": {"model": "resnet:build", "dataset": "resnet:load", "batch_size": 32,
                     "loader_workers": 1},
}
EXAMPLE = HERE.parent / "examples" / "fashion_png"
PAUSE_AT_1 = {"factory": "search.pruners._promotion:PromotingHalving",
              "kwargs": {"min_resource": 1, "reduction_factor": 2, "max_resource": 3}}


def _run(tmp: Path, shape: dict[str, Any], ranks: int, *, warm: bool,
         resume: str | None = None, pause: bool = False,
         env: dict[str, str] | None = None) -> dict[str, Any]:
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
            "resume_from": resume, "env": {"OMP_NUM_THREADS": "1", **(env or {})},
            "checkpoints": {"store": str(tmp / "artifacts"), "every": 0, "keep": 8}}
    result = run_trial(spec)
    if result["state"] not in ("paused", "complete"):
        raise RuntimeError(result.get("exit_reason"))
    return result


def measure(shape: dict[str, Any], repeats: int, png_limit: int) -> dict[str, Any]:
    from training.launch import shutdown_pools

    with tempfile.TemporaryDirectory(prefix="detol-pool-resize-") as name:
        tmp = Path(name)
        env = None
        if shape.get("model") == "resnet:build":
            import subprocess

            pngs = tmp / "fashion-png"
            subprocess.run([sys.executable, str(EXAMPLE / "write_pngs.py"), "--out", str(pngs),
                            "--limit", str(png_limit)], check=True, capture_output=True)
            env = {"PYTHONPATH": str(EXAMPLE), "FASHION_PNG": str(pngs)}
        arms: dict[str, list[dict[str, Any]]] = {"in_place": [], "checkpoint": []}
        saves = []
        for _ in range(repeats):
            narrow = _run(tmp, shape, 1, warm=True, pause=True, env=env)  # warm after one
            saves.append(narrow["checkpoint_s"])
            ckpt = narrow["checkpoint"]["id"]
            for arm, warm in (("in_place", True), ("checkpoint", False)):
                r = _run(tmp, shape, 2, warm=warm, resume=ckpt, env=env)
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
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset")
    ap.add_argument("--png-limit", type=int, default=1000,
                    help="resnet18-png: images of each split written (default 1000)")
    args = ap.parse_args()
    chosen = ["digits-mlp"] if args.quick else [m for m in args.models.split(",") if m]
    if unknown := sorted(set(chosen) - set(MODELS)):
        raise SystemExit(f"--models: unknown {unknown}; known: {', '.join(MODELS)}")
    models = {name: MODELS[name] for name in chosen}
    repeats = 1 if args.quick else args.repeats
    load_before = os.getloadavg()
    results = {}
    for name, shape in models.items():
        r = measure(shape, repeats, args.png_limit)
        results[name] = r
        print(f"{name} ({r['n_params']:,} parameters): pause save {r['save_s']:.3f} s; "
              f"continuation to first step: in place {r['in_place']['to_first_step_s']:.3f} s "
              f"(restore {r['in_place']['restore_s']:.3f} s), through the checkpoint "
              f"{r['checkpoint']['to_first_step_s']:.3f} s (restore "
              f"{r['checkpoint']['restore_s']:.3f} s): {r['ratio_to_first_step']:.1f}x; "
              f"2-rank epoch {r['in_place']['epoch_s']:.2f} s; in place / epoch "
              f"{r['in_place']['to_first_step_s'] / r['in_place']['epoch_s']:.3f}")
    print(f"load {load_before} -> {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps({
            "benchmark": "pool_resize", "date": now_iso(), "quick": args.quick,
            "repeats": repeats, "png_limit": args.png_limit,
            "machine": machine("torch", "mpi4py", loadavg_before=load_before,
                               loadavg_after=os.getloadavg()),
            "models": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
