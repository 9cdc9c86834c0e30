"""Running a user's own loop as a trial: import ``train`` on every rank, hand it a
:class:`training.Session`, and turn what it reported into the trial's result.

The trial spec carries ``own_loop = {"function": "package.module:train", "params": {...},
"sys_path": [...]}``; everything else (ranks, launcher, storage, pruner, checkpoints) is the
same as for a trial of the built-in trainer. An exception on any rank propagates, and the
program hosting the loop (training.worker, training.warm_worker) fails the trial with it.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import time
from collections.abc import Callable
from typing import Any

ENTRY_PREFIX = "mpi:"


def resolve_train(text: str, sys_path: list[str] | None = None) -> Callable[[Any], Any]:
    """The function named ``package.module:function`` (ValueError, one line, if it is not
    there or does not take one argument, the session)."""
    for path in reversed(sys_path or []):
        if path not in sys.path:
            sys.path.insert(0, path)
    module_name, sep, name = text.partition(":")
    if not sep or not module_name or not name:
        raise ValueError(f"{text!r} is not 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r}: {exc}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"module {module_name!r} has no function {name!r}")
    try:
        inspect.signature(fn).bind(object())
    except TypeError:
        raise ValueError(f"{text} must take one argument, the session: "
                         f"def {name}(session)") from None
    except ValueError:  # no signature (a builtin): let the call tell
        pass
    return fn  # type: ignore[no-any-return]


def run_own_loop(spec: Any, config: Any, comm: Any) -> dict[str, Any] | None:
    """Run ``spec.own_loop`` on ``comm``; rank 0 returns the result dict, others None."""
    import torch

    from training._session import describe_device
    from training.worker import open_session

    own = spec.own_loop
    train = resolve_train(own["function"], own.get("sys_path"))
    torch.set_num_threads(config.threads_per_rank)
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
