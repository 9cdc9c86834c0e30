"""Widening promoted trials (issue 31) vs fixed-width ASHA: time to the study's best model.

What is measured, on a simulated clock (a model, not a measurement of 1,024 real ranks):

*The search.* Pause-and-promote ASHA (``search.pruners._promotion.PromotingHalving``,
min_resource 1, eta 3, 12 epochs: rungs 1, 3, 9) replayed on recorded learning curves by
``search.pruners._replay`` (the driver's own ``next_start`` decides what starts, and the width
policy is the driver's ``search.driver._resize.WidenOnPromotion``, decided in the same place).
``--slots`` ranks (1,024 by default, the issue's; the promoter keeps its rung values indexed,
``search.pruners._rung_index``, so a replay no longer costs O(trials^2); ``--scan``: the plain
scan that reads every trial per answer, the reference, for timing and to check that both take
the same decisions); ``--configs-per-slot`` configurations (4) drawn with
replacement from the 100 recorded mnist1d curves of ``results/pruning_curves.json`` (12 epochs
each, with every epoch's recorded seconds on one rank), in a seeded random order.

*Two arms, same configurations, same order.* ``fixed``: every trial runs on one rank for its
whole life (fixed-width ASHA, 1,024 trials at once). ``widen``: a promoted trial runs ``factor``
(2) times wider than its paused segment, up to ``max_ranks`` (8): 1 -> 2 -> 4 -> 8 ranks over the
three rungs; it waits for its slots, and no new configuration starts ahead of it (``idle`` off:
the figures of the promotion rule alone).

*The throughput model* (``epoch_time``): a step on ``w`` ranks with the global batch fixed takes
``t(w) = c / w + e * 2 (w - 1) / w``, the compute split ``w`` ways and the exposed allreduce
growing as a ring allreduce's bytes per rank (``2 (w - 1) / w`` of the gradient). Fitted to
``results/data_parallel.json``'s MLP (1.2 MB of gradients, global batch 256): its measured 2-rank
step time ``t(2)`` (samples/s) and the share of it spent waiting for the allreduce
(``sync_wait_fraction``) give ``e = wait`` and ``c = 2 (t(2) - e)``, the 1-rank step time (compute
split evenly; no latency term, which favours wide jobs a little). An epoch on ``w`` ranks takes
its recorded 1-rank seconds times ``t(w) / t(1)``.

*A third arm*, ``idle``: ``widen`` with ``resize.idle`` on (the driver's ``widen_idle``: at
the study's end idle slots widen the running trials). Its figure is the end-of-study *tail*,
from the start of the last new configuration to the study's end: ``tail_ratio`` = widen's tail
/ idle's, beside the whole study's ratio and the time to the same best model.

*Figures* per seed: each arm's best final value, and the time at which a trial first completed
with at least ``target`` = the lower of the two arms' best values (the same final accuracy for
both: neither arm is credited for a better model); ``ratio`` = fixed's time / widen's. Also:
each arm's time to its own best, its makespan and slot-time (ranks x seconds). Mean and standard
error over seeds. The issue's goal: ratio >= 2 (RASDA reports 1.9x at 1,024 GPUs).

Command::

    python benchmarks/elastic.py [--quick] [--json PATH] [--seeds N] [--slots N]

``--quick``: 64 slots, 256 configurations, 60 s epochs, 5 seeds (a few minutes on a busy
machine). Full: ``--json results/elastic.json`` (1,024 slots, 60 s and 6 s epochs);
``--slots 128 --json results/elastic_128.json`` the earlier size. Each arm's ``decisions`` is a
hash of everything its replay decided (each trial's segment, width and end; each completion's
time and value): two runs took the same decisions when their hashes agree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _common import machine, now_iso  # noqa: E402

from search.driver._resize import WidenOnPromotion  # noqa: E402
from search.pruners._promotion import PromotingHalving  # noqa: E402
from search.pruners._replay import replay  # noqa: E402

EPOCHS = 12
ETA = 3


def throughput_model(path: Path = HERE / "results" / "data_parallel.json") -> dict[str, Any]:
    """The step-time model's inputs and its ``t(w) / t(1)`` for a few widths."""
    data = json.loads(path.read_text())
    run = data["throughput"]["mlp"]["2"]
    t2 = run["global_batch"] / run["ours"]["samples_per_s"]
    wait = run["ours"]["sync_wait_fraction"] * t2
    compute = 2 * (t2 - wait)
    return {"source": str(path.relative_to(HERE.parent)), "date": data["date"],
            "global_batch": run["global_batch"], "param_bytes": run["param_bytes"],
            "t2_ms": 1e3 * t2, "exposed_allreduce_2_ms": 1e3 * wait, "t1_ms": 1e3 * compute}


