"""A trial on record shards checkpoints within an epoch and resumes there exactly: the rest of
the epoch's sample stream is the one an uninterrupted run reads, on 1, 2 or 4 ranks, and a
trial whose rank count changes mid-epoch (2 -> 4 -> 1) trains on every sample once. Every run
is a real ``mpiexec`` of tests/mpi_jobs/_cursor_job.py that kills itself with SIGKILL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.mpi_helpers import HERE
from training.data._pack import pack
from training.launch import launcher_argv

pytestmark = pytest.mark.mpi

BATCH = 32


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    dest = tmp_path_factory.mktemp("shards") / "digits"
    index = pack("digits", dest, shard_mb=0.02)  # ~74 samples a shard: 18 shards
    return dest, index["splits"]["train"]["samples"]


def run(tmp: Path, tag: str, ranks: int, shards: Path, **spec: Any) -> dict[str, Any]:
    """One run; returns its traces: per rank a list of (epoch, rows) and the checkpoints
    (consumed) it marked; its checkpoint ids; whether it was killed."""
    store = tmp / "store"
    store.mkdir(exist_ok=True)
    full = {"shards": str(shards), "store": str(store), "trace": str(tmp / tag),
            "algorithm": "sync", "epochs": 1, "batch_size": BATCH, "every_steps": 5, **spec}
    (tmp / f"{tag}.json").write_text(json.dumps(full))
    argv = launcher_argv("mpiexec -n {ranks}", ranks) + [
        sys.executable, str(HERE / "_cursor_job.py"), str(tmp / f"{tag}.json")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    killed = spec.get("die_after") is not None
    assert (proc.returncode != 0) == killed, proc.stdout[-2000:] + proc.stderr[-2000:]
    ranks_rows = []
    for r in range(ranks):
        lines = (tmp / f"{tag}-{r}.txt").read_text().splitlines()
        ranks_rows.append(lines)
    ids_file = tmp / f"{tag}-ids.txt"
    ids = ids_file.read_text().split() if ids_file.exists() else []
    return {"lines": ranks_rows, "ids": ids, "store": store}


def cursor_of(result: dict[str, Any], artifact: str) -> int:
    data = torch.load(result["store"] / artifact, weights_only=True)
    return int(data["cursor"]["consumed"])


def before(lines: list[str], consumed: int | None) -> list[list[int]]:
    """A rank's batches up to its checkpoint mark at ``consumed`` (None: all of them)."""
    out = []
    for line in lines:
        if line.startswith("C "):
            if consumed is not None and int(line.split(":")[1]) == consumed:
                return out
            continue
        out.append([int(x) for x in line.split(":")[1].split(",") if x])
    assert consumed is None, f"no checkpoint mark at {consumed}"
    return out


def stream(per_rank: list[list[list[int]]]) -> list[tuple[int, ...]]:
    """The global batches (sync: the ranks' slices of each step together), each sorted."""
    steps = {len(r) for r in per_rank}
    assert len(steps) == 1, f"ranks took {sorted(len(r) for r in per_rank)} batches"
    return [tuple(sorted(sum((r[i] for r in per_rank), []))) for i in range(steps.pop())]


@pytest.fixture(scope="module")
def straight(shards: tuple[Path, int], tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("straight")
    r = run(tmp, "s", 2, shards[0], every_steps=0)
    return stream([before(lines, None) for lines in r["lines"]])


@pytest.fixture(scope="module")
def killed(shards: tuple[Path, int], tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("killed")
    return tmp, run(tmp, "k", 2, shards[0], die_after=17)  # checkpoints after 5, 10, 15


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_a_killed_trial_resumes_with_exactly_the_rest_of_the_epochs_stream(
        shards: tuple[Path, int], straight: Any, killed: Any, ranks: int) -> None:
    tmp, k = killed
    newest = k["ids"][-1]
    consumed = cursor_of(k, newest)
    assert consumed in (10 * BATCH, 15 * BATCH)
    done = stream([before(lines, consumed) for lines in k["lines"]])
    r = run(tmp, f"r{ranks}", ranks, shards[0], resume=newest)
    rest = stream([before(lines, None) for lines in r["lines"]])
    assert done + rest == straight  # the same global batches, in the same order
    assert len(straight) == -(-shards[1] // BATCH)


def test_two_to_four_to_one_ranks_within_an_epoch_trains_on_every_sample_once(
        shards: tuple[Path, int], killed: Any) -> None:
    tmp, a = killed
    first = a["ids"][0]
    c1 = cursor_of(a, first)
    assert c1 == 5 * BATCH
    b = run(tmp, "b4", 4, shards[0], resume=first, die_after=6)  # a checkpoint at 10 batches
    c2 = cursor_of(b, b["ids"][-1])
    assert c2 == 10 * BATCH
    c = run(tmp, "c1", 1, shards[0], resume=b["ids"][-1])
    used = [row for part in (
        stream([before(lines, c1) for lines in a["lines"]]),
        stream([before(lines, c2) for lines in b["lines"]]),  # equal batch counts per width
        stream([before(lines, None) for lines in c["lines"]])) for batch in part for row in batch]
    counts = Counter(used)
    assert sorted(counts) == list(range(shards[1])), "a sample was dropped"
    assert max(counts.values()) == 1, "a sample was read twice"


def test_asynchronous_ranks_resume_a_killed_epoch_at_another_width_with_every_sample_once(
        shards: tuple[Path, int], tmp_path: Path) -> None:
    # asgd claims batches (a fast rank takes more); a checkpoint within the epoch is taken when
    # every claim of its part of the stream is trained.
    # A part is 5 global batches = 10 claims of 16 rows; a rank that took 21 claims has waited
    # at the end of the first part's checkpoint for rank 0 to record it: one id at least.
    a = run(tmp_path, "a", 2, shards[0], algorithm="asgd", die_after=24)
    newest = a["ids"][-1]
    consumed = cursor_of(a, newest)
    b = run(tmp_path, "b", 4, shards[0], algorithm="asgd", resume=newest)
    used = [row for lines in a["lines"] for batch in before(lines, consumed) for row in batch]
    used += [row for lines in b["lines"] for batch in before(lines, None) for row in batch]
    counts = Counter(used)
    assert sorted(counts) == list(range(shards[1])) and max(counts.values()) == 1
