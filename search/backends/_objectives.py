"""Objectives that are not MPI training: a Python function of the parameters, run on a Dask
worker, or a benchmark table that answers instead of training.

``objective = "package.module:function"`` names a plain function. It gets the suggested
parameters as a dict (a genome as its :class:`spaces.Genome` object) and returns the metric: a
number (one objective), a sequence in ``metric`` order, or a dict ``{metric: value}``. If it
takes a ``report`` argument, it gets ``report(step, value)``, which records an intermediate
value (several objectives: a sequence in ``metric`` order or a dict, like the return value) and
raises :class:`Pruned` when the study's pruner stops the trial::

    def objective(params, report):
        for epoch in range(10):
            loss = ...
            report(epoch, loss)
        return loss

``objective = "mpi:package.module:train"`` runs ``train(session)``, a training loop of the
user's own, on ``[training] ranks`` MPI ranks like a trial of the built-in trainer (see
:class:`training.Session` and docs/own-loop.md).

``objective = "nb201:cifar10"`` looks the cell up in the NAS-Bench-201 table (one random
seed's value, as a noisy training run would give) and advances a simulated clock by the
table's training time (see :mod:`search.simulated._nb201`). ``objective = "simulated:sweep"`` is a
synthetic workload on the same clock: heavy-tailed durations, failures, lost workers,
stragglers and a learning curve per epoch (see :mod:`search.simulated._workload`).
``objective = "flat:kc1"`` looks a flat configuration up in an HPOLib or HPOBench-nn table (see
:mod:`search.simulated._flat`). ``objective = "curves:PATH"`` replays the recorded run of the
nearest configuration of a learning-curve table, epoch by epoch (see
:mod:`search.simulated._curves`, docs/anytime.md).
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from training.contract import check_name, import_function

# Built-in benchmark objectives: prefix -> (module, the names after the colon it accepts).
BENCHMARKS: dict[str, str] = {
    "nb201": "search.simulated._nb201",
    "simulated": "search.simulated._workload",
    "flat": "search.simulated._flat",
    "curves": "search.simulated._curves",
}
OWN_LOOP = "mpi"  # objective = "mpi:package.module:train": train(session) on MPI ranks


class Pruned(Exception):  # noqa: N818 - reads as the outcome, like optuna.TrialPruned
    """Raised by ``report`` when the pruner stops the trial; let it propagate."""


def check_objective(text: str) -> None:
    """Raise ValueError (one line) unless ``text`` names a benchmark or an importable function."""
    prefix, sep, rest = text.partition(":")
    if prefix == OWN_LOOP:  # mpi:package.module:train, a loop of the user's own on MPI ranks
        check_own_loop(rest)
        return
    if not sep or not rest:
        raise ValueError(
            f"{text!r} is neither 'package.module:function' nor a benchmark like 'nb201:cifar10'"
        )
    if prefix in BENCHMARKS:
        module = importlib.import_module(BENCHMARKS[prefix])
        if hasattr(module, "check_name"):  # a name with options (simulated:sweep,fail=0.1)
            module.check_name(rest)
            return
        datasets = module.DATASETS
        if rest not in datasets:
            raise ValueError(f"unknown {prefix} dataset {rest!r} (known: {list(datasets)})")
        return
    resolve(text)


def check_own_loop(text: str) -> None:
    """ValueError (one line) unless ``text`` reads ``package.module:function``. Whether it
    imports is checked in a fresh Python with [launcher] env, as the other plug-ins are
    (``training.contract.check_own_loop``, from ``search run`` and ``search validate``): the
    driver never imports the user's loop."""
    try:
        check_name(text)
    except ValueError:
        raise ValueError(f"'mpi:{text}' is not 'mpi:package.module:function' (a loop of your "
                         "own: def function(session))") from None


def own_loop(text: str | None) -> str | None:
    """``"package.module:train"`` of ``objective = "mpi:package.module:train"``, else None."""
    if text is None:
        return None
    prefix, _, rest = text.partition(":")
    return rest if prefix == OWN_LOOP else None


def resolve(text: str) -> Callable[..., Any]:
    """The function named ``package.module:function``; ValueError (one line) if it is not there.
    As ``python -m`` would, modules beside the user (the working directory) come first."""
    return import_function(text, sys_path=[os.getcwd()])


