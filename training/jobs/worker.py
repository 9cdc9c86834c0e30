"""The MPI program of one trial: ``mpiexec -n RANKS python -m training.jobs.worker SPEC.json``.

Every rank trains its slice of each batch; rank 0 reports to Optuna and writes the result file.
An exception on any rank aborts the whole job, so no rank is left waiting.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

from training.jobs._peers import watch_node_peers
from training.jobs._stacks import cancel, stacks_before


def _write_json(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def run(spec_data: dict[str, Any]) -> int:
    from mpi4py import MPI

    from training._spec import TrialSpec, started_marker
    from training.jobs._trial import WrongRankCount, train_spec

    comm = MPI.COMM_WORLD
    spec = TrialSpec.from_json(spec_data)
    ending = watch_node_peers(comm)  # a rank that dies ends the job, whatever the launcher saw
    if spec.result_path:
        comm.Barrier()  # every rank is through MPI_Init: from here on a failure is the trial's
        if comm.rank == 0:
            with open(started_marker(spec.result_path), "w"):
                pass
    try:
        config = spec.config
        out = train_spec(spec, config, comm)
        ending.set()  # the ranks end now, each in its own time
        if out is not None and spec.result_path:
            _write_json(spec.result_path, out)
        return 0
    except KeyboardInterrupt:
        # Not this rank's error: the launcher interrupts the other ranks when one fails
        # (MPICH's gforker sends SIGINT), and the failing rank's own words are the trial's.
        return 130
    except BaseException as exc:  # noqa: BLE001 - any error on any rank ends the whole job
        text = "".join(traceback.format_exception(exc))
        print(f"[rank {comm.rank}] {text}", file=sys.stderr, flush=True)
        if comm.rank == 0 and spec.result_path:
            failed: dict[str, Any] = {
                "state": "failed",
                "exit_reason": f"{type(exc).__name__}: {exc}",
            }
            if not isinstance(exc, WrongRankCount):  # its message says all; no traceback
                failed["traceback"] = text[-4000:]
            _write_json(spec.result_path, failed)
        if spec.result_path:  # the job's output may be cut by Abort: each rank's own words
            _write_json(f"{spec.result_path}.rank{comm.rank}", {
                "error": f"[rank {comm.rank}] {type(exc).__name__}: {exc}",
                "traceback": f"[rank {comm.rank}] {text}"[-8000:],
            })
        comm.Abort(1)  # no rank hangs in a collective waiting for this one
        return 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m training.jobs.worker SPEC.json", file=sys.stderr)
        return 2
    with open(args[0]) as f:
        spec_data = json.load(f)
    deadline = spec_data.pop("deadline", None)  # the launcher's clock, which started first
    timeout_s = spec_data.get("timeout_s")
    # A hung rank says where it hangs, in the log, before the launcher kills it.
    timer = stacks_before(deadline, timeout_s)
    try:
        return run(spec_data)
    finally:
        cancel(timer)


def _exit_now(code: int) -> None:
    """Finalize MPI and leave without Python's teardown: unloading torch takes seconds per rank,
    and the result is already written (the trial is told as soon as the job ends)."""
    from mpi4py import MPI

    sys.stdout.flush()
    sys.stderr.flush()
    if MPI.Is_initialized() and not MPI.Is_finalized():
        MPI.Finalize()
    os._exit(code)


if __name__ == "__main__":
    from training.jobs._mpi_start import start_mpi
    from training.launch import end_with_launcher

    end_with_launcher()  # no rank outlives its launcher (Hydra's proxy included)
    start_mpi()  # MPI_Init, through a PMI relay under SLURM's pmi2 (long PMI lines)
    _exit_now(main())
