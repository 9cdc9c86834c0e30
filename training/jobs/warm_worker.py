"""The warm pool's MPI program: ``mpiexec -n RANKS python -m training.jobs.warm_worker SOCKET PID``.

Every rank imports torch, mpi4py, Optuna and the trainer once, then serves trial after trial:
rank 0 reads a trial message from the Dask worker's Unix socket, broadcasts it, every rank trains
it as ``training.jobs.worker`` does (same ``Trainer``, same reporter, same result dict), and rank 0
writes the result back on the socket. The Dask side is :mod:`training.launch._warm_pool`.

Isolation. The trial's collectives run on its own communicator (a ``Dup`` of the pool's, freed
after the trial). A Python exception is agreed on by all ranks with a polled ``Iallreduce`` on
the pool's communicator:

* during set-up (config, dataset: no collectives yet) every rank reaches the agreement, so an
  exception on any subset of ranks fails the trial with its text and the pool goes on;
* during training, a rank that raised waits ``GRACE_S`` for its peers. If they come (they raised
  too, or had finished), the trial fails with the text and the pool is retired, because that
  trial's requests or RMA window may still be pending; if they do not (stuck in a collective the
  failing rank will never join), the rank writes its error to the trial's error file and aborts
  the job, and the Dask side reports that text.

Idle ranks wait in a polled ``Ibcast`` with short sleeps, so an idle pool costs no CPU. Rank 0
watches the Dask worker's process: if it dies, rank 0 exits hard and MPI ends the whole job.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from training.jobs._peers import watch_node_peers
from training.jobs._regroup import Shelf, regroup
from training.jobs._stacks import cancel, stacks_before
from training.jobs._trial import WrongRankCount, train_spec
from training.launch._line import pid_alive

POLL_S = 0.002  # sleep between two Test() calls of a pending control collective
IDLE_POLL_S = 0.01  # the same while waiting for the next trial
GRACE_S = 5.0  # how long a rank that raised during training waits for its peers
PARENT_CHECK_S = 0.5
SHELF = Shelf()  # rank 0: the paused states of trials this pool served (in-place resize)


def _warm_up() -> None:
    """Pay the imports once: torch, torch.optim (imports torch._dynamo), Optuna, the trainer."""
    import torch

    import training.jobs._trainer  # noqa: F401 - the model, data and algorithm modules
    import training.session._reporting  # noqa: F401 - optuna, for rank 0's reporter

    w = torch.nn.Parameter(torch.zeros(2))
    for opt in (torch.optim.SGD([w], lr=0.1, momentum=0.9), torch.optim.Adam([w], lr=0.1)):
        w.grad = torch.ones(2)
        opt.step()


def _watch_parent(pid: int) -> None:
    """Rank 0: exit hard when the Dask worker process is gone; MPI then ends every rank."""
    while True:
        time.sleep(PARENT_CHECK_S)
        if not pid_alive(pid):
            os._exit(70)


def _poll(request: Any, deadline: float | None = None, sleep: float = POLL_S) -> bool:
    """Test ``request`` until it completes (True) or ``deadline`` passes (False)."""
    while not request.Test():
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(sleep)
    return True


def _share(ctrl: Any, payload: bytes) -> bytes:
    """Rank 0's ``payload`` on every rank. Empty means: shut down."""
    import numpy as np

    size = np.array([len(payload)], dtype=np.int64)
    _poll(ctrl.Ibcast(size, root=0), sleep=IDLE_POLL_S)  # idle ranks sleep here
    buf = bytearray(payload) if ctrl.rank == 0 else bytearray(int(size[0]))
    if buf:
        ctrl.Bcast(buf, root=0)  # waits for all ranks
    return bytes(buf)


def _error_text(exc: BaseException, rank: int) -> dict[str, str]:
    text = "".join(traceback.format_exception(exc))
    print(f"[rank {rank}] {text}", file=sys.stderr, flush=True)
    error = {"exit_reason": f"{type(exc).__name__}: {exc}"}
    if not isinstance(exc, WrongRankCount):  # its message says all; no traceback
        error["traceback"] = f"[rank {rank}] {text}"
    return error


