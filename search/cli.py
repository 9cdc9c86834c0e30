"""The ``search`` command: run a study file, and read a study's state from storage.

    search run studies/quickstart.toml
    search status quickstart
    search best quickstart -n 10
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import Annotated, Any

import dask
import optuna
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from search._driver import Driver, RunCounts
from search._errors import StudyError
from search._study import check_same_study, open_study, recover_orphans
from search._study_file import load_study_file
from search._tables import best_table, objective_names, status_table
from training.contract import (
    DEFAULT_STORAGE,
    check_dataset_loads,
    journal_path,
    open_storage,
    redact,
)

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
    typer.Option(
        "--storage",
        help=f"Optuna storage URL or journal file (default: the study file's, else "
        f"{DEFAULT_STORAGE})",
    ),
]


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM (``kill``, a batch system's time limit) or SIGHUP: stop as Ctrl-C does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.signal_name = signal.Signals(signum).name


def _interrupt(signum: int, _frame: Any) -> None:
    raise Interrupted(signum)


def _on_signals() -> None:
    """Ctrl-C, ``kill`` and a closed terminal all end the run the same clean way."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)


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
            extra = f"{result.get('wall_time_s', 0):.1f} s"
            if "epochs_run" in result:
                extra = f"{result['epochs_run']} ep, {extra}"
            line = f"trial {trial.number:>3} {what} {escape(shown)} {escape(params)} ({extra})"
            if kind == "failed":
                reason = (str(result.get("exit_reason", "")).splitlines() or [""])[0][:300]
                line += f"\n    {escape(reason)}"
                if result.get("log_path"):
                    line += f"\n    full log: {escape(str(result['log_path']))}"
            self.progress.console.print(line, highlight=False, soft_wrap=True)
        stats = (f"running {c.running}  complete {c.complete}  pruned {c.pruned}  "
                 f"failed {c.failed}  {self._best()}")
        self.progress.update(self.task, completed=c.finished, stats=stats)


@app.command()
def run(
    study_file: Annotated[Path, typer.Argument(help="TOML study file")],
    storage: StorageOpt = None,
    scheduler: Annotated[
        str | None, typer.Option(help="address of an existing Dask scheduler")
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(help="override cluster.backend: local, address, slurm, pbs, kubernetes, "
                     "cloud (docs/clusters.md)"),
    ] = None,
    adapt_min: Annotated[
        int | None, typer.Option(min=0, help="adaptive scaling: fewest workers (cluster.adapt)")
    ] = None,
    adapt_max: Annotated[
        int | None, typer.Option(min=1, help="adaptive scaling: most workers (cluster.adapt)")
    ] = None,
    trials: Annotated[
        int | None, typer.Option(min=1, help="override budget.trials (total)")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(min=1, help="override budget.concurrency")
    ] = None,
    progress: Annotated[bool, typer.Option(help="live progress bar on a terminal")] = True,
) -> None:
    """Run (or resume) the study in STUDY_FILE until it holds budget.trials finished trials."""
    from search._cluster import ClusterFailed, open_cluster, with_overrides

    # A worker that dies mid-trial fails that trial at once (the driver re-queues its parameters)
    # instead of Dask silently re-running it under the same trial number.
    dask.config.set({"distributed.scheduler.allowed-failures": 0})
    if threading.current_thread() is threading.main_thread():
        _on_signals()
    try:
        sf = load_study_file(study_file)
        url = storage or sf.storage or DEFAULT_STORAGE
        target = trials or sf.budget.trials
        n_parallel = concurrency or sf.budget.concurrency
        # A storage file that does not exist yet is created only once the cluster is up: a bad
        # cluster or launcher leaves nothing behind.
        storage_obj = None if _new_storage_file(url) else _open(url)
        existing = None if storage_obj is None else _existing_study(storage_obj, sf.name)
        # A study name that exists must go on with a study file that keeps its trials comparable.
        notes = [] if existing is None else check_same_study(existing, sf, redact(url))
        finished = 0 if existing is None else _finished_count(existing)
        if existing is not None and finished >= target:
            out.print(f"study {sf.name} already holds {finished} finished trials (budget "
                      f"{target}); nothing to run. Raise budget.trials or pass --trials.")
            if best_trials_exist(existing):
                out.print(best_table(existing))
            return
        cluster_table = with_overrides(sf.cluster, backend=backend, scheduler=scheduler,
                                       adapt_min=adapt_min, adapt_max=adapt_max)
        if sf.objective is None and cluster_table.backend == "local":
            _check_dataset(sf)  # trials here load it here: find out now, not after 5 failures
        # Check the cluster (and launcher) before anything is written to the storage.
        with open_cluster(
            cluster_table,
            concurrency=n_parallel,
            max_ranks=sf.max_ranks,
            launcher=sf.launcher.command,
            study_name=sf.name,
        ) as cluster:
            storage_obj = storage_obj or _open(url)
            study = open_study(sf, storage_obj)
            for number in recover_orphans(study, sf.budget.max_retries):
                reason = study._storage.get_trial(  # noqa: SLF001 - one finished trial, read-only
                    study._storage.get_trial_id_from_study_id_trial_number(  # noqa: SLF001
                        study._study_id, number  # noqa: SLF001
                    )
                ).user_attrs.get("exit_reason", "its driver died")
                out.print(f"trial {number} failed: {escape(str(reason))}", highlight=False)
            for note in notes:
                out.print(f"note: {escape(note)}", highlight=False)
            out.print(_header(sf, redact(url), target, finished, n_parallel), highlight=False)
            display = _Display(study, target, progress and out.is_terminal)
            driver = Driver(sf, study, cluster.client, storage_url=url, on_event=display,
                            watch=cluster.check, single_node=cluster_table.backend == "local")
            with display.progress:
                counts = driver.run(trials=target, concurrency=n_parallel,
                                    timeout=sf.budget.timeout)
    except ClusterFailed as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None
    except StudyError as exc:
        raise _fail(exc) from None
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        err.print(f"interrupted ({signal.Signals(signum).name}): running trials marked failed "
                  "and their parameters re-queued; run again to resume")
        raise typer.Exit(128 + signum) from None
    if best_trials_exist(study):
        out.print(best_table(study))
    out.print(f"{counts.complete} complete, {counts.pruned} pruned, {counts.failed} failed in this "
              f"run; the study holds {counts.finished}/{target} finished trials.")
    if counts.stopped_because:
        err.print(f"[red]{escape(counts.stopped_because)}[/]")
        raise typer.Exit(1)


