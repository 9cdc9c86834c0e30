"""Record a learning-curve table (``search.simulated._curves``' format) from any study file.

The study's own space and training, the user's plug-ins included, trained the way ``search run``
trains them, because it *is* ``search run``: the recorder writes a copy of the study file with
a seeded random search, no pruner and ``--epochs`` epochs, runs it in chunks of ``--chunk``
trials (chunk ``k`` samples with seed ``--seed + k``), and after each chunk appends its trials
(every epoch's ``metric`` and measured seconds, from the trial's ``history``) to the table.
A recording stopped at any moment resumes with the chunk it was in (its journal is kept in
``--work`` until the chunk is in the table); a table recorded with other settings is refused.

    python benchmarks/record_curves.py STUDY.toml OUT.jsonl.gz --configs 500 --epochs 20

Then replay it: ``python benchmarks/anytime.py --table OUT.jsonl.gz`` (docs/anytime.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import optuna

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from search import load_study_file  # noqa: E402
from search.simulated._curves import append_chunk, load_table, read_lines, write_header  # noqa: E402
from training.contract import open_storage  # noqa: E402

SEARCH = str(Path(sys.executable).with_name("search"))  # the CLI installed beside this Python
# Sections of the study file the recording keeps; the others (pruner, resize, checkpoints,
# warm starts) change what is trained or when it stops.
KEPT = ("name", "metric", "direction", "objective", "training", "space", "launcher", "cluster")


def toml_value(value: Any) -> str:
    """One TOML value (strings, numbers, booleans, lists and inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: the same escapes
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items())
        return "{ " + items + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML: {value!r}")


def toml_text(data: dict[str, Any]) -> str:
    """A study file: top-level values, then one [table] per section (deeper tables inline)."""
    lines = [f"{json.dumps(k)} = {toml_value(v)}" for k, v in data.items()
             if not isinstance(v, dict)]
    for key, section in data.items():
        if isinstance(section, dict):
            lines += ["", f"[{json.dumps(key)}]"]
            lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in section.items()]
    return "\n".join(lines) + "\n"


def recording_study(source: dict[str, Any], *, chunk: int, trials: int, seed: int, epochs: int,
                    concurrency: int) -> dict[str, Any]:
    """The study file of chunk ``chunk``: the source's space and training, a seeded random
    search, no pruner, ``epochs`` epochs, ``trials`` trials."""
    data = {k: v for k, v in source.items() if k in KEPT}
    data["name"] = f"{source['name']}-curves-{chunk}"
    data["training"] = {**source.get("training", {}), "epochs": epochs}
    data["budget"] = {"trials": trials, "concurrency": concurrency,
                      "max_failures": trials + 1,  # a run that diverges is a row too
                      **{k: v for k, v in source.get("budget", {}).items()
                         if k == "trial_timeout"}}
    data["strategy"] = {"name": "random", "seed": seed}
    data["pruner"] = {"name": "none"}  # (a study file without [pruner] gets median pruning)
    if data.get("objective") is None:  # a warm pool unless the study says otherwise
        data["launcher"] = {"warm": True, **source.get("launcher", {})}
    return data