def restart_cost(results: Path = HERE / "results") -> dict[str, Any]:
    """What a width change costs a trial: a new job (launch_overhead.json: mpiexec, Python,
    torch, storage) and its checkpoint written and read back (checkpoints.json, digits MLP,
    median save; the restore taken as long again)."""
    launch = json.loads((results / "launch_overhead.json").read_text())
    ckpt = json.loads((results / "checkpoints.json").read_text())
    save = ckpt["models"]["digits-mlp"]["checkpoint_ms"]["median"] / 1e3
    return {"launch_s": launch["trial_launch_overhead_s"], "checkpoint_save_s": save,
            "seconds": launch["trial_launch_overhead_s"] + 2 * save}


def step_time(model: dict[str, Any], w: int) -> float:
    return model["t1_ms"] / w + model["exposed_allreduce_2_ms"] * 2 * (w - 1) / w


def curves(path: Path = HERE / "results" / "pruning_curves.json",
           dataset: str = "mnist1d") -> tuple[list[list[float]], list[list[float]]]:
    configs = json.loads(path.read_text())["datasets"][dataset]["configs"]
    full = [c for c in configs if len(c["val_accuracy"]) == EPOCHS]
    return [c["val_accuracy"] for c in full], [c["epoch_seconds"] for c in full]


def time_to(completions: list[tuple[float, float, int]], target: float) -> float | None:
    return next((t for t, v, _ in completions if v >= target - 1e-12), None)


def decisions(run: Any) -> str:
    """A hash of what a replay decided: segments, widths, completions (time and value)."""
    text = json.dumps([run.segments, run.widths, run.completions, run.time])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def one_seed(seed: int, slots: int, n_configs: int, model: dict[str, Any], *,
             factor: int, max_ranks: int, epoch_s: float, restart_s: float,
             scan: bool = False) -> dict[str, Any]:
    values, seconds = curves()
    mean = sum(map(sum, seconds)) / sum(map(len, seconds))
    rng = random.Random(seed)
    picks = [rng.randrange(len(values)) for _ in range(n_configs)]
    curves_n = [values[i] for i in picks]
    durations = [[x * epoch_s / mean for x in seconds[i]] for i in picks]
    base = step_time(model, 1)
    arms = {"fixed": None,
            "widen": WidenOnPromotion(factor=factor, max_ranks=max_ranks, idle=False),
            "idle": WidenOnPromotion(factor=factor, max_ranks=max_ranks, idle=True)}
    out: dict[str, Any] = {}
    runs = {}
    for name, policy in arms.items():
        t = time.perf_counter()
        # As the driver builds it: with [resize], a promoted trial pauses to be widened.
        pruner = PromotingHalving(1, ETA, max_resource=EPOCHS,
                                  widen_until=policy.max_ranks if policy else 0, index=not scan)
        run = replay(curves_n, pruner, concurrency=slots,
                     order=range(n_configs), epochs=EPOCHS, durations=durations,
                     study_name=f"elastic-{seed}", resize=policy,
                     epoch_time=lambda w: step_time(model, w) / base, restart=restart_s)
        runs[name] = run
        best = max(v for _, v, _ in run.completions)
        out[name] = {"best": best, "time_to_own_best": time_to(run.completions, best),
                     "makespan": run.time, "slot_time": run.rank_time,
                     "complete": run.complete, "promotions": run.promotions,
                     "last_configuration_start": run.last_configuration_start,
                     "tail": run.time - run.last_configuration_start, "widened": run.widened,
                     "widths": {str(w): run.widths.count(w) for w in sorted(set(run.widths))},
                     "decisions": decisions(run), "replay_s": time.perf_counter() - t}
    target = min(out["fixed"]["best"], out["widen"]["best"])
    for name in arms:
        out[name]["time_to_target"] = time_to(runs[name].completions, target)
    out["target"] = target
    out["ratio"] = out["fixed"]["time_to_target"] / out["widen"]["time_to_target"]
    out["makespan_ratio"] = out["fixed"]["makespan"] / out["widen"]["makespan"]
    # Idle slots at the study's end (resize.idle) against the same policy without: the tail
    # (last new configuration's start -> the study's end), and time to the same best model.
    out["idle_target"] = min(out["widen"]["best"], out["idle"]["best"])
    out["tail_ratio"] = out["widen"]["tail"] / out["idle"]["tail"]
    out["idle_makespan_ratio"] = out["widen"]["makespan"] / out["idle"]["makespan"]
    out["idle_best_ratio"] = (time_to(runs["widen"].completions, out["idle_target"])
                              / time_to(runs["idle"].completions, out["idle_target"]))
    out["idle_vs_fixed_ratio"] = (
        time_to(runs["fixed"].completions, min(out["fixed"]["best"], out["idle"]["best"]))
        / time_to(runs["idle"].completions, min(out["fixed"]["best"], out["idle"]["best"])))
    return out


