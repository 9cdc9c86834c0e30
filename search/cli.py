"""The ``search`` command: run a study file, and read a study's state from storage.

    search run studies/quickstart.toml
    search status quickstart
    search best quickstart -n 10

Only typer and rich are imported here: ``search --help`` answers at once, and each command
imports what it needs (Optuna, Dask, pandas) when it runs.
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from search._console import err, out, print_error
from search._data_cli import data_app
from search._errors import StudyError
from search.storage._reading import (
    DEFAULT_STORAGE,
    beside_storage,
    load,
    open_url,
    reading,
    writable,
)

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Hyperparameter and topology search: every trial is an MPI job, scheduled by Dask, "
    "stored in Optuna.",
)

app.add_typer(data_app, name="data")

StorageOpt = Annotated[
    str | None,
    typer.Option(
        "--storage",
        help=f"Optuna storage URL or journal file (default: $DETOL_STORAGE, else the study "
        f"file's, else {DEFAULT_STORAGE})",
    ),
]


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            out.print(f"detol {version('detol')}", highlight=False)
        except PackageNotFoundError:
            out.print("detol (not installed as a package)", highlight=False)
        raise typer.Exit()


@app.callback()
def _main(
    show_version: Annotated[bool, typer.Option(
        "--version", "-V", callback=_version, is_eager=True, help="print the version and exit",
    )] = False,
) -> None:
    """Hyperparameter and topology search: every trial is an MPI job, scheduled by Dask, stored
    in Optuna."""


def _fail(exc: StudyError) -> typer.Exit:
    for one in exc.errors:  # a study file's mistakes: all of them, one a line
        print_error(str(one))
    return typer.Exit(2)



def _plan(study_file: Path, storage: str | None, scheduler: str | None, backend: str | None,
          adapt_min: int | None, adapt_max: int | None, trials: int | None,
          concurrency: int | None) -> Any:
    from search.driver._run import plan_run

    return plan_run(study_file, storage=storage, trials=trials, concurrency=concurrency,
                    backend=backend, scheduler=scheduler, adapt_min=adapt_min,
                    adapt_max=adapt_max)


SchedulerOpt = Annotated[str | None, typer.Option(
    "--scheduler", help="address of an existing Dask scheduler (the address backend)")]
BackendOpt = Annotated[str | None, typer.Option(
    "--backend", help="override cluster.backend: local, address, slurm, sge, pbs, kubernetes, "
    "cloud (docs/clusters.md)")]
AdaptMinOpt = Annotated[int | None, typer.Option(
    "--adapt-min", min=0, help="adaptive scaling: fewest workers (cluster.adapt)")]
AdaptMaxOpt = Annotated[int | None, typer.Option(
    "--adapt-max", min=1, help="adaptive scaling: most workers (cluster.adapt)")]
TrialsOpt = Annotated[int | None, typer.Option(
    "--trials", min=1, help="override budget.trials (total)")]
ConcurrencyOpt = Annotated[int | None, typer.Option(
    "--concurrency", min=1, help="override budget.concurrency")]


@app.command()
def run(
    study_file: Annotated[Path, typer.Argument(metavar="STUDY_FILE", help="TOML study file")],
    storage: StorageOpt = None,
    scheduler: SchedulerOpt = None,
    backend: BackendOpt = None,
    adapt_min: AdaptMinOpt = None,
    adapt_max: AdaptMaxOpt = None,
    trials: TrialsOpt = None,
    concurrency: ConcurrencyOpt = None,
    progress: Annotated[bool, typer.Option(help="live progress bar on a terminal")] = True,
) -> None:
    """Run (or resume) the study in STUDY_FILE until it holds budget.trials finished trials."""
    from search.driver import _run

    _run.on_signals()  # SIGTERM and SIGHUP stop the run as Ctrl-C does, from here on
    try:
        plan = _plan(study_file, storage, scheduler, backend, adapt_min, adapt_max, trials,
                     concurrency)
        code = _run.run(plan, progress=progress)
    except StudyError as exc:
        raise _fail(exc) from None
    except KeyboardInterrupt as exc:  # before the driver started: nothing to clean up
        import signal

        signum = getattr(exc, "signum", signal.SIGINT)
        err.print(f"interrupted ({signal.Signals(signum).name}) before the first trial")
        raise typer.Exit(128 + signum) from None
    except OSError as exc:  # a full disk (or quota) under the storage: one line, not a traceback
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = f" writing {exc.filename}" if exc.filename else ""
        print_error(f"storage: {exc.strerror}{where}; finished trials are kept: free space, "
                    "then run the same command again to resume")
        raise typer.Exit(1) from None
    if code:
        raise typer.Exit(code)


@app.command()
def validate(
    study_file: Annotated[Path, typer.Argument(metavar="STUDY_FILE", help="TOML study file")],
    storage: StorageOpt = None,
    scheduler: SchedulerOpt = None,
    backend: BackendOpt = None,
    adapt_min: AdaptMinOpt = None,
    adapt_max: AdaptMaxOpt = None,
    trials: TrialsOpt = None,
    concurrency: ConcurrencyOpt = None,
) -> None:
    """Check STUDY_FILE as `search run` would, running and writing nothing.

    Checks the file, the storage, whether the study there may go on with this file, the
    dataset, the warm-start sources, the cluster (SLURM: `sbatch --test-only` of the worker job
    script; Grid Engine: `qsub -w v`) and the launcher.
    """
    from search.driver._run import validate as check

    try:
        plan = _plan(study_file, storage, scheduler, backend, adapt_min, adapt_max, trials,
                     concurrency)
        lines = check(plan)
    except StudyError as exc:
        raise _fail(exc) from None
    for line in lines:
        out.print(escape(line), highlight=False, soft_wrap=True)


@app.command()
def status(
    study: Annotated[str, typer.Argument(metavar="STUDY", help="study name or study file")],
    storage: StorageOpt = None,
) -> None:
    """Print a study's trial counts and best value from storage (runs nothing)."""
    from search.analysis._tables import status_table
    from training.contract import redact

    try:
        s, url = load(study, storage)
    except StudyError as exc:
        raise _fail(exc) from None
    out.print(status_table(s, redact(url)))


