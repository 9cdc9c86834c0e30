"""The docs cannot drift: the reference pages are what the code generates, the site builds with
every link and page checked, and the README stays a front door whose test command CI runs."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("docs_gen", ROOT / "docs" / "gen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.unit
def test_the_committed_reference_pages_are_what_the_code_generates(gen):
    stale = gen.stale()
    assert not stale, "\n\n".join(
        f"docs/reference/{name} is stale: run python docs/gen.py\n{diff}"
        for name, diff in stale.items()
    )


@pytest.mark.unit
def test_a_stale_or_missing_page_is_found(gen, tmp_path):
    for page in gen.PAGES:
        shutil.copy(ROOT / "docs" / "reference" / page, tmp_path / page)
    page = tmp_path / "study-file.md"
    old = "| `epochs` | int | `10` |"
    assert old in page.read_text()
    page.write_text(page.read_text().replace(old, "| `epochs` | int | `12` |"))
    (tmp_path / "cli.md").unlink()

    stale = gen.stale(tmp_path)

    assert sorted(stale) == ["cli.md", "study-file.md"]
    assert "-| `epochs` | int | `12` |" in stale["study-file.md"]
    assert "+| `epochs` | int | `10` |" in stale["study-file.md"]


@pytest.mark.unit
def test_every_study_file_key_says_what_it_is_for(gen):
    page = gen.study_file_page()
    rows = [line for line in page.splitlines()
            if line.startswith("| `") and line.rstrip().endswith("|")]
    assert len(rows) > 100  # every table of the page, not one of them
    silent = [row.split("|")[1].strip() for row in rows if row.rstrip("| ").endswith("|")
              or row.split("|")[-2].strip() == ""]
    assert not silent, f"study-file keys without help text (add description=...): {silent}"


def test_the_docs_build_with_every_link_and_page_checked(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site / "reference" / "study-file" / "index.html").is_file()
    assert (site / "results" / "nb201.json").is_file()  # tables link to their results files


@pytest.mark.unit
def test_the_readme_is_a_front_door_whose_test_command_ci_runs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200  # a front door: tables live in docs/
    two = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```\n(.+?)\n```", two)
    assert len(commands) == 2, commands
    assert commands[0].endswith("search run studies/quickstart.toml")
    assert commands[1].endswith("python -m pytest")
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert commands[1] in ci[-1], "the last line of .ci/run runs the README's test command"
    for target in re.findall(r"\]\((?!https?://|#)([^)#\s]+)", readme):
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"
