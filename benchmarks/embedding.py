"""Graph embeddings on NAS-Bench-201: how well one fixed predictor, trained on the embedding of
a few random cells, ranks the cells it has not seen (Kendall tau), per encoding.

What is measured: for each split (seed ``s``), ``n`` random valid cells (50, 100, 500; drawn
uniformly from the 15,625 table cells that have an input -> output path) are the training set,
their seed-averaged validation accuracy the target; the test set is up to ``--test`` other
random cells whose network (canonical key) is not in the training set. A predictor is fitted on
each encoding of the training cells and scored by Kendall's tau between its predictions and the
true accuracies of the test cells (0 where the predictions are constant: a GP that fitted
only noise; ``constant_splits`` counts them). Every encoding sees the same cells in a split (a
paired comparison: the table gives the mean difference to the yardstick with its standard error).

Predictors (fixed across encodings, so the comparison is about the encoding): ``rf``, a random
forest (scikit-learn, 100 trees, a third of the features per split, seed = split) and ``gp``, a
Gaussian process (constant x RBF + white noise, hyperparameters by marginal likelihood,
normalised targets).

Encodings: the yardstick ``onehot-raw`` (the raw genome's op per edge, as in the table key: the
plain adjacency encoding, isomorphic cells apart), and ``spaces.SpaceEmbedding`` kinds of the
canonical genome: ``onehot``, ``path`` (BANANAS), ``wl`` (Weisfeiler-Lehman, ``wlH`` = H
iterations) and joins. The default ``kind`` of ``SpaceEmbedding`` is the one with the best mean
tau over every dataset and size for the random forest (the grid run to the end first).

The JSON maps predictor -> dataset -> n -> encoding -> ``{"tau", "se", "diff", "diff_se",
"splits"}`` beside ``benchmark``, ``date``, ``machine``, ``settings``, ``load``, ``overall``
(mean tau per encoding over all cells of the table) and ``distinct`` (how many of the NB201
networks each encoding tells apart).

Command::

    python benchmarks/embedding.py [--quick] [--json PATH] [--splits N] [--predictors P ...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import kendalltau
from sklearn.ensemble import RandomForestRegressor
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from benchmarks._common import machine, now_iso
from search.simulated._nb201 import DATASETS, table
from spaces import NB201_OPS, CellFamily, CellGenome, Space, SpaceEmbedding

SIZES = (50, 100, 500)
YARDSTICK = "onehot-raw"
ENCODINGS = (
    YARDSTICK,
    "onehot",
    "path",
    "wl1",
    "wl2",
    "onehot+wl1",
    "path+wl1",
    "path+wl2",
)


def valid_cells() -> tuple[list[str], list[CellGenome]]:
    """Table keys and genomes of the cells with an input -> output path."""
    keys, genomes = [], []
    for key in table("cifar10").keys:
        try:
            genomes.append(CellGenome(nodes=4, edges=tuple(NB201_OPS[int(c)] for c in key)))
        except ValueError:
            continue
        keys.append(key)
    return keys, genomes


def encode(name: str, keys: list[str], genomes: list[CellGenome]) -> np.ndarray:
    if name == YARDSTICK:
        digits = np.array([[int(c) for c in key] for key in keys])
        return np.eye(len(NB201_OPS))[digits].reshape(len(keys), -1)
    embed = SpaceEmbedding(Space({"genome": CellFamily()}), kind=name)
    return np.array([embed.genome_vector(g) for g in genomes])


def predictor(name: str, seed: int) -> Any:
    if name == "rf":
        return RandomForestRegressor(n_estimators=100, max_features=1 / 3, random_state=seed)
    kernel = ConstantKernel(1.0) * RBF(length_scale=3.0) + WhiteKernel(0.1)
    return GaussianProcessRegressor(kernel=kernel, normalize_y=True, random_state=seed)


def split(
    seed: int, n: int, keys_canonical: list[str], n_test: int
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, n])
    order = rng.permutation(len(keys_canonical))
    train = order[:n]
    seen = {keys_canonical[i] for i in train}
    rest = [i for i in order[n:] if keys_canonical[i] not in seen]
    return train, np.array(rest[:n_test])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 splits, cifar10, rf, n = 50 and 100")
    p.add_argument("--json", help="write the figures to this JSON file")
    p.add_argument("--splits", type=int, help="random splits per cell of the table (default 20)")
    p.add_argument("--test", type=int, default=2000, help="held-out cells per split")
    p.add_argument("--predictors", nargs="+", choices=("rf", "gp"), help="default: rf gp")
    p.add_argument("--datasets", nargs="+", choices=DATASETS, help="default: all")
    p.add_argument("--encodings", nargs="+", choices=ENCODINGS, help="default: all")
    p.add_argument(
        "--summarise",
        metavar="JSON",
        help="recompute the summary (overall, best) of an existing, possibly partial, result file",
    )
    args = p.parse_args(argv)
    if args.summarise:
        doc = json.loads(Path(args.summarise).read_text())
        doc |= summarise(doc["results"], doc["distinct"])
        write(args.summarise, doc)
        return 0
    warnings.filterwarnings("ignore", category=ConvergenceWarning)  # GP noise at its bound
    splits = args.splits or (3 if args.quick else 20)
    predictors = args.predictors or (["rf"] if args.quick else ["rf", "gp"])
    datasets = args.datasets or (["cifar10"] if args.quick else list(DATASETS))
    sizes = (50, 100) if args.quick else SIZES
    encodings = args.encodings or list(ENCODINGS)
    if YARDSTICK not in encodings:
        encodings = [YARDSTICK, *encodings]
    load_before = os.getloadavg()
    started = time.perf_counter()

    keys, genomes = valid_cells()
    canonical = [g.key for g in genomes]
    features = {name: encode(name, keys, genomes) for name in encodings}
    distinct = {name: len({row.tobytes() for row in x}) for name, x in features.items()} | {
        "networks": len(set(canonical)),
        "cells": len(keys),
    }
    targets = {d: table(d).mean[[table(d).rows[k] for k in keys]] for d in datasets}

    def document(results: dict[str, Any], *, partial: bool) -> dict[str, Any]:
        return {
            "benchmark": "embedding",
            "date": now_iso(),
            "partial": partial,
            "machine": machine("numpy", "scikit-learn", "scipy", "optuna"),
            "load": {"before": load_before, "now": os.getloadavg()},
            "wall_s": round(time.perf_counter() - started, 1),
            "settings": {
                "splits": splits,
                "sizes": list(sizes),
                "test_cells": args.test,
                "predictors": predictors,
                "datasets": datasets,
                "target": "seed-averaged 200-epoch validation accuracy",
                "yardstick": YARDSTICK,
            },
            "distinct": distinct,
            "results": results,
        }

    results: dict[str, Any] = {}
    for pred in predictors:
        for dataset in datasets:
            for n in sizes:
                taus: dict[str, list[float]] = {name: [] for name in encodings}
                constant = dict.fromkeys(encodings, 0)
                for seed in range(splits):
                    train, test = split(seed, n, canonical, args.test)
                    y = targets[dataset]
                    for name in encodings:
                        x = features[name]
                        model = predictor(pred, seed).fit(x[train], y[train])
                        tau = float(kendalltau(model.predict(x[test]), y[test]).statistic)
                        # a constant prediction (a GP that fitted only noise) ranks nothing
                        constant[name] += math.isnan(tau)
                        taus[name].append(0.0 if math.isnan(tau) else tau)
                base = np.array(taus[YARDSTICK])
                cell: dict[str, Any] = {}
                for name, values in taus.items():
                    v = np.array(values)
                    d = v - base
                    cell[name] = {
                        "tau": float(v.mean()),
                        "se": float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else None,
                        "diff": float(d.mean()),
                        "diff_se": float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else None,
                        "splits": len(v),
                        "constant_splits": constant[name],
                    }
                results.setdefault(pred, {}).setdefault(dataset, {})[str(n)] = cell
                took = time.perf_counter() - started
                print(f"\n{pred} {dataset} n={n} ({splits} splits, {took:.0f} s)")
                print(f"  {'encoding':<18} {'tau':>14}  {'vs ' + YARDSTICK:>18}")
                for name, c in cell.items():
                    se = f"{c['se']:.3f}" if c["se"] is not None else "-"
                    dse = f"{c['diff_se']:.3f}" if c["diff_se"] is not None else "-"
                    print(f"  {name:<18} {c['tau']:.3f} +- {se}  {c['diff']:+.3f} +- {dse}")
                write(args.json, document(results, partial=True))

    summary = summarise(results, distinct)
    print(
        f"best: {summary['best']}   (wall {time.perf_counter() - started:.0f} s, "
        f"load {os.getloadavg()})"
    )
    write(args.json, document(results, partial=False) | summary)
    if args.json:
        print(f"wrote {args.json}")
    return 0


def summarise(results: dict[str, Any], distinct: dict[str, int]) -> dict[str, Any]:
    """Mean tau per encoding over each predictor's cells (datasets x sizes), printed; ``best``:
    the best encoding of the first predictor (the grid the run finishes first)."""
    overall: dict[str, dict[str, float]] = {}
    cells: dict[str, int] = {}
    for pred, by_dataset in results.items():
        taus: dict[str, list[float]] = {}
        for by_size in by_dataset.values():
            for cell in by_size.values():
                for name, c in cell.items():
                    taus.setdefault(name, []).append(c["tau"])
        overall[pred] = {name: float(np.mean(v)) for name, v in taus.items()}
        cells[pred] = len(next(iter(taus.values())))
        print(f"\n{pred}: mean tau over {cells[pred]} (dataset, size) cells")
        for name, tau in sorted(overall[pred].items(), key=lambda kv: -kv[1]):
            told = f"{distinct[name]} / {distinct['networks']}"
            print(f"  {name:<18} {tau:.3f}   distinct networks {told}")
    first = next(iter(overall))
    best = max(overall[first], key=overall[first].__getitem__)
    return {"overall": overall, "overall_cells": cells, "best": best, "best_by": first}


def write(path: str | None, document: dict[str, Any]) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(document, indent=1))


if __name__ == "__main__":
    raise SystemExit(main())
