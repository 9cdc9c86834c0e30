"""mkdocs hook: the benchmark results (benchmarks/results/) are served beside the pages as
``results/NAME``, so every performance table links to the file its figures come from, and a
strict build fails on a link to a results file that does not exist."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def on_files(files: Files, config: Any) -> Files:
    for path in sorted((BENCHMARKS / "results").glob("*.json")):
        files.append(File(f"results/{path.name}", src_dir=str(BENCHMARKS),
                          dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    return files
