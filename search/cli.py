"""The ``search`` command: run a study file, and read a study's state from storage.

    search run studies/quickstart.toml
    search status quickstart
    search best quickstart -n 10
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Annotated, Any

import optuna
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from search._driver import Driver, RunCounts
from search._errors import StudyError
from search._study import open_study, recover_orphans
from search._study_file import load_study_file
from search._tables import best_table, objective_names, status_table
from training.launch import DEFAULT_STORAGE, open_storage, redact

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="Hyperparameter and topology search: every trial is an MPI job, scheduled by Dask, "
    "stored in Optuna.",
)
# Logs and CI capture output: give tables room instead of cutting every column to a stub.
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

StorageOpt = Annotated[
    str | None,
    typer.Option("--storage", help=f"Optuna storage URL or journal file [default: study file's, "
                 f"else {DEFAULT_STORAGE}]"),
]


def _fail(exc: StudyError) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def _open(url: str) -> optuna.storages.BaseStorage:
    try:
        return open_storage(url)
    except ValueError as exc:
        raise StudyError("storage", str(exc)) from None


class _Display:
    """Live progress bar (terminal) plus one line per finished trial (always)."""

    def __init__(self, study: optuna.Study, counts_target: int, show_bar: bool) -> None:
        self.study = study
        self.names = objective_names(study)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            console=out,
            disable=not show_bar,
            transient=False,
        )
        self.task = self.progress.add_task(study.study_name, total=counts_target, stats="")

    def _best(self) -> str:
        if len(self.names) > 1:
            return ""
        try:
            return f"best {self.names[0]}={self.study.best_value:.4g}"
        except ValueError:
            return "best -"

    def __call__(self, kind: str, trial: Any, c: RunCounts, result: dict[str, Any] | None) -> None:
        if kind in ("complete", "pruned", "failed") and trial is not None and result is not None:
            what = {"complete": "[green]complete[/]", "pruned": "[yellow]pruned[/]",
                    "failed": "[red]failed[/]"}[kind]
            values = result.get("values") or {}
            shown = " ".join(f"{m}={values[m]:.4g}" for m in self.names if m in values)
            params = " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                              for k, v in trial.params.items() if not k.startswith("genome."))
            summary = trial.user_attrs.get("genome_summary")
            if summary:
                params = f"{params} [{summary}]" if params else f"[{summary}]"
            extra = f"{result.get('epochs_run', 0)} ep, {result.get('wall_time_s', 0):.1f} s"
            line = f"trial {trial.number:>3} {what} {escape(shown)} {escape(params)} ({extra})"
            if kind == "failed":
                reason = (str(result.get("exit_reason", "")).splitlines() or [""])[0][:300]
                line += f"\n    {escape(reason)}"
            self.progress.console.print(line, highlight=False, soft_wrap=True)
        stats = (f"running {c.running}  complete {c.complete}  pruned {c.pruned}  "
                 f"failed {c.failed}  {self._best()}")
        self.progress.update(self.task, completed=c.finished, stats=stats)


@app.command()
def run(
    study_file: Annotated[Path, typer.Argument(help="TOML study file")],
    storage: StorageOpt = None,
    scheduler: Annotated[str | None, typer.Option(help="address of an existing Dask scheduler")] = None,
    trials: Annotated[int | None, typer.Option(min=1, help="override budget.trials (total)")] = None,
    concurrency: Annotated[int | None, typer.Option(min=1, help="override budget.concurrency")] = None,
    progress: Annotated[bool, typer.Option(help="live progress bar on a terminal")] = True,
) -> None:
    """Run (or resume) the study in STUDY_FILE until it holds budget.trials finished trials."""
    from search._cluster import open_client

    try:
        sf = load_study_file(study_file)
        url = storage or sf.storage or DEFAULT_STORAGE
        target = trials or sf.budget.trials
        n_parallel = concurrency or sf.budget.concurrency
        storage_obj = _open(url)
        finished = _finished_trials(storage_obj, sf.name)
        if finished >= target:
            out.print(f"study {sf.name} already holds {finished} finished trials (budget "
                      f"{target}); nothing to run. Raise budget.trials or pass --trials.")
            s = optuna.load_study(study_name=sf.name, storage=storage_obj)
            if best_trials_exist(s):
                out.print(best_table(s))
            return
        # Check the cluster (and launcher) before anything is written to the storage.
        with open_client(
            address=scheduler or sf.cluster.address,
            concurrency=n_parallel,
            max_ranks=sf.max_ranks,
            launcher=sf.launcher.command,
            workers=sf.cluster.workers,
            slots_per_worker=sf.cluster.slots_per_worker,
            connect_timeout=sf.cluster.connect_timeout,
        ) as client:
            study = open_study(sf, storage_obj)
            for number in recover_orphans(study):
                out.print(f"trial {number}: its driver died; marked failed, parameters re-queued")
            out.print(f"study [bold]{sf.name}[/] in {escape(redact(url))}: {target} trials, "
                      f"{n_parallel} at a time, {sf.training.ranks} ranks each "
                      f"({sf.strategy.name}, pruner {sf.pruner.name})", highlight=False)
            display = _Display(study, target, progress and out.is_terminal)
            driver = Driver(sf, study, client, storage_url=url, on_event=display)
            with display.progress:
                counts = driver.run(trials=target, concurrency=n_parallel,
                                    timeout=sf.budget.timeout)
    except StudyError as exc:
        raise _fail(exc) from None
    except KeyboardInterrupt:
        err.print("interrupted: running trials marked failed; run again to resume")
        raise typer.Exit(130) from None
    if best_trials_exist(study):
        out.print(best_table(study))
    out.print(f"{counts.complete} complete, {counts.pruned} pruned, {counts.failed} failed in this "
              f"run; the study holds {counts.finished}/{target} finished trials.")
    if counts.stopped_because:
        err.print(f"[red]{escape(counts.stopped_because)}[/]")
        raise typer.Exit(1)


def _finished_trials(storage: optuna.storages.BaseStorage, name: str) -> int:
    """Finished (complete + pruned) trials of study ``name``; 0 if it does not exist. Read-only."""
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return 0
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return len(study.get_trials(deepcopy=False, states=states))


def _load(study: str, storage: str | None) -> tuple[optuna.Study, str]:
    """STUDY is a study name, or a study file whose name and storage are used."""
    url = storage
    name = study
    if study.endswith(".toml") or Path(study).is_file():
        sf = load_study_file(study)
        name, url = sf.name, storage or sf.storage
    url = url or DEFAULT_STORAGE
    storage_obj = _open(url)
    try:
        return optuna.load_study(study_name=name, storage=storage_obj), url
    except KeyError:
        known = optuna.get_all_study_names(storage_obj)
        raise StudyError("study", f"no study {name!r} in {redact(url)} (found: {known})") from None


@app.command()
def status(
    study: Annotated[str, typer.Argument(help="study name or study file")],
    storage: StorageOpt = None,
) -> None:
    """Print a study's trial counts and best value from storage (runs nothing)."""
    try:
        s, url = _load(study, storage)
    except StudyError as exc:
        raise _fail(exc) from None
    out.print(status_table(s, redact(url)))


@app.command()
def best(
    study: Annotated[str, typer.Argument(help="study name or study file")],
    storage: StorageOpt = None,
    n: Annotated[int, typer.Option("-n", min=1, help="how many trials")] = 5,
) -> None:
    """Print a study's best trials (Pareto front if several objectives) from storage."""
    try:
        s, _ = _load(study, storage)
    except StudyError as exc:
        raise _fail(exc) from None
    if not best_trials_exist(s):
        err.print(f"study {s.study_name} has no complete trial yet")
        raise typer.Exit(1)
    out.print(best_table(s, n))


def best_trials_exist(study: optuna.Study) -> bool:
    return bool(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


def main() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    app(prog_name="search")


if __name__ == "__main__":
    main()
    sys.exit(0)