def mean_se(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, 0.0
    var = sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
    return m, math.sqrt(var / len(xs))


RESIZE_MODELS = {"digits-mlp": {"hidden": 128, "layers": 2},
                 "wide-mlp": {"hidden": 1024, "layers": 4}}


def resize_job(out: Path) -> None:
    """Under ``mpiexec -n 2``: per model, 2 ranks train one epoch and pause (the checkpoint is
    written: ``save_s``); one rank then restores it (download, the 2 -> 1 reshard, load:
    ``restore_s``), and two ranks again (2 -> 2, no reshard: the yardstick). Rank 0 writes
    the times to ``out``."""
    import shutil
    import uuid

    from mpi4py import MPI
    from optuna.artifacts import FileSystemArtifactStore

    from training import TrainConfig
    from training.jobs import Trainer
    from training.session import PAUSE
    from training.state import Checkpointer
    from training.storage import CheckpointPlan

    world = MPI.COMM_WORLD
    store = FileSystemArtifactStore(str(out.parent))

    def checkpointer(comm: MPI.Comm) -> Checkpointer:
        def upload(path: str, epoch: int) -> str:
            name = str(uuid.uuid4())
            with open(path, "rb") as f:
                store.write(name, f)
            return name

        def download(name: str, path: str) -> None:
            with store.open_reader(name) as src, open(path, "wb") as dst:
                shutil.copyfileobj(src, dst)

        plan = CheckpointPlan(store="unused", every=0, keep=5)
        if comm.rank:
            return Checkpointer(plan, comm)
        return Checkpointer(plan, comm, upload=upload, download=download)

    class Pause:
        def decide(self, epoch: int, row: Any) -> str:
            return PAUSE

    result: dict[str, Any] = {}
    for name, shape in RESIZE_MODELS.items():
        config = TrainConfig(dataset="digits", epochs=3, ranks=2, **shape)
        t = Trainer(config, world, reporter=Pause() if world.rank == 0 else None,
                    checkpointer=checkpointer(world))
        t.train()
        ck = world.bcast(t.checkpointer.written[-1] if world.rank == 0 else None)
        row = {"save_s": t.checkpointer.seconds if world.rank == 0 else 0.0,
               "bytes": t.checkpointer.bytes, "n_params": t.n_params}
        for label, width in (("2->1", 1), ("2->2", 2)):
            comm = world.Split(0 if world.rank < width else MPI.UNDEFINED, key=world.rank)
            if comm != MPI.COMM_NULL:
                r = Trainer(config.model_copy(update={"ranks": width}), comm,
                            checkpointer=checkpointer(comm),
                            reporter=Pause() if comm.rank == 0 else None)
                began = MPI.Wtime()  # the restore alone: what Trainer(resume_from=ck) does
                header, mine = r.checkpointer.load(ck, r.config.model_dump())  # waits for rank 0
                r.load_checkpoint_state(mine)
                took = comm.allreduce(MPI.Wtime() - began, op=MPI.MAX)
                row[label] = {"restore_s": took, "reshard_s": r.checkpointer.reshard_seconds}
                r.algorithm.finish()
                comm.Free()
            world.Barrier()
        result[name] = row
    if world.rank == 0:
        out.write_text(json.dumps(result))


def measure_resize() -> dict[str, Any]:
    """Run :func:`resize_job` on 2 real ranks (mpiexec) and read its times."""
    import subprocess
    import tempfile

    from training.launch import launcher_argv

    with tempfile.TemporaryDirectory(prefix="detol-elastic-") as tmp:
        out = Path(tmp) / "resize.json"
        argv = launcher_argv("mpiexec -n {ranks}", 2) + [sys.executable, __file__,
                                                        "--resize-job", str(out)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        if proc.returncode != 0:
            raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])
        return json.loads(out.read_text())


