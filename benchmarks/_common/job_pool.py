"""Benchmark runs over a spawn process pool: at most ``workers`` in flight, each finished run
appended to a JSON-lines file as it ends, none submitted after a time budget."""

from __future__ import annotations

import functools
import json
import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any


def _init(initializer: Callable[[], None] | None) -> None:
    """A pool process ends with the benchmark that started it (SIGTERM when its parent dies,
    as the launcher's ranks do): a benchmark killed mid-run leaves no worker computing on."""
    from training.launch import die_with_parent

    die_with_parent()
    if initializer is not None:
        initializer()


def run_jobs(jobs: list[Any], run_job: Callable[[Any], dict[str, Any]], *, workers: int,
             initializer: Callable[[], None] | None, runs_path: Path | None,
             max_minutes: float | None, describe: Callable[[dict[str, Any]], str]
             ) -> list[dict[str, Any]]:
    """``run_job(job)`` for each job in order (``run_job`` picklable: spawn, no fork after
    Dask's threads); prints ``N/M describe(result)`` per finished run."""
    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    pending = list(reversed(jobs))
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx,
                             initializer=functools.partial(_init, initializer)) as pool:
        running: set[Any] = set()
        while pending or running:
            late = max_minutes is not None and time.perf_counter() - started > 60 * max_minutes
            while pending and len(running) < workers and not late:
                running.add(pool.submit(run_job, pending.pop()))
            if not running:
                break
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                r = future.result()
                results.append(r)
                if runs_path is not None:
                    with runs_path.open("a") as fh:
                        fh.write(json.dumps(r) + "\n")
                print(f"{len(results)}/{len(jobs)} {describe(r)}", flush=True)
        if pending:
            print(f"stopped after {max_minutes} min: {len(pending)} runs not started")
    return results
