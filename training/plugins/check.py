"""The up-front check of a study's plug-ins, in a fresh Python with the job's environment.

``search validate`` and ``search run`` call :func:`check_plugins` (or, for ``objective =
"mpi:package.module:train"``, :func:`check_own_loop`) before anything is written.
It runs ``python -m training.plugins.check`` (this module) with ``[launcher] env``, which:
finds our own packages where detol installed them (a user package named ``training`` earlier on
the path would shadow ours on the ranks), imports each plug-in, loads the dataset, builds the
model once with a trial's parameters, and runs one forward pass, the loss and the metrics on a
tiny batch of real training samples. Any failure comes back as one line naming the study-file key.

This module imports no torch at import time (the driver calls :func:`check_plugins`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from training.plugins._plugins import PluginError
from training.plugins._resolve import OURS, ours, resolve_train

_TINY = 2  # samples in the check's batch
_HOME = Path(__file__).resolve().parents[2]  # where detol's packages are
# Where the job's Python finds our package names (before importing ours: ``python -m
# training.jobs.worker`` on the ranks finds whatever comes first on their path), then the check.
_PROGRAM = """
import importlib.util, json, sys
found = {}
for top in json.loads(sys.argv[1]):
    spec = importlib.util.find_spec(top)
    places = [] if spec is None else list(spec.submodule_search_locations or [spec.origin])
    found[top] = places[0] if places else None
sys.path.insert(0, sys.argv[2])
from training.plugins.check import main
sys.exit(main(found))
"""


def check_plugins(
    config: dict[str, Any],
    env: dict[str, str] | None = None,
    *,
    objectives: list[str] | None = None,
    timeout_s: float = 300.0,
    warnings: list[str] | None = None,
) -> list[str]:
    """PluginError (``.key``, ``.message``) unless a trial of ``config`` (a TrainConfig dump with
    one trial's parameters) can build and run its plug-ins; else the ``val_`` metric names its
    trials report. ``objectives`` that no trial reports are an error too (key ``metric``).
    What is allowed but likely wrong (a summed loss) is appended to ``warnings``, one line each.
    """
    answer = _ask({"config": config, "objectives": objectives or []}, env, timeout_s, "training")
    if warnings is not None:
        warnings.extend(answer.get("warnings", []))
    return list(answer["metrics"])


def check_plugin_draws(
    configs: list[dict[str, Any]],
    env: dict[str, str] | None = None,
    *,
    objectives: list[str] | None = None,
    timeout_s: float = 300.0,
) -> list[dict[str, Any]]:
    """:func:`check_plugins` for several trials' configs in one fresh Python (the plug-ins
    imported once): for each, ``{"metrics", "warnings"}`` or ``{"key", "error"}``."""
    answer = _ask({"draws": configs, "objectives": objectives or []}, env,
                  timeout_s * max(1, len(configs)) ** 0.5, "training")
    return list(answer["draws"])


def check_own_loop(function: str, env: dict[str, str] | None = None, *,
                   timeout_s: float = 300.0) -> None:
    """PluginError (key ``objective``) unless ``function`` (``package.module:train`` of
    ``objective = "mpi:..."``) imports in a fresh Python with the job's environment ``env``,
    from the working directory as the ranks import it, and takes one argument (the session).
    The user's module is never imported in the calling process (the driver)."""
    _ask({"own_loop": function}, env, timeout_s, "objective")


def _ask(request: dict[str, Any], env: dict[str, str] | None, timeout_s: float,
         key: str) -> dict[str, Any]:
    """Runs the check of ``request`` in a fresh Python; its answer, or PluginError."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROGRAM, json.dumps(list(OURS)), str(_HOME)],
            input=json.dumps(request), env={**os.environ, **(env or {})}, capture_output=True,
            text=True, timeout=timeout_s, check=False, cwd=os.getcwd(),
        )
    except subprocess.TimeoutExpired:  # one line, not a traceback (subprocess.run killed it)
        raise PluginError(key, f"the plug-in check did not finish within {timeout_s:g} s "
                          "(a slow import or dataset load, or a machine too busy)") from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        err = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        why = err[-1].strip() if err else f"exit code {proc.returncode}"
        raise PluginError(key, f"the plug-in check could not run: {why}")
    answer: dict[str, Any] = json.loads(lines[-1])
    if "error" in answer:
        raise PluginError(answer["key"], answer["error"])
    return answer


def _shadowed(found: dict[str, str | None], key: str) -> PluginError | None:
    """A package of ours that the job's Python finds somewhere other than where detol is."""
    for top, where in found.items():
        if where is not None and Path(where).resolve() != _HOME / top:
            return PluginError(key, (
                f"a package named {top!r} at {where} shadows detol's own {top!r} "
                f"({_HOME / top}) on the ranks: rename your package"))
    return None