def _agree(
    ctrl: Any, error: dict[str, str] | None, grace: float | None
) -> tuple[bool, list[dict[str, str]]]:
    """Every rank learns whether any rank failed; rank 0 also gets the errors, lowest rank first.

    A failing rank gives up after ``grace`` seconds (its peers are stuck in a collective of the
    trial) and aborts the job; ``None`` waits for ever.
    """
    import numpy as np
    from mpi4py import MPI

    flag = np.array([0 if error is None else 1], dtype=np.int64)
    total = np.zeros(1, dtype=np.int64)
    request = ctrl.Iallreduce(flag, total, op=MPI.SUM)
    deadline = None if grace is None or error is None else time.monotonic() + grace
    if not _poll(request, deadline):
        ctrl.Abort(1)  # only a new pool can go on; the error file says why
    if int(total[0]) == 0:
        return False, []
    errors = ctrl.gather(error, root=0)  # waits for all ranks
    return True, [e for e in (errors or []) if e is not None]


def _write_error(error_dir: str, rank: int, error: dict[str, str]) -> None:
    path = Path(error_dir) / f"rank{rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(error))
    os.replace(tmp, path)


def _failed(errors: list[dict[str, str]], **extra: Any) -> dict[str, Any]:
    first = errors[0]
    return {"state": "failed", **first, **extra}


def serve_one(ctrl: Any, message: dict[str, Any]) -> dict[str, Any] | None:
    """Run one trial on every rank; rank 0 returns the reply (``retire`` when the pool is spent)."""
    from training._spec import TrialSpec
    from training.data import load_train_data

    rank = ctrl.rank
    error_dir = message["error_dir"]
    error: dict[str, str] | None = None
    config = data = None
    spec = TrialSpec.from_json(message["spec"])
    try:  # set-up: no collectives, so every rank reaches the agreement below
        config = spec.config
        if spec.own_loop is None:  # an own loop reads its data itself
            data = load_train_data(config)  # a plug-in's module is imported once per pool
    except BaseException as exc:  # noqa: BLE001 - any error fails this trial only
        error = _error_text(exc, rank)
        _write_error(error_dir, rank, error)
    failed, errors = _agree(ctrl, error, grace=None)
    if failed:
        return _failed(errors) if rank == 0 else None

    # The trial's own communicator, its collectives never meeting the pool's: the pool's first
    # `ranks` ranks (training.jobs._regroup; all of them unless the pool is wider than the trial).
    # The ranks left out wait in the agreement below until the trial ends.
    comm = regroup(ctrl, config.ranks if config.ranks <= ctrl.size else ctrl.size)
    out: dict[str, Any] | None = None
    if comm is not None:
        try:
            out = train_spec(spec, config, comm, data, memory=SHELF)  # the cold path's code
        except BaseException as exc:  # noqa: BLE001
            error = _error_text(exc, rank)
            _write_error(error_dir, rank, error)
    failed, errors = _agree(ctrl, error, grace=GRACE_S)
    if failed:  # the trial's requests or window may be pending: no comm.Free, no next trial
        return _failed(errors, retire=True) if rank == 0 else None
    if comm is not None:
        comm.Free()  # waits for the trial's ranks
    return out


def _reset() -> None:
    """Between trials. Seeds and torch threads are set again by the next Trainer."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m training.jobs.warm_worker SOCKET PARENT_PID", file=sys.stderr)
        return 2
    from mpi4py import MPI

    faulthandler.register(signal.SIGUSR1)  # kill -USR1 RANK: its stack, in the pool's log
    ctrl = MPI.COMM_WORLD.Dup()  # the pool's control communicator
    ending = watch_node_peers(ctrl)  # a rank that dies ends the pool, whatever the launcher saw
    _warm_up()
    sock = None
    reader = None
    if ctrl.rank == 0:
        threading.Thread(target=_watch_parent, args=(int(args[1]),), daemon=True).start()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(args[0])
        reader = sock.makefile("rb")
    while True:
        line = reader.readline() if reader is not None else b""  # rank 0 blocks, idle
        payload = _share(ctrl, line.strip())
        if not payload:
            ending.set()  # the ranks end now, each in its own time
            break  # the Dask side closed the socket: shut down
        message = json.loads(payload)
        # A hung trial's log shows where each rank is, as a cold job's does.
        timer = stacks_before(message.get("deadline"), message["spec"].get("timeout_s"))
        try:
            reply = serve_one(ctrl, message)
        finally:
            cancel(timer)
        if sock is not None and reply is not None:
            sock.sendall(json.dumps(reply).encode() + b"\n")
        _reset()
    ctrl.Free()
    MPI.Finalize()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip tearing down torch's modules (seconds): the pool closes at once


if __name__ == "__main__":
    from training.jobs._mpi_start import start_mpi
    from training.launch import end_with_launcher

    end_with_launcher()  # no rank outlives its launcher (Hydra's proxy included)
    start_mpi()  # MPI_Init, through a PMI relay under SLURM's pmi2 (long PMI lines)
    raise SystemExit(main())
