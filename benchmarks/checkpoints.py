"""What a checkpoint costs per epoch: training time with a checkpoint after every epoch vs none.

What is measured: the real trial path. For each model and seed, two MPI jobs (``mpiexec -n 2
python -m training.jobs.worker SPEC``, the worker every trial runs) train the same configuration,
one with ``[checkpoints] every = 1`` and one without, into trials of a real Optuna journal
storage; each checkpoint is gathered from both ranks, written with ``torch.save`` and uploaded
with ``optuna.artifacts.upload_artifact`` to a file-system artifact store, linked to its trial.
The two jobs of a seed run back to back, in alternating order, so load drifts cancel.

Per model: the trainer's own time per epoch (``train_time_s / epochs``) with and without
checkpoints, their ratio (median and mean +- standard error over seeds), rank 0's seconds
spent in checkpointing per epoch (``checkpoint_s / checkpoints``, gather + write + upload), and
the file size. Models: the digits MLP of the quickstart (hidden 128, 2 layers, about 25k
parameters) and an MNIST-5k MLP (hidden 512, 2 layers, about 670k parameters); SGD with
momentum, so the optimizer state doubles the parameters.

Command::

    python benchmarks/checkpoints.py [--quick] [--json PATH] [--seeds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
from _common import machine, now_iso  # benchmarks/_common/ (the script directory)

from training.contract import TrialSpec, open_storage
from training.launch import launcher_argv

MODELS = {
    "digits-mlp": {"dataset": "digits", "hidden": 128, "layers": 2},
    "mnist5k-mlp": {"dataset": "mnist5k", "hidden": 512, "layers": 2},
}


def _job(config: dict[str, Any], store: str | None, storage: str, study: optuna.Study,
         tmp: Path, tag: str) -> dict[str, Any]:
    trial = study.ask()
    spec = TrialSpec(
        config=config,
        study_name=study.study_name,
        storage_url=storage,
        trial_id=trial._trial_id,  # noqa: SLF001 - rank 0 reopens this very trial
        trial_number=trial.number,
        pruner=None,
        result_path=str(tmp / f"{tag}.json"),
        checkpoints={"store": store, "every": 1, "keep": 2} if store else None,
    )
    path = tmp / f"{tag}-spec.json"
    path.write_text(json.dumps(spec.to_json()))
    argv = launcher_argv("mpiexec -n {ranks}", config["ranks"]) + [
        sys.executable, "-m", "training.jobs.worker", str(path)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])
    result = json.loads(Path(spec.result_path or "").read_text())
    study.tell(trial, result["values"]["val_accuracy"])
    return dict(result)


def _summary(xs: list[float]) -> dict[str, float]:
    se = statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else float("nan")
    return {"median": statistics.median(xs), "mean": statistics.fmean(xs), "se": se}


def run(quick: bool, seeds: int) -> dict[str, Any]:
    epochs = 2 if quick else 6
    models = {"digits-mlp": MODELS["digits-mlp"]} if quick else MODELS
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="detol-ckpt-bench-") as tmp_name:
        tmp = Path(tmp_name)
        storage = str(tmp / "bench.journal")
        store = str(tmp / "artifacts")
        study = optuna.create_study(study_name="ckpt", storage=open_storage(storage),
                                    direction="maximize")
        for name, model in models.items():
            rows = []
            for seed in range(seeds):
                config = {**model, "epochs": epochs, "ranks": 2, "seed": seed, "lr": 0.05}
                order = [None, store] if seed % 2 == 0 else [store, None]
                got = {}
                for where in order:
                    tag = f"{name}-{seed}-{'ckpt' if where else 'plain'}"
                    got[bool(where)] = _job(config, where, storage, study, tmp, tag)
                plain, ckpt = got[False], got[True]
                saves = epochs - 1  # none after the last epoch
                rows.append({
                    "seed": seed,
                    "plain_epoch_s": plain["train_time_s"] / epochs,
                    "ckpt_epoch_s": ckpt["train_time_s"] / epochs,
                    "ratio": ckpt["train_time_s"] / plain["train_time_s"],
                    "checkpoint_s_each": ckpt["checkpoint_s"] / saves,
                    "checkpoint_bytes": ckpt["checkpoint_bytes"],
                    "n_params": ckpt["n_params"],
                })
                print(f"{name} seed {seed}: epoch {rows[-1]['plain_epoch_s']:.3f} s plain, "
                      f"{rows[-1]['ckpt_epoch_s']:.3f} s with a checkpoint each epoch "
                      f"(ratio {rows[-1]['ratio']:.3f}); one checkpoint "
                      f"{rows[-1]['checkpoint_s_each'] * 1000:.1f} ms, "
                      f"{rows[-1]['checkpoint_bytes'] / 1e6:.2f} MB", flush=True)
            out[name] = {
                "rows": rows,
                "ratio": _summary([r["ratio"] for r in rows]),
                "checkpoint_ms": _summary([1000 * r["checkpoint_s_each"] for r in rows]),
                "plain_epoch_ms": _summary([1000 * r["plain_epoch_s"] for r in rows]),
                "checkpoint_mb": rows[0]["checkpoint_bytes"] / 1e6,
                "n_params": rows[0]["n_params"],
            }
    return {"epochs": epochs, "ranks": 2, "models": out}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one small model, 2 seeds (about 30 s)")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--seeds", type=int, default=None, help="seeds per model (default 6)")
    args = p.parse_args(argv)
    seeds = args.seeds or (2 if args.quick else 6)
    load = os.getloadavg()[0]
    start = time.time()
    figures = run(args.quick, seeds)
    print(f"\n{'model':<14} {'params':>8} {'epoch, plain':>13} {'with ckpt / plain':>26} "
          f"{'one checkpoint':>16} {'file':>8}")
    for name, m in figures["models"].items():
        r, c = m["ratio"], m["checkpoint_ms"]
        print(f"{name:<14} {m['n_params']:>8} {m['plain_epoch_ms']['median']:>10.1f} ms "
              f"{r['median']:>8.3f} ({r['mean']:.3f} +- {r['se']:.3f}) "
              f"{c['median']:>10.1f} ms {m['checkpoint_mb']:>6.2f} MB")
    print(f"load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end; "
          f"{time.time() - start:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "benchmark": "checkpoints", "date": now_iso(),
            "machine": machine("torch", "optuna", "mpi4py", "mpich",
                               load_before=load, load_after=os.getloadavg()[0]),
            "quick": args.quick, "seeds": seeds, **figures,
        }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
