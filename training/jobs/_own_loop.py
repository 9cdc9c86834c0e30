"""Running a user's own loop as a trial: import ``train`` on every rank, hand it a
:class:`training.Session`, and turn what it reported into the trial's result.

The trial spec carries ``own_loop = {"function": "package.module:train", "params": {...},
"sys_path": [...]}``; everything else (ranks, launcher, storage, pruner, checkpoints) is the
same as for a trial of the built-in trainer. An exception on any rank propagates, and the
program hosting the loop (training.jobs.worker, training.jobs.warm_worker) fails the trial with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

ENTRY_PREFIX = "mpi:"


def run_own_loop(spec: Any, config: Any, comm: Any,
                 open_session: Callable[..., Any]) -> dict[str, Any] | None:
    """Run ``spec.own_loop`` on ``comm``; rank 0 returns the result dict, others None.
    ``open_session``: the trial's session opener (training.jobs._trial), called once the loop's
    function is found and torch seeded."""
    import torch

    from training.launch import threads_here
    from training.plugins import resolve_train
    from training.session import describe_device

    own = spec.own_loop
    train = resolve_train(own["function"], own.get("sys_path"))
    torch.set_num_threads(threads_here(config.threads_per_rank))
    torch.manual_seed(config.seed)  # the same initial weights on every rank (wrap broadcasts)
    started = time.time()
    params = own.get("params") or {}
    session = open_session(spec, config, comm, params=params, objectives=list(spec.objectives),
                           identity={"objective": own["function"], "params": params})
    checkpointer = session.checkpointer
    segment = time.perf_counter()
    train(session)
    session.finish()  # waits for all ranks (bounded): did every rank make the same calls?
    if comm.rank != 0:
        return None
    state, reason = session.outcome()
    history = session.history
    values = {k: v for k, v in history[-1].items() if k != "epoch"} if history else {}
    start = session.start_epoch or 1
    seconds = time.perf_counter() - segment
    return {
        "state": state,
        "exit_reason": reason,
        "values": values,
        "epochs_run": max(0, session.last_epoch - start + 1) if session.reports else 0,
        "start_epoch": start,
        "history": history,
        "train_time_s": seconds,
        "first_step_time": started,
        "checkpoint": session.checkpoint,
        "checkpoint_s": checkpointer.seconds if checkpointer is not None else 0.0,
        "checkpoint_bytes": checkpointer.bytes if checkpointer is not None else 0,
        "algorithm": ",".join(o.name for o in session._optimizers) or "own loop",  # noqa: SLF001
        "device": describe_device(session.device),
    }
