"""Benchmark the data layer (issue 48): record shards against the same images in memory and as
PNG files, resume and resize within an epoch, a node cache shared by trials.

Every figure comes from the real code: ``search data pack``'s packer, the trainer
(benchmarks/png_loading.py's MPI job: 2 ranks, sync, the same small CNN, global batch 64),
the trainer's sampler and reader, tests/mpi_jobs/_cursor_job.py (a trial that checkpoints
within its epoch and kills itself with SIGKILL), the node cache.

1. Epoch time, 2 ranks (the CNN on all 48,000 training images; ResNet-18 on 3,200, part
   ``resnet``): ``shards`` (``dataset = "shards:PATH"``, the PNG tree packed by
   ``search data pack``; the page cache dropped before the job, ``/proc/sys/vm/drop_caches``)
   and ``cache`` (the same, through an empty node cache: the first epoch copies every shard)
   against ``memory`` (the same images as float32 arrays). Ratios per round, mean and
   standard error over rounds; epoch 1 (cold) apart from epochs 2..E.
2. Loader only, one process, page cache dropped before each: an epoch of batches of 64 through
   the trainer's loader over shards, against torchvision's ``ImageFolder`` of the PNG files
   through a ``DataLoader`` (no workers: this machine has 2 cores), samples per second.
3. Resume: a 2-rank trial killed at a random step of its epoch resumes from its newest
   checkpoint on 1, 2 and 4 ranks; SHA-256 over the rest of the stream (each global batch's
   sample ids, sorted) against the uninterrupted run's; time from the job's start to its first
   step, resumed against fresh.
4. Elastic: 2 -> 4 -> 1 ranks within one epoch: duplicates and drops in the samples trained on,
   batches per rank at each width.
5. Co-tenancy: 4 processes read every shard through one cold cache at once: copies made; one
   loader worker's resident set over two epochs (growth).

    python benchmarks/data_layer.py [--quick] [--json PATH]

``--quick``: 4,000 images (train 3,600), 2 epochs, 1 round; else all 60,000, 2 epochs, 2 rounds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine, now_iso  # benchmarks/_common.py

ROOT = Path(__file__).resolve().parents[1]
NORMALIZE = "0.286/0.353"  # examples/fashion_png/resnet.py's Normalize: the memory side's values
PARTS = ("shuffle", "loader", "resume", "cotenancy", "epochs", "resnet")
sys.path[:0] = [str(ROOT), str(ROOT / "examples" / "fashion_png"), str(Path(__file__).parent)]
import png_loading  # noqa: E402  # the epoch-time job, shared with the PNG benchmark


def drop_caches() -> bool:
    """Empty the page cache (root only); False where it cannot."""
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def mean_se(values: list[float]) -> tuple[float, float | None]:
    m = statistics.fmean(values)
    return m, (statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else None)


def epochs(tree: Path, shards: Path, n_epochs: int, rounds: int, tmp: Path,
           model: str = "png_loading:cnn") -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"memory": [], "shards": [], "cache": []}
    dropped = True
    for r in range(rounds):
        sides = ["memory", "shards", "cache"]
        # every side in every position: round r runs them rotated by r (reversed on odd rounds)
        order = sides[r % 3:] + sides[: r % 3]
        for side in order if r % 2 == 0 else order[::-1]:
            spec: dict[str, Any] = {"side": "memory" if side == "memory" else "shards",
                                    "epochs": n_epochs, "workers": 0, "shards": str(shards),
                                    "model": model}
            if side == "cache":
                spec["cache"] = str(tmp / f"cache-{r}")  # empty: the first epoch fills it
            dropped &= drop_caches()
            runs[side].append(png_loading.run_job(spec, tree))
            print(f"  round {r + 1} {model} {side:6s} epochs "
                  f"{[round(t, 2) for t in runs[side][-1]['epoch_s']]} s "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
    out: dict[str, Any] = {"epoch_s": {k: [x["epoch_s"] for x in v] for k, v in runs.items()},
                           "page_cache_dropped": dropped}
    for side in ("shards", "cache"):
        first = [s["epoch_s"][0] / m["epoch_s"][0] for s, m in
                 zip(runs[side], runs["memory"], strict=True)]
        steady = [statistics.fmean(s["epoch_s"][1:]) / statistics.fmean(m["epoch_s"][1:])
                  for s, m in zip(runs[side], runs["memory"], strict=True)]
        out[f"{side}_first_epoch_ratio"] = mean_se(first)
        out[f"{side}_steady_ratio"] = mean_se(steady)
    return out


def loader_only(tree: Path, shards: Path) -> dict[str, Any]:
    import resnet
    import torch
    from torch.utils.data import DataLoader

    from training.data import GlobalBatchSlices
    from training.data._loaders import make_loader
    from training.data._shards import ShardSet

    torch.set_num_threads(1)
    resnet.ROOT = str(tree)
    out = {}
    train = ShardSet(shards, "train")
    sampler = GlobalBatchSlices(len(train), batch_size=64, rank=0, size=1, seed=0, arrays=True,
                                order=lambda s, e: train.epoch_order(s, e, 4))
    drop_caches()
    t = time.perf_counter()
    n = sum(len(x) for x, _ in make_loader(train, sampler, workers=0,
                                           device=torch.device("cpu")))
    out["shards_samples_per_s"] = n / (time.perf_counter() - t)
    folder = resnet.load(0.1).train  # ImageFolder (a Subset of it), PNG decoded by Pillow
    drop_caches()
    t = time.perf_counter()
    n = sum(len(x) for x, _ in DataLoader(folder, batch_size=64, shuffle=True, num_workers=0))
    out["png_samples_per_s"] = n / (time.perf_counter() - t)
    out["ratio"] = out["shards_samples_per_s"] / out["png_samples_per_s"]
    return out


def _cursor_runs(shards: Path, tmp: Path, seed: int) -> dict[str, Any]:
    from tests.training.test_cursor import BATCH, before, cursor_of, run, stream

    def digest(batches: list[tuple[int, ...]]) -> str:
        return hashlib.sha256(json.dumps(batches).encode()).hexdigest()[:16]

    rng = random.Random(seed)
    tmp.mkdir(parents=True, exist_ok=True)
    straight = stream([before(x, None) for x in run(tmp, "s", 2, shards, every_steps=0)["lines"]])
    die = rng.randrange(6, len(straight) - 1)
    k = run(tmp, "k", 2, shards, die_after=die)
    consumed = cursor_of(k, k["ids"][-1])
    done = stream([before(x, consumed) for x in k["lines"]])
    out: dict[str, Any] = {"killed_at_step": die, "cursor": consumed,
                           "batches": len(straight), "rest": {}}
    for ranks in (1, 2, 4):
        t0 = time.time()
        r = run(tmp, f"r{ranks}", ranks, shards, resume=k["ids"][-1])
        rest = stream([before(x, None) for x in r["lines"]])
        result = json.loads((tmp / f"r{ranks}-result.json").read_text())
        out["rest"][ranks] = {"hash": digest(rest), "expected": digest(straight[len(done):]),
                              "identical": done + rest == straight,
                              "start_to_first_step_s": result["first_step_time"] - t0}
    for ranks in (1, 2, 4):  # the same job, not resumed
        t0 = time.time()
        run(tmp, f"fresh{ranks}", ranks, shards, every_steps=0)
        fresh = json.loads((tmp / f"fresh{ranks}-result.json").read_text())
        out["rest"][ranks]["fresh_start_to_first_step_s"] = fresh["first_step_time"] - t0
    # elastic: 2 -> 4 -> 1 within the epoch
    c1 = cursor_of(k, k["ids"][0])
    b = run(tmp, "b4", 4, shards, resume=k["ids"][0], die_after=6)
    c2 = cursor_of(b, b["ids"][-1])
    c = run(tmp, "c1", 1, shards, resume=b["ids"][-1])
    parts = [[before(x, c1) for x in k["lines"]], [before(x, c2) for x in b["lines"]],
             [before(x, None) for x in c["lines"]]]
    used = [i for part in parts for rank in part for batch in rank for i in batch]
    out["elastic"] = {"cursors": [c1, c2], "used": len(used), "distinct": len(set(used)),
                      "duplicates": len(used) - len(set(used)),
                      "batches_per_rank": [[len(rank) for rank in part] for part in parts],
                      "n_train": int(json.loads((shards / "index.json").read_text())
                                     ["splits"]["train"]["samples"]), "batch": BATCH}
    out["elastic"]["drops"] = out["elastic"]["n_train"] - len(set(used))
    return out


def _rss_mb(pid: int) -> dict[str, float]:
    """Resident set: all, anonymous (the process's own), file-backed (mapped shards: the page
    cache's, shared by every process mapping them), and the proportional set size."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(":")[0]
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(line.split()[1]) / 1024
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            out["Pss"] = int(line.split()[1]) / 1024
    return out


def shuffle_quality(shards: Path, windows: tuple[int, ...] = (1, 2, 4)) -> dict[str, Any]:
    """Mean total-variation distance between a global batch's class mix and the train set's,
    for the windowed order and for a full permutation (5 epochs each)."""
    import numpy as np

    from training.data._shards import ShardSet

    train = ShardSet(shards, "train")
    y = train.rows(np.arange(len(train)))[1]
    classes = int(y.max()) + 1
    whole = np.bincount(y, minlength=classes) / len(y)

    def tv(order: np.ndarray) -> float:
        cut = len(order) // 64 * 64
        batches = y[order[:cut]].reshape(-1, 64)
        mix = np.stack([np.bincount(b, minlength=classes) for b in batches]) / 64
        return float(np.abs(mix - whole).sum(axis=1).mean() / 2)

    rng = np.random.default_rng(0)
    out = {"permutation": statistics.fmean(tv(rng.permutation(len(y))) for _ in range(5))}
    for w in windows:
        out[f"window_{w}"] = statistics.fmean(tv(train.epoch_order(0, e, w)) for e in range(5))
    return out


def cotenancy(shards: Path, tmp: Path) -> dict[str, Any]:
    import torch

    from training.data import GlobalBatchSlices
    from training.data._cache import NodeCache
    from training.data._loaders import make_loader
    from training.data._shards import ShardSet

    cache = tmp / "shared-cache"
    code = (f"import sys, numpy as np; sys.path.insert(0, {str(ROOT)!r})\n"
            "from training.data._cache import NodeCache\n"
            "from training.data._shards import ShardSet\n"
            f"s = ShardSet({str(shards)!r}, 'train', cache=NodeCache({str(cache)!r}, 1 << 34))\n"
            "s.rows(np.arange(len(s))); print(s.cache.copied)")
    drop_caches()
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    copied = [int(p.communicate(timeout=600)[0].strip() or -1) for p in procs]
    index = json.loads((shards / "index.json").read_text())
    out = {"trials": 4, "shards": len(index["splits"]["train"]["shards"]),
           "copies_in_cache": len(NodeCache(cache, 1).copies()), "copied_by_each": copied}
    train = ShardSet(shards, "train", cache=NodeCache(cache, 1 << 34))
    sampler = GlobalBatchSlices(len(train), batch_size=64, rank=0, size=1, seed=0, arrays=True,
                                order=lambda s, e: train.epoch_order(s, e, 4))
    loader = make_loader(train, sampler, workers=1, device=torch.device("cpu"))
    import psutil

    rss = []
    for epoch in (1, 2):
        sampler.set_epoch(epoch)
        for i, _ in enumerate(loader):
            if i == 0 or i == len(sampler) - 1:
                kids = psutil.Process().children(recursive=True)
                worker = max(kids, key=lambda k: _rss_mb(k.pid)["VmRSS"])  # not the server
                rss.append(_rss_mb(worker.pid))
    out["worker_rss_mb"] = rss  # epoch 1 first/last batch, epoch 2 first/last batch
    for key in ("VmRSS", "RssAnon", "Pss"):
        out[f"worker_{key}_growth_epoch1"] = rss[1][key] / rss[0][key] - 1
        out[f"worker_{key}_growth_epoch2"] = rss[3][key] / rss[2][key] - 1
    del loader
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--seed", type=int, default=0, help="the random kill step")
    parser.add_argument("--parts", default=",".join(PARTS), help="a comma list of "
                        f"{', '.join(PARTS)}; with --json, merged into the file's figures")
    args = parser.parse_args()
    parts = args.parts.split(",")
    limit = 4000 if args.quick else None
    tree = ROOT / "data" / ("fashion-png-4000" if args.quick else "fashion-png")
    import write_pngs

    from training.data._pack import pack

    write_pngs.write_tree(tree, limit=limit)
    load_before = os.getloadavg()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="detol-data-bench-") as tmp_name:
        tmp = Path(tmp_name)
        shards = tmp / "fashion-shards"
        t = time.perf_counter()
        shard_mb = 0.25 if args.quick else 4.0  # 12 shards either way
        # the memory side's split: resnet.load(val_fraction=0.2), TrainConfig's default
        index = pack(str(tree), shards, shard_mb=shard_mb, val_fraction=0.2,
                     normalize=NORMALIZE)
        pack_s = time.perf_counter() - t
        print(f"packed {index['splits']['train']['samples']} train images into "
              f"{len(index['splits']['train']['shards'])} shards in {pack_s:.1f} s", flush=True)
        old = json.loads(args.json.read_text()) if args.json and args.json.exists() else {}
        result: dict[str, Any] = {
            **old, "benchmark": "data_layer", "quick": args.quick,
            "machine": machine("torch", "torchvision", "pillow", "pyarrow", "mpi4py", "mpich"),
            "n_train": index["splits"]["train"]["samples"], "pack_s": pack_s,
            "shards": len(index["splits"]["train"]["shards"]), "shard_mb": shard_mb}
        result.setdefault("dates", {}).update({p: now_iso() for p in parts})
        result.setdefault("loadavg", {}).update({p: load_before for p in parts})
        if "shuffle" in parts:
            result["shuffle"] = shuffle_quality(shards)
            print(f"  shuffle (TV distance of a batch's class mix): {result['shuffle']}")
        if "loader" in parts:
            result["loader"] = loader_only(tree, shards)
            print(f"  loader only: {result['loader']}", flush=True)
        if "resume" in parts:
            small = tmp / "small"
            pack("digits", small, shard_mb=0.02)  # the resume runs: ~74 samples a shard
            result["resume"] = _cursor_runs(small, tmp / "cursor", args.seed)
            print(f"  resume: {json.dumps(result['resume'])}", flush=True)
        if "cotenancy" in parts:
            result["cotenancy"] = cotenancy(shards, tmp)
            print(f"  cotenancy: {result['cotenancy']}", flush=True)
            # the loader's workers told this process's mpi4py not to start MPI: not the jobs'
            os.environ.pop("MPI4PY_RC_INITIALIZE", None)
        if "epochs" in parts:
            result["epochs"] = epochs(tree, shards, 2, args.rounds or (1 if args.quick else 3),
                                      tmp)
        if "resnet" in parts:  # ResNet-18 (examples/fashion_png/resnet.py) on 4,000 images
            small_tree = ROOT / "data" / "fashion-png-4000"
            write_pngs.write_tree(small_tree, limit=4000)
            small_shards = tmp / "fashion-4000-shards"
            pack(str(small_tree), small_shards, shard_mb=0.25, val_fraction=0.2,
                 normalize=NORMALIZE)
            result["epochs_resnet18"] = epochs(small_tree, small_shards, 2, args.rounds or 2,
                                               tmp, model="resnet:build")
    result.setdefault("loadavg_after", {}).update({p: os.getloadavg() for p in parts})
    result.setdefault("runtime_s", {})[args.parts] = time.perf_counter() - start
    e = result.get("epochs")
    if e and "loader" in result:
        print(f"shards/memory epoch: first {e['shards_first_epoch_ratio']}, steady "
          f"{e['shards_steady_ratio']} (goal <= 1.10); with a cold node cache: first "
          f"{e['cache_first_epoch_ratio']} (goal <= 1.5); loader {result['loader']['ratio']:.2f}x"
          f" PNG (goal >= 3); load {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
