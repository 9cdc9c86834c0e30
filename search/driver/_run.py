"""``search run`` and ``search validate``: check everything up front, then run the driver.

Everything that can be found wrong before a trial runs is checked before anything is written:
the study file, the storage (and whether the study there may go on with this file), the
dataset, the cluster and the launcher. ``validate`` stops there.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dask
import optuna
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from search._console import err, out, print_error
from search._errors import StudyError
from search.analysis._columns import format_seconds
from search.analysis._tables import best_table, objective_names
from search.clusters._watch import ClusterFailed, ClusterHandle
from search.driver._driver import Driver, RunCounts
from search.driver._open_cluster import check_cluster, open_cluster, with_overrides
from search.driver._study import (
    check_same_study,
    finished_configurations,
    open_study,
    recorded_strategy,
    recover_orphans,
)
from search.driver._warm_start import Source, load_sources
from search.storage._checkpoint_store import check_store
from search.storage._reading import default_storage, open_url, quiet_optuna
from search.studyfile._study_file import StudyFile, load_study_file
from training.contract import (
    PluginError,
    check_dataset_loads,
    check_own_loop,
    check_plugin_draws,
    check_plugins,
    check_storage_file,
    journal_path,
    redact,
    storage_file,
)


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM (``kill``, a batch system's time limit) or SIGHUP: stop as Ctrl-C does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.signal_name = signal.Signals(signum).name


def _interrupt(signum: int, _frame: Any) -> None:
    raise Interrupted(signum)


def on_signals() -> None:
    """Ctrl-C, ``kill`` and a closed terminal all end the run the same clean way."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _interrupt)


@dataclass
class Plan:
    """A checked ``search run``: what to run, where, and what the storage holds already."""

    sf: StudyFile
    url: str
    target: int
    concurrency: int
    cluster: Any  # the [cluster] table with the command line's overrides
    storage: optuna.storages.BaseStorage | None  # None: its file is created once the cluster is up
    existing: optuna.Study | None
    finished: int = 0
    notes: list[str] = field(default_factory=list)
    sources: list[Source] | None = None  # the warm start's earlier studies, read (never written)


def plan_run(study_file: Path, *, storage: str | None, trials: int | None,
             concurrency: int | None, **overrides: Any) -> Plan:
    """Every check that needs no cluster; StudyError for the first problem found."""
    quiet_optuna()
    sf = load_study_file(study_file)
    url = default_storage(storage, sf.storage)
    storage_obj = None if _new_storage_file(url) else open_url(url)
    existing = None if storage_obj is None else _existing_study(storage_obj, sf.name)
    # A study name that exists must go on with a study file that keeps its trials comparable.
    notes = [] if existing is None else check_same_study(existing, sf, redact(url))
    if existing is not None:  # another checkpoint store than the study's: refused now
        check_store(existing, sf)
    plan = Plan(sf, url, trials or sf.budget.trials, concurrency or sf.budget.concurrency,
                with_overrides(sf.cluster, **overrides), storage_obj, existing, notes=notes)
    plan.finished = 0 if existing is None else _finished_count(existing)
    if sf.strategy.warm_start:  # an unknown source or one with nothing in common: now
        plan.sources = load_sources(sf, storage=storage_obj, url=url)
    # A model, loss or metrics plug-in (or regression) is built and run once on real data; a
    # user dataset alone is only imported, as before: loading it may be slow or have effects.
    own = {k for k in sf.training.plugins if k != "training.dataset"}
    if sf.own_loop is not None:  # imported in a fresh Python with [launcher] env, not here
        try:
            check_own_loop(sf.own_loop, sf.launcher.env)
        except PluginError as exc:
            raise StudyError(exc.key, exc.message) from None
    # Pruning traces the model's graph: a model it cannot prune is refused here, not in trials.
    pruned = sf.training.prune is not None or any(k.startswith("prune_") for k in sf.space)
    if sf.objective is None and (own or pruned or sf.training.task != "classification"):
        check_trial_plugins(sf, plan.notes)  # a fresh Python with [launcher] env, any cluster
    elif sf.objective is None and plan.cluster.backend == "local":
        try:  # trials here load it here: find out now, not after five failed trials
            check_dataset_loads(sf.training.dataset, sf.launcher.env)
        except ValueError as exc:
            raise StudyError("training.dataset", str(exc)) from None
    return plan