def _check_dataset(sf: Any) -> None:
    try:
        check_dataset_loads(sf.training.dataset, sf.launcher.env)
    except ValueError as exc:
        raise StudyError("training.dataset", str(exc)) from None


def _new_storage_file(url: str) -> bool:
    """True when ``url`` names a journal or SQLite file that does not exist yet (StudyError if it
    cannot be created there)."""
    path = journal_path(url)
    if path is None and url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):].split("?", 1)[0] or None
    if path is None or path == ":memory:" or Path(path).exists():
        return False
    parent = Path(path).expanduser().parent
    if not parent.is_dir():
        raise StudyError("storage", f"cannot create {redact(url)}: directory {str(parent)!r} "
                         "does not exist")
    if not os.access(parent, os.W_OK):
        raise StudyError("storage", f"cannot create {redact(url)}: directory {str(parent)!r} "
                         "is not writable")
    return True


def _existing_study(storage: optuna.storages.BaseStorage, name: str) -> optuna.Study | None:
    """Study ``name`` if the storage holds it (read-only), else None."""
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None


def _finished_count(study: optuna.Study) -> int:
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return len(study.get_trials(deepcopy=False, states=states))


def _what_a_trial_is(sf: Any) -> str:
    """What one trial runs, in the header's words: only what applies to the objective."""
    from search._objectives import is_benchmark

    if is_benchmark(sf.objective):
        return f"table lookups of {sf.objective} (simulated training time)"
    if sf.objective is not None:
        return f"calls of {sf.objective} on Dask workers"
    ranks = f"{sf.training.ranks}-rank"
    if "ranks" in sf.space:
        ranks = f"{min(sf.rank_choices)}-{max(sf.rank_choices)}-rank (searched)"
    return f"{ranks} MPI jobs ({sf.training.dataset}, {sf.training.epochs} epochs)"


def _header(sf: Any, where: str, target: int, finished: int, parallel: int) -> str:
    todo = (f"{target} trials" if not finished else
            f"{finished} of {target} trials finished, {target - finished} to run")
    return (f"study [bold]{escape(sf.name)}[/] in {escape(where)}: {todo}, {parallel} at a time, "
            f"{escape(_what_a_trial_is(sf))}; {sf.strategy.name}, pruner {sf.pruner.name}")


def _load(study: str, storage: str | None) -> tuple[optuna.Study, str]:
    """STUDY is a study name, or a study file whose name and storage are used."""
    url = storage
    name = study
    if study.endswith(".toml") or Path(study).is_file():
        sf = load_study_file(study)
        name, url = sf.name, storage or sf.storage
    url = _reading(url or DEFAULT_STORAGE)  # reading never creates a journal file
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


# --- looking at a study: report, dashboard, export ----------------------------------------------


def _reading(url: str) -> str:
    """``url`` for commands that only read: a journal file must already exist (never create one)."""
    path = journal_path(url)
    if path and not Path(path).is_file():
        hint = " (pass --storage)" if url == DEFAULT_STORAGE else ""
        raise StudyError("storage", f"no journal file {path!r}{hint}")
    return url


def _writable(path: Path) -> Path:
    if path.is_dir():
        raise StudyError("output", f"cannot write {path}: it is a directory")
    if not path.parent.is_dir():
        raise StudyError("output", f"cannot write {path}: directory {str(path.parent)!r} does not "
                         "exist")
    if not os.access(path.parent, os.W_OK):
        raise StudyError("output", f"cannot write {path}: directory {str(path.parent)!r} is not "
                         "writable")
    return path