def sweep(args: argparse.Namespace, slots: int, model: dict[str, Any], restart: dict[str, Any],
          epoch_s: float) -> dict[str, Any]:
    n_configs = slots * args.configs_per_slot
    seeds = []
    for s in range(args.seeds):
        seeds.append(one_seed(s, slots, n_configs, model, factor=args.factor,
                              max_ranks=args.max_ranks, epoch_s=epoch_s,
                              restart_s=restart["seconds"], scan=args.scan))
        print(f"seed {s}: " + ", ".join(f"{arm} {seeds[-1][arm]['replay_s']:.1f} s "
                                         f"({seeds[-1][arm]['decisions']})"
                                         for arm in ("fixed", "widen", "idle")), flush=True)
    ratio, ratio_se = mean_se([s["ratio"] for s in seeds])
    span, span_se = mean_se([s["makespan_ratio"] for s in seeds])
    print(f"\nmean 1-rank epoch {epoch_s:g} s, restart {restart['seconds']:.2f} s "
          f"({restart['seconds'] / epoch_s:.3f} epochs)")
    print(f"{'seed':>4} {'target':>7} {'fixed s':>9} {'widen s':>9} {'ratio':>6} "
          f"{'best fixed':>10} {'best widen':>10} {'slot-time ratio':>15}")
    for i, s in enumerate(seeds):
        print(f"{i:>4} {s['target']:>7.4f} {s['fixed']['time_to_target']:>9.1f} "
              f"{s['widen']['time_to_target']:>9.1f} {s['ratio']:>6.2f} "
              f"{s['fixed']['best']:>10.4f} {s['widen']['best']:>10.4f} "
              f"{s['widen']['slot_time'] / s['fixed']['slot_time']:>15.2f}")
    print(f"time to the best model: widen {ratio:.2f} +/- {ratio_se:.2f} (SE) x faster than "
          f"fixed-width ASHA; makespan ratio {span:.2f} +/- {span_se:.2f}")
    print(f"\nidle slots at the study's end (widen without / with resize.idle)\n"
          f"{'seed':>4} {'tail off s':>10} {'tail on s':>10} {'tail ratio':>10} "
          f"{'widened':>7} {'best off':>9} {'best on':>9} {'to-best ratio':>13}")
    for i, s in enumerate(seeds):
        print(f"{i:>4} {s['widen']['tail']:>10.1f} {s['idle']['tail']:>10.1f} "
              f"{s['tail_ratio']:>10.2f} {s['idle']['widened']:>7} {s['widen']['best']:>9.4f} "
              f"{s['idle']['best']:>9.4f} {s['idle_best_ratio']:>13.2f}")
    idle = {key: mean_se([s[key] for s in seeds]) for key in
            ("tail_ratio", "idle_makespan_ratio", "idle_best_ratio", "idle_vs_fixed_ratio")}
    print("end-of-study tail: " + "; ".join(f"{k} {m:.2f} +/- {e:.2f}"
                                            for k, (m, e) in idle.items()))
    return {"epoch_s": epoch_s, "configurations": n_configs, "ratio": ratio,
            "ratio_se": ratio_se, "makespan_ratio": span, "makespan_ratio_se": span_se,
            **{k: m for k, (m, _) in idle.items()}, **{f"{k}_se": e for k, (_, e) in idle.items()},
            "seeds": seeds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--slots", type=int)
    ap.add_argument("--configs-per-slot", type=int, default=4)
    ap.add_argument("--scan", action="store_true",
                    help="the promoter reads every trial per answer (the reference, O(trials^2))")
    ap.add_argument("--factor", type=int, default=2)
    ap.add_argument("--max-ranks", type=int, default=8)
    ap.add_argument("--epoch-s", type=float, nargs="+",
                    help="mean 1-rank epoch seconds of the simulated models (first: headline; "
                    "default 60 and 6, --quick 60)")
    ap.add_argument("--resize-job", type=Path, help=argparse.SUPPRESS)  # under mpiexec
    ap.add_argument("--no-resize-cost", action="store_true",
                    help="skip the real 2 -> 1 checkpoint resize timing")
    ap.add_argument("--resize-only", action="store_true",
                    help="only the real resize timing, added to the --json file")
    args = ap.parse_args()
    if args.resize_job is not None:
        resize_job(args.resize_job)
        return
    if args.resize_only:  # the real part alone, added to an existing --json file
        if args.json is None or not args.json.is_file():
            ap.error("--resize-only needs --json PATH of an earlier run")
        doc = json.loads(args.json.read_text())
        doc["resize_through_checkpoint"] = {"date": now_iso(), "loadavg_before": os.getloadavg(),
                                            **measure_resize(),
                                            "loadavg_after": os.getloadavg()}
        print(json.dumps(doc["resize_through_checkpoint"], indent=1))
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
        return
    args.epoch_s = args.epoch_s or ([60.0] if args.quick else [60.0, 6.0])
    slots = args.slots or (64 if args.quick else 1024)
    load_before = os.getloadavg()
    started = time.perf_counter()
    model = throughput_model()
    model["epoch_time"] = {str(w): step_time(model, w) / step_time(model, 1)
                           for w in (1, 2, 4, 8, 16) if w <= max(8, args.max_ranks)}
    restart = restart_cost()
    print(f"slots {slots}, {args.configs_per_slot} configurations per slot, ASHA eta {ETA}, "
          f"{EPOCHS} epochs, widen x{args.factor} per rung up to {args.max_ranks} ranks; "
          "model epoch time " + ", ".join(f"w={w}: {v:.3f}" for w, v in
                                          model["epoch_time"].items()))
    resize = None
    if args.no_resize_cost and args.json is not None and args.json.is_file():
        # Not measured again: the earlier measurement stays in the file (with its own date).
        resize = json.loads(args.json.read_text()).get("resize_through_checkpoint")
    if not args.no_resize_cost:
        resize = {"date": now_iso(), **measure_resize()}
        for name, row in resize.items():
            if not isinstance(row, dict):
                continue
            print(f"resize through the checkpoint, {name} ({row['n_params']:,} parameters, "
                  f"{row['bytes'] / 1e6:.1f} MB): save {row['save_s']:.3f} s, restore 2->1 "
                  f"{row['2->1']['restore_s']:.3f} s (reshard {row['2->1']['reshard_s']:.4f} s), "
                  f"same width 2->2 {row['2->2']['restore_s']:.3f} s")
    runs = [sweep(args, slots, model, restart, e) for e in args.epoch_s]
    if args.json:
        head = runs[0]
        payload = {
            "benchmark": "elastic", "date": now_iso(), "quick": args.quick,
            "machine": machine("optuna", loadavg_before=load_before,
                               loadavg_after=os.getloadavg()),
            "simulated": True,
            "settings": {"slots": slots, "configurations_per_slot": args.configs_per_slot,
                         "eta": ETA, "epochs": EPOCHS, "factor": args.factor,
                         "max_ranks": args.max_ranks, "seeds": args.seeds,
                         "promoter": "plain scan" if args.scan else "rung index",
                         "curves": "results/pruning_curves.json mnist1d, drawn with "
                                   "replacement; epoch seconds scaled to epoch_s"},
            "throughput_model": model, "restart": restart, "resize_through_checkpoint": resize,
            "ratio": head["ratio"], "ratio_se": head["ratio_se"], "epoch_s": head["epoch_s"],
            "by_epoch_s": runs, "runtime_s": time.perf_counter() - started,
        }
        args.json.write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()
