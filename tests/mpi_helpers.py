"""Run one of the MPI programs in tests/mpi_jobs/ on real ranks and read the JSON it writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from training.launch import launcher_argv

HERE = Path(__file__).resolve().parent / "mpi_jobs"


def run_mpi_job(program: str, out: Path, *, ranks: int = 2, timeout: int = 240) -> Any:
    """``mpiexec -n RANKS python tests/mpi_jobs/PROGRAM OUT``; fails the test with the job's
    output when it exits non-zero."""
    argv = launcher_argv("mpiexec -n {ranks}", ranks) + [sys.executable, str(HERE / program),
                                                          str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def expected_device() -> str:
    """The ``device`` a trial's rank 0 records on this machine: CUDA's first device when there
    is one (every rank of a job on a one-GPU machine shares it), else ``"cpu"``."""
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    return f"cuda:0 ({torch.cuda.get_device_name(0)})"