def benchmark_space_check(text: str) -> Callable[[Any], None]:
    """The benchmark's check of the searched genome family (ValueError "space.genome...: ...")."""
    return importlib.import_module(BENCHMARKS[text.partition(":")[0]]).check_family  # type: ignore[no-any-return]


def benchmark_recorded_study(text: str) -> str | None:
    """The study file a benchmark table was recorded from (``curves:PATH``), else None."""
    module = importlib.import_module(BENCHMARKS[text.partition(":")[0]])
    recorded = getattr(module, "recorded_study", None)
    return None if recorded is None else recorded(text.partition(":")[2])


def is_benchmark(text: str | None) -> bool:
    return text is not None and text.partition(":")[0] in BENCHMARKS


def _values(
    raw: Any, objectives: Sequence[str], who: str = "the objective returned"
) -> dict[str, float]:
    if isinstance(raw, Mapping):
        missing = [m for m in objectives if m not in raw]
        if missing:
            raise ValueError(f"{who} {sorted(raw)} but not {missing}")
        return {m: float(raw[m]) for m in objectives}
    if isinstance(raw, Sequence) and not isinstance(raw, str):
        if len(raw) != len(objectives):
            raise ValueError(f"{who} {len(raw)} values for {list(objectives)}")
        return {m: float(v) for m, v in zip(objectives, raw, strict=True)}
    if len(objectives) != 1:
        raise ValueError(f"{who} one number for {list(objectives)}")
    return {objectives[0]: float(raw)}


def _reporter(task: Mapping[str, Any]) -> Callable[[int, Any], None]:
    from training.contract import CONTINUE, OptunaReporter

    reporter = None

    def report(step: int, value: Any) -> None:
        nonlocal reporter
        if not task.get("report") or not task.get("storage_url"):
            return
        row = _values(value, task["objectives"], who=f"report({step}, value) got")
        if reporter is None:
            reporter = OptunaReporter(
                study_name=task["study_name"],
                storage_url=task["storage_url"],
                trial_id=task["trial_id"],
                pruner=task.get("pruner"),
                objectives=list(task["objectives"]),
            )
        if reporter.decide(int(step), row) != CONTINUE:
            raise Pruned(f"pruned after step {step}")

    return report


def run_function_trial(task: dict[str, Any]) -> dict[str, Any]:
    """Dask task for one function trial. Returns the same result dict as an MPI trial; never
    raises for the objective's own errors (they become a failed trial with the reason)."""
    started = time.time()
    for path in reversed(task.get("sys_path") or []):
        if path not in sys.path:
            sys.path.insert(0, path)
    objective: str = task["objective"]
    params = dict(task["params"])
    result: dict[str, Any]
    try:
        prefix, _, rest = objective.partition(":")
        if prefix in BENCHMARKS:
            module = importlib.import_module(BENCHMARKS[prefix])
            extra = ({"trial_params": task["trial_params"]} if "trial_params" in task and
                     "trial_params" in inspect.signature(module.evaluate).parameters else {})
            answer = module.evaluate(params, dataset=rest, noise_seed=task["noise_seed"],
                                     **extra)
            result = {"state": "complete", **answer}
        else:
            fn = resolve(objective)
            kwargs = {}
            if "report" in inspect.signature(fn).parameters:
                kwargs["report"] = _reporter(task)
            raw = fn(params, **kwargs)
            result = {"state": "complete", "values": _values(raw, task["objectives"])}
        bad = {m: v for m, v in result["values"].items() if not math.isfinite(v)}
        if bad:
            result = {"state": "failed", "exit_reason": f"non-finite value {bad}"}
        else:
            result["exit_reason"] = "completed"
    except Pruned as exc:
        result = {"state": "pruned", "exit_reason": str(exc)}
    except Exception as exc:  # the objective's own error fails this trial, not the study
        where = traceback.extract_tb(exc.__traceback__)[-1]
        # A benchmark trial that raised partway: its simulated time and curve until then.
        partial = getattr(exc, "partial", None) if is_benchmark(objective) else None
        result = {
            "state": "failed",
            "exit_reason": f"{type(exc).__name__}: {exc} ({where.filename}:{where.lineno})",
            **(partial or {}),
        }
    result["wall_time_s"] = time.time() - started
    return result