def one_trial_config(sf: StudyFile) -> dict[str, Any]:
    """The training config of one trial this study could run (parameters drawn at random, seed
    0): what the plug-in check builds."""
    return trial_draws(sf, 1)[0][1]


def trial_draws(sf: StudyFile, n: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(the drawn parameters, the training config) of ``n`` trials drawn at random (seed 0, one
    stream; the same draw twice is checked once)."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    out: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for _ in range(n):
        params = sf.search_space.suggest(study.ask())
        shown = {k: v for k, v in params.items() if k != "genome"}
        if params.get("genome") is not None:
            shown["genome"] = params["genome"].summary()
        out.setdefault(repr(sorted(shown.items())), (shown, trial_config(sf, params).model_dump()))
    return list(out.values())


def trial_config(sf: StudyFile, params: dict[str, Any]) -> Any:
    """The TrainConfig of a trial with ``params`` (as the search space suggests them: a genome
    object under ``"genome"``)."""
    params = dict(params)
    genome = params.pop("genome", None)
    config = sf.training.with_params(params)
    if genome is not None:
        config = config.model_validate({**config.model_dump(), "genome": genome.to_dict()})
    return config


def check_trial_plugins(sf: StudyFile, notes: list[str] | None = None) -> None:
    """StudyError naming the key unless the study's plug-ins import, build and run once; what
    is likely wrong but allowed goes to ``notes`` (printed as ``note:`` lines). With
    ``[training] validate_draws = N`` they run on N draws of the space: draws that fail are
    named with their parameters, a note while some pass, the error when all fail."""
    draws = sf.training.validate_draws
    try:
        if draws == 1:
            check_plugins(one_trial_config(sf), sf.launcher.env, objectives=sf.objectives,
                          warnings=notes)
            return
        drawn = trial_draws(sf, draws)
        answers = check_plugin_draws([config for _, config in drawn], sf.launcher.env,
                                     objectives=sf.objectives)
    except PluginError as exc:
        raise StudyError(exc.key, exc.message) from None
    except ValueError as exc:  # a parameter the config refuses: what a trial would fail on
        raise StudyError("space", f"a sampled trial is invalid: {exc}") from None
    failed = [(params, a) for (params, _), a in zip(drawn, answers, strict=True) if "error" in a]
    if len(failed) == len(drawn):
        params, first = failed[0]
        raise StudyError(first["key"], f"{first['error']} (all {len(drawn)} distinct draws of "
                         f"{draws} failed; the first: {_shown(params)})")
    if notes is not None:
        notes.extend(dict.fromkeys(w for a in answers for w in a.get("warnings", [])))
        if failed:
            each = "; ".join(f"{_shown(p)} -> {a['key']}: {a['error']}" for p, a in failed)
            notes.append(f"{len(failed)} of {len(drawn)} distinct draws of the space failed the "
                         "plug-in check "
                         f"(their trials will fail; constrain [space] with when, or a "
                         f"narrower range): {each}")


def _shown(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()) or "no parameters"


def validate(plan: Plan) -> list[str]:
    """The cluster and launcher checks of ``search run``, without running anything: the lines
    to print."""
    sf = plan.sf
    check_cluster(plan.cluster, concurrency=plan.concurrency, max_ranks=sf.max_ranks,
                  launcher=sf.launcher.command, study_name=sf.name)
    where = redact(plan.url)
    study = (f"resumes study {sf.name!r} in {where} ({plan.finished} of {plan.target} trials "
             "finished)" if plan.existing is not None else
             f"creates study {sf.name!r} in {where}")
    warm = [f"note: warm start from {s.name} in {s.where}: {len(s.trials)} complete trials, "
            f"shared dimensions: {', '.join(s.common)}" for s in plan.sources or []]
    return [*(f"note: {n}" for n in plan.notes), *warm,
            f"ok: {sf.name}: {study}; {what_a_trial_is(sf)}; cluster {plan.cluster.backend}"]


@contextmanager
def _started(plan: Plan) -> Iterator[tuple[ClusterHandle, optuna.Study]]:
    """The cluster, then (only once it is up) the storage and the study."""
    sf = plan.sf
    with open_cluster(plan.cluster, concurrency=plan.concurrency, max_ranks=sf.max_ranks,
                      launcher=sf.launcher.command, study_name=sf.name) as cluster:
        study = open_study(sf, plan.storage or open_url(plan.url), url=plan.url,
                           sources=plan.sources)
        for number in recover_orphans(study, sf.budget.max_retries):
            reason = study.trials[number].user_attrs.get("exit_reason", "its driver died")
            out.print(f"trial {number} failed: {escape(str(reason))}", highlight=False)
        yield cluster, study


# A remote worker silent this long is gone (Dask's default: 5 minutes). Dask then asks its
# nanny to restart it and waits up to 30 s more (a frozen node's nanny is frozen too). Workers
# keep their nanny: a worker without one, sent SIGTERM by its batch system while a trial ran,
# hung in "closing" after its job was gone (issue 44).
WORKER_TTL = "15s"


def worker_ttl_setting() -> dict[str, str]:
    """How long the scheduler waits for a silent worker before it fails the worker's trial: a
    frozen or partitioned node keeps its TCP connections open, so only the heartbeat tells.
    Dask's own default (5 minutes) is kept from :data:`WORKER_TTL` only when the user set one
    (``DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL``, a Dask config file)."""
    current = dask.config.get("distributed.scheduler.worker-ttl", None)
    if current not in (None, "5 minutes"):  # the user's choice
        return {}
    return {"distributed.scheduler.worker-ttl": WORKER_TTL}


def run(plan: Plan, *, progress: bool) -> int:
    """Run the plan; the exit code."""
    sf = plan.sf
    # A worker that dies mid-trial fails that trial at once (the driver re-queues its parameters)
    # instead of Dask silently re-running it under the same trial number.
    dask.config.set({"distributed.scheduler.allowed-failures": 0})
    if plan.cluster.backend != "local":
        dask.config.set(worker_ttl_setting())
    if plan.existing is not None and plan.finished >= plan.target:
        out.print(f"study {sf.name} already holds {plan.finished} finished trials (budget "
                  f"{plan.target}); nothing to run. Raise budget.trials or pass --trials.")
        if _complete(plan.existing):
            out.print(best_table(plan.existing))
        return 0
    try:
        with _started(plan) as (cluster, study):
            for note in plan.notes:
                out.print(f"note: {escape(note)}", highlight=False)
            out.print(_header(plan), highlight=False)
            display = Display(study, plan.target, progress and out.is_terminal)
            driver = Driver(sf, study, cluster.client, storage_url=plan.url, on_event=display,
                            watch=cluster.check, single_node=plan.cluster.backend == "local")
            with display.progress:
                counts = driver.run(trials=plan.target, concurrency=plan.concurrency,
                                    timeout=sf.budget.timeout)
    except ClusterFailed as exc:
        print_error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt as exc:
        # The bar hides the cursor; a signal that lands while the bar starts or stops skips
        # rich's own clean-up, so show it here (nothing is written when not on a terminal).
        out.show_cursor(True)
        signum = getattr(exc, "signum", signal.SIGINT)
        err.print(f"interrupted ({signal.Signals(signum).name}): running trials marked failed "
                  "and their parameters re-queued; run again to resume")
        return 128 + signum
    if _complete(study):
        out.print(best_table(study))
    paused = (f" ({counts.paused} paused at a rung, {counts.promoted} promoted)"
              if counts.paused or counts.promoted else "")
    out.print(f"{counts.complete} complete, {counts.pruned} pruned{paused}, {counts.failed} "
              f"failed in this run; the study holds {counts.finished}/{plan.target} finished "
              "configurations." if paused else
              f"{counts.complete} complete, {counts.pruned} pruned, {counts.failed} failed in this "
              f"run; the study holds {counts.finished}/{plan.target} finished trials.")
    if counts.refused:
        out.print(f"{counts.refused} late results refused: their trials had been failed and "
                  "re-queued by another driver while this one was silent.")
    if counts.stopped_because:
        err.print(f"[red]{escape(counts.stopped_because)}[/]")
        return 1
    return 0


def _complete(study: optuna.Study) -> bool:
    return bool(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


def _new_storage_file(url: str) -> bool:
    """True when ``url`` names a journal or SQLite file that does not exist yet; StudyError (one
    line) when it names something that cannot hold the study: a directory, a FIFO, a file of
    another format, a directory that refuses files or whose filesystem does not answer."""
    path = storage_file(url)
    if path is None:
        return False
    try:
        exists = check_storage_file(path, "journal" if journal_path(url) else "sqlite")
    except ValueError as exc:
        # A journal's URL is its path (named in the message); an SQLite URL is named too.
        raise StudyError("storage", str(exc) if path == url else f"{redact(url)}: {exc}") \
            from None
    return not exists


def _existing_study(storage: optuna.storages.BaseStorage, name: str) -> optuna.Study | None:
    """Study ``name`` if the storage holds it (read-only), else None."""
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None


def _finished_count(study: optuna.Study) -> int:
    return finished_configurations(study)


def what_a_trial_is(sf: StudyFile) -> str:
    """What one trial runs, in the header's words: only what applies to the objective."""
    from search.backends._objectives import is_benchmark

    if is_benchmark(sf.objective):
        return f"table lookups of {sf.objective} (simulated training time)"
    if sf.own_loop is not None:
        return f"{sf.own_loop}(session) on {sf.max_ranks} MPI rank(s) each"
    if sf.objective is not None:
        return f"calls of {sf.objective} on Dask workers"
    ranks = f"{sf.training.ranks}-rank"
    if "ranks" in sf.space:
        ranks = f"{min(sf.rank_choices)}-{max(sf.rank_choices)}-rank (searched)"
    model = f"model {sf.training.model}, " if sf.training.model else ""
    return f"{ranks} MPI jobs ({model}{sf.training.dataset}, {sf.training.epochs} epochs)"


def _header(plan: Plan) -> str:
    sf, target, finished = plan.sf, plan.target, plan.finished
    unit = "configurations" if sf.pruner.promote else "trials"
    todo = (f"{target} {unit}" if not finished else
            f"{finished} of {target} {unit} finished, {target - finished} to run")
    pruner = f"pruner {sf.pruner.name}" + (" (pause and promote)" if sf.pruner.promote else "")
    if sf.pruner.name == "asha":  # its first rung may be the computed default: say where
        pruner += f", rungs at epochs {_rungs(sf.pruner, sf.training.epochs)}"
    if sf.checkpointing:
        every = (f"every {sf.checkpoints.every} epochs" if sf.checkpoints.every > 1 else
                 "every epoch" if sf.checkpoints.every == 1 else "on pauses")
        if sf.checkpoints.every_steps:
            every += f" and every {sf.checkpoints.every_steps} steps"
        pruner += f"; checkpoints {every}"
    return (f"study [bold]{escape(sf.name)}[/] in {escape(redact(plan.url))}: {todo}, "
            f"{plan.concurrency} at a time, {escape(what_a_trial_is(sf))}; {_strategy(plan)}, "
            f"{pruner}")


def _rungs(pruner: Any, epochs: int) -> str:
    """asha's rungs below the full training: ``3, 9`` (``none`` when the first is past it)."""
    from search.pruners._promotion import PromotingHalving  # the rule, also Optuna's rungs'

    halving = PromotingHalving(min_resource=pruner.first_rung(epochs),
                               reduction_factor=pruner.reduction_factor,
                               min_early_stopping_rate=pruner.min_early_stopping_rate)
    return ", ".join(map(str, halving.rung_epochs(0, epochs))) or "none"


def _strategy(plan: Plan) -> str:
    """The strategy's name; for ``auto``, what it runs: ``auto (predictor)``."""
    from search.strategies._registry import AUTO, resolve

    name = plan.sf.strategy.name
    if name != AUTO:
        return name
    recorded = None if plan.existing is None else recorded_strategy(plan.existing)
    return f"{AUTO} ({resolve(name, plan.sf.search_space, plan.sf.directions, recorded)})"


class Display:
    """Live progress bar (terminal) plus one line per finished trial (always). Laid out for 80
    columns: a fixed-width bar and short counters, so nothing is squeezed to nothing."""

    def __init__(self, study: optuna.Study, target: int, show_bar: bool) -> None:
        self.study = study
        self.names = objective_names(study)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=16),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            console=out,
            disable=not show_bar,
            transient=False,
        )
        name = study.study_name if len(study.study_name) <= 14 else study.study_name[:13] + "…"
        self.show_bar = show_bar
        self.best = self._best()  # read again when a trial completes: nothing else changes it
        self.task = self.progress.add_task(name, total=target, stats=self._stats(RunCounts()))

    def _best(self) -> str:
        if len(self.names) > 1:
            return ""
        try:
            return f"best {self.study.best_value:.4g}"
        except ValueError:
            return "best -"

    def __call__(self, kind: str, trial: Any, c: RunCounts, result: dict[str, Any] | None) -> None:
        if kind in ("complete", "pruned", "failed", "refused") and trial is not None \
                and result is not None:
            self.progress.console.print(_trial_line(kind, trial, result, self.names),
                                        highlight=False, soft_wrap=True)
        if not self.show_bar:  # the counters are only drawn on the bar
            return
        if kind == "complete":
            self.best = self._best()
        self.progress.update(self.task, completed=c.finished, stats=self._stats(c))

    def _stats(self, c: RunCounts) -> str:
        return f"run {c.running} ok {c.complete} pruned {c.pruned} fail {c.failed} {self.best}"


