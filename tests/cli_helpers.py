"""Running the `search` command from tests: in-process (fast) or as the real console script."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from typer.testing import CliRunner

from search.cli import app


def run_cli(*args: str) -> tuple[int, str, str]:
    """`search ARGS` in-process: (exit code, stdout, stderr)."""
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def search_command() -> list[str]:
    """The installed `search` script (beside this Python), else `python -m search.cli`."""
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    exe = shutil.which("search", path=path)
    return [exe] if exe else [sys.executable, "-m", "search.cli"]


def run_search(*args: str, cwd: Path, env: dict[str, str] | None = None,
               stdin: str | None = None, timeout: float = 180) -> tuple[int, str, str]:
    """`search ARGS` as a user runs it (the real script, in ``cwd``), without this process's
    DETOL_STORAGE: (exit code, stdout, stderr)."""
    inherited = {k: v for k, v in os.environ.items() if k != "DETOL_STORAGE"}
    proc = subprocess.run([*search_command(), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**inherited, **(env or {})}, input=stdin)
    return proc.returncode, proc.stdout, proc.stderr


def write_quad_study(directory: Path, *, trials: int = 2, strategy: str = "random",
                     high: float = 1.0) -> Path:
    """``quad.py`` (a function objective, (x - 0.3)^2) and ``study.toml`` searching x in
    [0, high] with ``strategy``, in ``directory``; returns the study file's path."""
    (directory / "quad.py").write_text("def objective(params):\n    return (params['x'] - .3) ** 2\n")
    path = directory / "study.toml"
    path.write_text(textwrap.dedent(f"""\
        name = "quad"
        objective = "quad:objective"
        metric = "loss"
        direction = "minimize"
        pruner = "none"
        [strategy]
        name = "{strategy}"
        seed = 1
        [budget]
        trials = {trials}
        [space]
        x = {{ type = "float", low = 0, high = {high} }}
        """))
    return path