def _collision(config: Any) -> PluginError | None:
    """A plug-in module named inside one of our packages (before anything is imported)."""
    for key, name in config.plugins.items():
        problem = ours(name.partition(":")[0])
        if problem is not None:
            return PluginError(key, problem)
    return None


def _tiny_batch(dataset: Any, n: int = _TINY, start: int = 0) -> Any:
    from training.data._loaders import rows_batch

    rows = list(range(start, min(start + n, len(dataset))))
    try:
        return rows_batch(dataset, rows)
    except Exception as exc:  # noqa: BLE001
        raise PluginError("training.dataset", f"reading samples {rows} of the training set "
                          f"failed: {type(exc).__name__}: {exc}") from None


def _run_own_loop(function: str, found: dict[str, str | None]) -> list[str]:
    """Imports the own loop's module as a rank does (the working directory first)."""
    problem = _shadowed(found, "objective")
    if problem is not None:
        raise problem
    try:
        resolve_train(function, [os.getcwd()])
    except ValueError as exc:
        raise PluginError("objective", str(exc)) from None
    return []


def _run(request: dict[str, Any],
         found: dict[str, str | None]) -> tuple[list[str], list[str]]:
    if "own_loop" in request:
        return _run_own_loop(request["own_loop"], found), []
    import torch

    from training._config import TrainConfig
    from training.data import load_train_data
    from training.plugins._plugins import build_model, make_loss, make_metrics

    config = TrainConfig.model_validate(request["config"])
    problem = _shadowed(found, next(iter(config.plugins), "launcher.env")) or _collision(config)
    if problem is not None:
        raise problem
    for key, name in config.plugins.items():  # import each: its own error, its own key
        from training.plugins._plugins import resolve

        resolve(key, name)
    try:
        # read straight from a shards: pack: a check writes nothing, not even a cache copy
        data = load_train_data(config.model_copy(update={"data_cache": None}))
    except PluginError:
        raise
    except Exception as exc:  # noqa: BLE001
        func = config.dataset.partition(":")[2] or config.dataset
        raise PluginError("training.dataset", f"{func}() failed: {type(exc).__name__}: "
                          f"{exc}") from None
    torch.manual_seed(config.seed)
    try:
        model = build_model(config, data.info)
    except PluginError:
        raise
    except Exception as exc:  # noqa: BLE001
        key = "training.model" if config.model else "training"
        func = f"{config.model.partition(':')[2]}()" if config.model else "the built-in model"
        raise PluginError(key, f"{func} failed: {type(exc).__name__}: {exc}") from None
    from training.data._batches import BatchShape, prediction, rows, shape_of
    from training.jobs._optim import Schedule, make_optimizer
    from training.models import count_flops

    shape = BatchShape.of(config)
    inputs, y = shape.split(_tiny_batch(data.train))
    try:
        out = shape.forward(model, inputs)
    except Exception as exc:  # noqa: BLE001
        key = "training.model" if config.model else "training.dataset"
        shown = shape_of(inputs, per_sample=True)
        raise PluginError(key, f"the forward pass on {rows(y)} training samples of shape "
                          f"{shown} failed: {type(exc).__name__}: {exc}") from None
    pred = prediction(out)
    loss_key = "training.loss" if config.loss else "training.task"
    loss_fn = make_loss(config)
    try:
        loss = loss_fn(out, y)
    except PluginError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise PluginError(loss_key, f"the loss on the model's output {shape_of(pred)} and "
                          f"targets {shape_of(y)} failed: {type(exc).__name__}: "
                          f"{exc}") from None
    if not (isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.requires_grad):
        what = (f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor)
                else type(loss).__name__)
        raise PluginError(loss_key, f"the loss returned {what}, expected a scalar tensor "
                          "with a gradient (the batch's mean)")
    loss.backward()
    warnings = _summed_loss(loss_fn, shape, model, data.train, loss_key)
    if config.prune is not None:  # the trial's own construction: refused here, not in trials
        warnings += _prunable(config, model, inputs, shape)
    make_optimizer(config, model)  # the optimizer plug-in's own errors, up front
    schedule = Schedule(config)
    for epoch in range(1, config.epochs + 1):  # the schedule plug-in over the whole run
        schedule.factor(epoch, 0, 1)
    with torch.no_grad():
        try:
            names = sorted(make_metrics(config)(out, y))
        except PluginError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise PluginError("training.metrics", f"failed on the model's output: "
                              f"{type(exc).__name__}: {exc}") from None
    reported = ["val_loss", *(f"val_{n}" for n in names)]
    known = {*reported, "train_loss", "n_params", "train_time_s"}
    sample = shape.split(_tiny_batch(data.train, 1))[0]
    counted = count_flops(model, sample)
    if counted is not None:
        known.add("flops")
    for metric in request.get("objectives", []):
        if metric == "flops" and counted is None:
            raise PluginError("metric", "'flops' cannot be counted for this model (torch's "
                              "FlopCounterMode saw no matrix product or convolution in its "
                              "forward pass on a training sample): trials would not report it")
        if metric not in known:
            raise PluginError("metric", f"{metric!r} is not reported by these trials (they "
                              f"report {', '.join(sorted(known))})")
    return reported, warnings