@app.command()
def best(
    study: Annotated[str, typer.Argument(metavar="STUDY", help="study name or study file")],
    storage: StorageOpt = None,
    n: Annotated[int, typer.Option("-n", "--number", min=1, help="how many trials")] = 5,
    export_weights: Annotated[Path | None, typer.Option(
        "--export-weights", metavar="PATH", help="write the best trial's final weights (a "
        "torch file: state_dict, params, config, values; [training] keep_weights = true)")] = None,
) -> None:
    """Print a study's best trials (Pareto front if several objectives) from storage."""
    from optuna.trial import TrialState

    from search.analysis._tables import best_table

    try:
        s, _ = load(study, storage)
    except StudyError as exc:
        raise _fail(exc) from None
    if not s.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        err.print(f"study {s.study_name} has no complete trial yet")
        raise typer.Exit(1)
    out.print(best_table(s, n))
    if export_weights is not None:
        from search.analysis._weights import export_best_weights

        try:
            line = export_best_weights(s, export_weights)
        except StudyError as exc:
            raise _fail(exc) from None
        out.print(line, highlight=False)


@app.command()
def delete(
    study: Annotated[str, typer.Argument(metavar="STUDY", help="study name or study file")],
    storage: StorageOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask")] = False,
) -> None:
    """Delete a study and all its trials from the storage (asks first)."""
    import optuna

    from training.contract import redact

    try:
        s, url = load(study, storage)
        where, trials = redact(url), len(s.get_trials(deepcopy=False))
        if not yes:
            if not sys.stdin.isatty():
                raise StudyError("yes", f"deleting study {s.study_name!r} needs a terminal to "
                                 "confirm, or --yes")
            typer.confirm(f"delete study {s.study_name!r} ({trials} trials) from {where}?",
                          abort=True)
        optuna.delete_study(study_name=s.study_name, storage=open_url(url))
    except StudyError as exc:
        raise _fail(exc) from None
    out.print(f"deleted study {escape(s.study_name)} ({trials} trials) from {escape(where)}",
              highlight=False)


# --- looking at a study: report, dashboard, export ----------------------------------------------


