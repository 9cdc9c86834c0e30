"""The command line's two consoles and its one way to print an error (rich only: cheap)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape

# Logs and CI capture output: give tables room instead of cutting every column to a stub.
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def print_error(text: str) -> None:
    """``error: TEXT`` on standard error, never wrapped (one line a user can grep for)."""
    err.print(f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)