def _summed_loss(loss: Any, shape: Any, model: Any, dataset: Any, key: str) -> list[str]:
    """A warning when the loss of 2 samples is the sum of theirs, not the mean (detol divides
    a batch's loss by its rows itself: a summed loss trains at batch-size times the lr)."""
    import torch

    if len(dataset) < 2:
        return []
    with torch.no_grad():
        model.eval()
        try:
            each = []
            for i in (0, 1):
                inputs, y = shape.split(_tiny_batch(dataset, 1, start=i))
                each.append(float(loss(shape.forward(model, inputs), y)))
            inputs, y = shape.split(_tiny_batch(dataset, 2))
            both = float(loss(shape.forward(model, inputs), y))
        finally:
            model.train()
    mean, total = (each[0] + each[1]) / 2, each[0] + each[1]
    if abs(total) > 0 and abs(both - total) <= 1e-4 * abs(total) < abs(total - mean):
        return [f"{key}: the loss of 2 samples is the sum of their losses ({both:.4g} = "
                f"{each[0]:.4g} + {each[1]:.4g}), not their mean: a trial divides each batch's "
                "loss by its samples itself, so use reduction='mean'"]
    return []


class _OneRank:
    """The communicator of the check's one process, as pruning sees it."""

    size, rank = 1, 0


def _prunable(config: Any, model: Any, inputs: Any, shape: Any) -> list[str]:
    """PluginError naming ``training.prune`` unless the model can be pruned as a trial
    would prune it (its dependency graph traced on the tiny batch); the groups left alone as
    a note."""
    from training.pruning import PruneError, UnitPruning

    try:
        pruning = UnitPruning(config.prune, model, _OneRank(), inputs, shape.forward,
                              allow_empty=config.genome is not None)
    except PruneError as exc:
        key, _, message = str(exc).partition(": ")
        raise PluginError(key, message) from None
    if pruning.graph is None:
        return ["training.prune: this draw's model has no layer whose outputs may be removed: "
                "its trials train dense"]
    graph = pruning.graph
    roots = [f"{graph.name.get(graph.root(g))} ({graph.width(g)})" for g in graph.groups]
    shown = ", ".join(roots[:4]) + (f" and {len(roots) - 4} more" if len(roots) > 4 else "")
    notes = [f"training.prune: cuts {len(roots)} group(s) of this model, by the layer each is "
             f"rooted at (units): {shown}"]
    alone = pruning.left_alone()
    if alone:
        notes.append(f"training.prune: {len(alone)} group(s) left alone, cutting them breaks "
                     f"the model: {', '.join(alone)}")
    return notes


def _answer(request: dict[str, Any], found: dict[str, str | None]) -> dict[str, Any]:
    """The check's answer to one request: its metrics and warnings, or the key and the error."""
    try:
        metrics, warnings = _run(request, found)
        return {"metrics": metrics, "warnings": warnings}
    except PluginError as exc:
        return {"key": exc.key, "error": exc.message}
    except Exception as exc:  # noqa: BLE001 - a check that breaks says so in one line
        return {"key": "training", "error": f"{type(exc).__name__}: {exc}"}


def main(found: dict[str, str | None]) -> int:
    request = json.loads(sys.stdin.read())
    if "draws" in request:  # several trials' configs: each its own answer
        answer: dict[str, Any] = {"draws": [
            _answer({"config": config, "objectives": request["objectives"]}, found)
            for config in request["draws"]]}
    else:
        answer = _answer(request, found)
    sys.stdout.flush()
    print(json.dumps(answer), flush=True)
    return 0