@app.command()
def report(
    study: Annotated[str, typer.Argument(metavar="STUDY", help="study name or study file")],
    storage: StorageOpt = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="HTML file (default: STUDY-report.html beside the storage file)",
    )] = None,
    compare: Annotated[list[str] | None, typer.Option(
        "--compare", help="compare with this study of the same storage (repeat, or a,b); "
        "default: every study there with the same first objective and dataset")] = None,
    no_compare: Annotated[bool, typer.Option(
        "--no-compare", help="no strategy comparison")] = False,
) -> None:
    """Write a self-contained HTML report of a study (figures need no server or network)."""
    import optuna

    from search.analysis._figures import other_studies
    from search.analysis._report import write_report
    from training.contract import redact

    try:
        s, url = load(study, storage)
        path = writable(output or beside_storage(url, f"{s.study_name}-report.html"))
        names = [n for item in compare or [] for n in item.split(",") if n]
        try:
            others = [] if no_compare else other_studies(s, names or None)
        except KeyError as exc:
            known = optuna.get_all_study_names(s._storage)  # noqa: SLF001
            raise StudyError("compare", f"no study {exc.args[0]!r} in {redact(url)} "
                             f"(found: {', '.join(known)})") from None
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


def _checkpoint_store(url: str, study: Any = None) -> Any:
    """The artifact store the checkpoints are in (``study``'s ``[checkpoints] store``, else
    the default beside the storage), when it exists, so the dashboard lists and serves them;
    None otherwise."""
    from search.analysis._columns import study_config
    from search.storage._checkpoint_store import artifact_directory, recorded_store
    from training.contract import artifact_store

    where = None
    if study is not None:  # the store the study recorded, else its file's (older studies)
        where = recorded_store(study) or (study_config(study).get("checkpoints") or {}).get(
            "store")
    if where is None:
        default = artifact_directory(url)
        where = str(default) if default.is_dir() else None
    if where is None or ("://" not in where and not Path(where).is_dir()):
        return None
    return artifact_store(where)


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

    from training.contract import redact

    try:
        try:
            import optuna_dashboard
        except ImportError:
            raise StudyError("dashboard", "optuna-dashboard is not installed "
                             "(pip install optuna-dashboard)") from None
        page, s = "/dashboard", None
        # Study names have no '/' (letters, digits, _ - .): anything path-like is a storage.
        if target is not None and not target.endswith(".toml") and (
                "://" in target or "/" in target or target.endswith(".journal")
                or Path(target).is_file()):
            if storage:
                raise StudyError("storage", f"give the storage once: {target!r} or --storage "
                                 f"{storage!r}")
            url = reading(target)
        elif target is not None:
            s, url = load(target, storage)
            page = f"/dashboard/studies/{s._study_id}"  # noqa: SLF001 - the dashboard's own id
        elif storage:
            url = reading(storage)
        elif not Path(DEFAULT_STORAGE).is_file():
            raise StudyError("storage", f"no {DEFAULT_STORAGE} here: name a study, a study file "
                             "or a storage")
        else:
            url = DEFAULT_STORAGE
        app_ = optuna_dashboard.wsgi(open_url(url), artifact_store=_checkpoint_store(url, s))
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
    study: Annotated[str, typer.Argument(metavar="STUDY", help="study name or study file")],
    storage: StorageOpt = None,
    fmt: Annotated[str | None, typer.Option(
        "--format", "-f", help="csv or parquet (default: from -o's suffix, else csv)")] = None,
    output: Annotated[str | None, typer.Option(
        "-o", "--output", help="file, or - for standard output (csv); default: STUDY.FORMAT "
        "beside the storage file",
    )] = None,
) -> None:
    """Write a study's trials as a table, one row per trial (CSV or Parquet)."""
    from search.analysis._export import export_format, export_study

    try:
        kind = export_format(fmt, output)
        s, url = load(study, storage)
        path = output or str(beside_storage(url, f"{s.study_name}.{kind}"))
        if path != "-":
            writable(Path(path))
        rows = export_study(s, path, kind)
    except StudyError as exc:
        raise _fail(exc) from None
    if path != "-":
        out.print(f"wrote {rows} trials to {escape(path)} ({kind})", highlight=False)


def main() -> None:
    app(prog_name="search")


if __name__ == "__main__":
    main()
    sys.exit(0)