@app.command()
def report(
    study: Annotated[str, typer.Argument(help="study name or study file")],
    storage: StorageOpt = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="HTML file (default: STUDY-report.html)")] = None,
    compare: Annotated[list[str] | None, typer.Option(
        help="compare with this study of the same storage (repeat, or a,b); default: every "
             "study there with the same first objective and dataset")] = None,
    no_compare: Annotated[bool, typer.Option(
        "--no-compare", help="no strategy comparison")] = False,
) -> None:
    """Write a self-contained HTML report of a study (figures need no server or network)."""
    from search._analysis import other_studies
    from search._report import write_report

    try:
        s, url = _load(study, storage)
        path = _writable(output or Path(f"{s.study_name}-report.html"))
        names = [n for item in compare or [] for n in item.split(",") if n]
        try:
            others = [] if no_compare else other_studies(s, names or None)
        except KeyError as exc:
            known = optuna.get_all_study_names(s._storage)  # noqa: SLF001
            raise StudyError("compare", f"no study {exc.args[0]!r} in {redact(url)} "
                             f"(found: {known})") from None
        try:
            summary = write_report(s, path, storage_label=redact(url), compare=others,
                                   chosen=bool(names))
        except OSError as exc:
            raise StudyError("output", f"cannot write {path}: {exc.strerror or exc}") from None
    except StudyError as exc:
        raise _fail(exc) from None
    out.print(f"wrote {escape(str(path))}: {summary.figures} figures", highlight=False)
    for line in summary.skipped:
        out.print(f"  not drawn: {escape(line)}", highlight=False, soft_wrap=True)
    for line in summary.notes:
        out.print(f"  note: {escape(line)}", highlight=False, soft_wrap=True)


@app.command()
def dashboard(
    target: Annotated[str | None, typer.Argument(
        metavar="[STUDY_OR_STORAGE]",
        help=f"study name, study file, storage URL or journal file (default: {DEFAULT_STORAGE})",
    )] = None,
    storage: StorageOpt = None,
    port: Annotated[int, typer.Option(
        min=0, max=65535, help="port on 127.0.0.1 (0: any free port)")] = 8080,
) -> None:
    """Serve optuna-dashboard for a study's storage on 127.0.0.1 until Ctrl-C."""
    import socketserver
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    class Server(socketserver.ThreadingMixIn, WSGIServer):
        daemon_threads = True  # Ctrl-C does not wait for open browser connections

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
            pass

    try:
        try:
            import optuna_dashboard
        except ImportError:
            raise StudyError("dashboard", "optuna-dashboard is not installed "
                             "(pip install optuna-dashboard)") from None
        page = "/dashboard"
        # Study names have no '/' (letters, digits, _ - .): anything path-like is a storage.
        if target is not None and not target.endswith(".toml") and (
                "://" in target or "/" in target or target.endswith(".journal")
                or Path(target).is_file()):
            if storage:
                raise StudyError("storage", f"give the storage once: {target!r} or --storage "
                                 f"{storage!r}")
            url = _reading(target)
        elif target is not None:
            s, url = _load(target, storage)
            page = f"/dashboard/studies/{s._study_id}"  # noqa: SLF001 - the dashboard's own id
        elif storage:
            url = _reading(storage)
        elif not Path(DEFAULT_STORAGE).is_file():
            raise StudyError("storage", f"no {DEFAULT_STORAGE} here: name a study, a study file "
                             "or a storage")
        else:
            url = DEFAULT_STORAGE
        app_ = optuna_dashboard.wsgi(_open(url))
        try:
            server = make_server("127.0.0.1", port, app_, server_class=Server,
                                 handler_class=QuietHandler)
        except OSError as exc:
            raise StudyError("port", f"cannot listen on 127.0.0.1:{port}: {exc.strerror} "
                             "(pass another --port, or 0 for any free one)") from None
    except StudyError as exc:
        raise _fail(exc) from None
    address = f"http://127.0.0.1:{server.server_port}"
    out.print(f"optuna-dashboard for {escape(redact(url))} at {address}{page}", highlight=False,
              soft_wrap=True)
    out.print("Ctrl-C stops it", highlight=False)
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@app.command()
def export(
    study: Annotated[str, typer.Argument(help="study name or study file")],
    storage: StorageOpt = None,
    fmt: Annotated[str | None, typer.Option(
        "--format", "-f", help="csv or parquet (default: from -o's suffix, else csv)")] = None,
    output: Annotated[str | None, typer.Option(
        "-o", "--output", help="file, or - for standard output (csv); default: STUDY.FORMAT",
    )] = None,
) -> None:
    """Write a study's trials as a table, one row per trial (CSV or Parquet)."""
    from search._export import export_format, export_study

    try:
        kind = export_format(fmt, output)
        s, _ = _load(study, storage)
        path = output or f"{s.study_name}.{kind}"
        if path != "-":
            _writable(Path(path))
        rows = export_study(s, path, kind)
    except StudyError as exc:
        raise _fail(exc) from None
    if path != "-":
        out.print(f"wrote {rows} trials to {escape(path)} ({kind})", highlight=False)


def main() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    app(prog_name="search")


if __name__ == "__main__":
    main()
    sys.exit(0)