def trial_rows(storage: str, study_name: str, metric: str) -> tuple[list[dict[str, Any]],
                                                                    dict[str, Any]]:
    """The chunk's finished trials as table rows, and the union of their distributions."""
    study = optuna.load_study(study_name=study_name, storage=open_storage(storage))
    rows, distributions = [], {}
    for t in sorted(study.trials, key=lambda t: t.number):
        if not t.state.is_finished() or "parameters re-queued" in str(
                t.user_attrs.get("exit_reason", "")):
            continue  # (a trial cut off by a stopped recording: its retry is the row)
        history = t.user_attrs.get("history") or []
        curve = [float(row[metric]) for row in history if metric in row]
        clock = [float(row["train_time_s"]) for row in history if metric in row]
        epoch_s = [b - a for a, b in zip([0.0, *clock], clock, strict=False)]
        rows.append({"trial": t.number, "params": t.params, "state": t.state.name.lower(),
                     "curve": curve, "epoch_s": epoch_s,
                     "start_s": t.user_attrs.get("launch_overhead_s"),
                     # a warm pool started for this trial: its start is the pool's, once
                     "cold": bool((t.user_attrs.get("pool") or {}).get("fresh", True)),
                     "exit_reason": t.user_attrs.get("exit_reason", "")})
        distributions.update({k: optuna.distributions.distribution_to_json(d)
                              for k, d in t.distributions.items()})
    return rows, distributions


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def record(args: argparse.Namespace) -> int:
    source_text = Path(args.study).read_text()
    source = tomllib.loads(source_text)
    sf = load_study_file(args.study)  # a study file that search run would refuse, refused here
    if len(sf.objectives) != 1:
        print(f"{args.study}: a table records one metric; the study has {sf.objectives}",
              file=sys.stderr)
        return 2
    metric, direction = sf.objectives[0], sf.directions[0]
    out = str(args.out)
    if os.path.exists(out):
        head = read_lines(out)[0]
        theirs = (head["name"], head["metric"], head["epochs"], head["study"])
        if theirs != (source["name"], metric, args.epochs, source_text):
            print(f"{out}: recorded with another study file or --epochs ({head['name']}, "
                  f"{head['epochs']} epochs); choose another output", file=sys.stderr)
            return 2
    else:
        write_header(out, name=source["name"], metric=metric, direction=direction,
                     epochs=args.epochs, study=source_text)
    work = Path(args.work or f"{out}.work")
    work.mkdir(parents=True, exist_ok=True)
    import torch

    recorded = 0
    while not args.chunks or recorded < args.chunks:
        table = load_table.__wrapped__(out)
        done = {c["chunk"] for c in table.chunks}
        if table.configs >= args.configs:
            break
        chunk = max(done, default=-1) + 1
        trials = min(args.chunk, args.configs - table.configs)
        data = recording_study(source, chunk=chunk, trials=trials, seed=args.seed + chunk,
                               epochs=args.epochs, concurrency=args.concurrency)
        study_path = work / f"chunk-{chunk}.toml"
        study_path.write_text(toml_text(data))
        journal = str(work / f"chunk-{chunk}.journal")
        load_before = os.getloadavg()[0]
        started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        t0 = time.monotonic()
        print(f"chunk {chunk}: {trials} trials ({table.configs} of {args.configs} recorded)",
              flush=True)
        proc = subprocess.run([SEARCH, "run", str(study_path),
                               "--storage", journal, "--no-progress"],
                              capture_output=not args.verbose, text=True)
        if proc.returncode != 0:
            print(f"chunk {chunk}: search run failed (exit {proc.returncode}); its journal is "
                  f"kept in {work}\n{(proc.stderr or '')[-3000:]}", file=sys.stderr)
            return 1
        rows, distributions = trial_rows(journal, data["name"], metric)
        append_chunk(out, {
            "chunk": chunk, "seed": args.seed + chunk, "trials": len(rows), "started": started,
            "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "wall_s": round(time.monotonic() - t0, 1),
            "load_average": [load_before, os.getloadavg()[0]], "cpus": os.cpu_count(),
            "command": " ".join(sys.argv), "detol": _commit(), "torch": torch.__version__,
            "distributions": distributions}, rows)
        for path in work.glob(f"chunk-{chunk}.*"):
            path.unlink()
        print(f"chunk {chunk}: {len(rows)} trials in {time.monotonic() - t0:.0f} s", flush=True)
        recorded += 1
    if not any(work.iterdir()):
        shutil.rmtree(work)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("study", help="the study file whose space and training are recorded")
    p.add_argument("out", help="the table (.jsonl.gz); an existing one is continued")
    p.add_argument("--configs", type=int, default=500, help="configurations in all (500)")
    p.add_argument("--epochs", type=int, default=20, help="epochs of every configuration (20)")
    p.add_argument("--chunk", type=int, default=50, help="trials per recording session (50)")
    p.add_argument("--chunks", type=int, default=0, help="stop after this many chunks (0: all)")
    p.add_argument("--seed", type=int, default=0, help="chunk k samples with seed + k")
    p.add_argument("--concurrency", type=int, default=1, help="trials at once (1)")
    p.add_argument("--work", help="where a chunk's study file and journal live (OUT.work)")
    p.add_argument("--verbose", action="store_true", help="show search run's output")
    return record(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
