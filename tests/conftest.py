"""Shared test helpers: study files, an isolated dataset cache, user modules for trial jobs."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

from tests import _starts

TESTS_DIR = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    _starts.install()  # a test marked unit that starts a process or a server fails
    # matplotlib builds its font cache on first use and runs `fc-list` for it: on a fresh
    # machine that first use fell inside a unit test (the report's figures), which then counted
    # as starting a process; build it once here, outside every test
    with contextlib.suppress(ImportError):  # (an install without the report's extras)
        import matplotlib.font_manager  # noqa: F401


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """Setup (its fixtures too), call and teardown of a unit test start nothing."""
    _starts.entering(item.nodeid if item.get_closest_marker("unit") else None)
    yield
    _starts.entering(None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """The last test of a module (or of the run) also ends the module's and the session's
    fixtures, which other tests started (a PostgreSQL server): stopping them is not the unit
    test's doing. Its own fixtures' teardown still may start nothing, except there."""
    if nextitem is None or getattr(nextitem, "module", None) is not getattr(item, "module", None):
        _starts.entering(None)
    yield


def _terminated(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"pytest got signal {signum}")


# A run stopped with SIGTERM (a CI timeout, `kill`) ends as Ctrl-C does: the fixtures' teardowns
# run, so the PostgreSQL servers, clusters and daemons the tests started stop with it (Python's
# default on SIGTERM is to die at once, and a server started for a test outlived the run).
signal.signal(signal.SIGTERM, _terminated)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Datasets cached once per test session, never in the user's home."""
    monkeypatch.setenv("DETOL_CACHE", str(tmp_path_factory.getbasetemp() / "detol-cache"))
    optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture
def helpers_env() -> dict[str, str]:
    """[launcher] env that lets trial MPI jobs import tests/mpi_jobs/_trial_helpers.py.

    Not tests/ itself: its packages (tests/spaces, ...) would shadow the real ones.
    """
    jobs = TESTS_DIR / "mpi_jobs"
    return {"PYTHONPATH": os.pathsep.join([str(jobs), os.environ.get("PYTHONPATH", "")])}

# The smallest valid study: one rank, one epoch on digits (everything else defaults).
MINIMAL_TRAINING = {"dataset": '"digits"', "epochs": "1", "ranks": "1"}


def study_text(*, top: str = "", training: dict[str, str] | None = None, tail: str = "") -> str:
    """A study file's text: ``name = "t"`` plus ``top`` (top-level keys), a ``[training]`` table
    (MINIMAL_TRAINING updated with ``training``, values written as raw TOML), then ``tail``
    (further tables)."""
    values = {**MINIMAL_TRAINING, **(training or {})}
    lines = ['name = "t"', top, "", "[training]"]
    lines += [f"{key} = {value}" for key, value in values.items()]
    lines += ["", tail]
    return "\n".join(lines) + "\n"


@pytest.fixture
def write_study(tmp_path: Path) -> Callable[..., Path]:
    """``write_study(text=None, name="study.toml", **study_text_kwargs)`` -> path in tmp_path.

    With no ``text``, the file holds ``study_text(**kwargs)`` (by default a minimal valid study).
    """

    def write(text: str | None = None, *, name: str = "study.toml", **kwargs: object) -> Path:
        path = tmp_path / name
        path.write_text(study_text(**kwargs) if text is None else text)  # type: ignore[arg-type]
        return path

    return write
