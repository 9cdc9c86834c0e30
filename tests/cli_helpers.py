"""Running the `search` command from tests: in-process (fast) or as the real console script."""

from __future__ import annotations

import os
import shutil
import sys

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