def _trial_line(kind: str, trial: Any, result: dict[str, Any], names: list[str]) -> str:
    what = {"complete": "[green]complete[/]", "pruned": "[yellow]pruned[/]",
            "failed": "[red]failed[/]", "refused": "[red]refused[/]"}[kind]
    if result.get("state") == "paused":
        what = "[yellow]paused[/]"
    values = result.get("values") or {}
    shown = " ".join(f"{m}={values[m]:.4g}" for m in names if m in values)
    params = " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in trial.params.items() if not k.startswith("genome."))
    summary = trial.user_attrs.get("genome_summary")
    if summary:
        params = f"{params} [{summary}]" if params else f"[{summary}]"
    extra = format_seconds(result.get("sim_time_s") or result.get("wall_time_s") or 0.0) + " s"
    if "epochs_run" in result:
        first = int(result.get("start_epoch") or 1)
        last = first + int(result["epochs_run"]) - 1
        epochs = f"{result['epochs_run']} ep" if first == 1 else f"ep {first}-{last}"
        extra = f"{epochs}, {extra}"
    parent = trial.user_attrs.get("detol:resume_of")
    if parent is not None:
        extra = f"resumed trial {parent}, {extra}"
    line = f"trial {trial.number:>3} {what} {escape(shown)} {escape(params)} ({extra})"
    if kind in ("failed", "refused"):
        reason = (str(result.get("exit_reason", "")).splitlines() or [""])[0][:300]
        line += f"\n    {escape(reason)}"
        if result.get("log_path"):
            line += f"\n    full log: {escape(str(result['log_path']))}"
    return line
