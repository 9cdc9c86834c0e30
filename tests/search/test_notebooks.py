"""The notebooks in notebooks/ run top to bottom (nbclient, a real Jupyter kernel) against a study
made by the test: DETOL_STORAGE and DETOL_STUDY point their parameter cells at it, or, unset, the
notebooks find the quickstart's detol.journal in the directory above the one they run in. Any
cell error fails the test. Every figure is saved with a static PNG beside the interactive one
(kaleido with Debian's chromium)."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tests.search.test_report import EMPTY, MULTI, NB201, OTHER_DATA, make_study, shared_storage

pytestmark = pytest.mark.timeout(180)

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
PLOTLY = "application/vnd.plotly.v1+json"
PNG_WIDTH = 960  # search.analysis._notebook.static_images' default


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> str:
    return shared_storage(tmp_path_factory)


def run_notebook(name: str, tmp_path: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
        f"{name} is committed with outputs; clear them"
    # Raises CellExecutionError (with the cell and traceback) if any cell fails.
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    return nb


def outputs(nb: nbformat.NotebookNode) -> tuple[str, int]:
    """All printed text, and how many plotly figures were shown. Each figure must also carry a
    static PNG image (what GitHub and nbviewer show)."""
    text, figures = [], 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "stream" and out.name == "stdout":
                text.append(out.text)
            data = out.get("data", {})
            if PLOTLY in data:
                figures += 1
                assert "image/png" in data, f"no static image beside: {cell.source[:200]}"
                png = base64.b64decode(data["image/png"])
                assert png[:8] == b"\x89PNG\r\n\x1a\n"
                assert int.from_bytes(png[16:20], "big") == PNG_WIDTH  # IHDR width
                assert len(png) > 15_000, len(png)  # an empty canvas is ~5 kB
    return "".join(text), figures


def test_analysis_notebook(storage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DETOL_STORAGE", storage)
    monkeypatch.setenv("DETOL_STUDY", MULTI)
    text, figures = outputs(run_notebook("analysis.ipynb", tmp_path))
    assert f"study {MULTI}: 8 trials, strategy random, objectives ['val_accuracy', 'n_params']" \
        in text
    assert "not drawn" not in text, text
    # history, curves, parallel, importance, Pareto front, genome, quality/cost, comparison
    assert figures == 8
    assert f"not compared: {OTHER_DATA} (dataset mnist1d), {EMPTY} (value, minimize)" in text
    assert not list(tmp_path.glob("*.journal"))  # read the given storage, created none


def test_compare_strategies_notebook(storage: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DETOL_STORAGE", storage)
    monkeypatch.setenv("DETOL_STUDY", ",".join(NB201))
    text, figures = outputs(run_notebook("compare-strategies.ipynb", tmp_path))
    assert "4 studies on val_accuracy (maximize)" in text
    # per study, per strategy (mean and range), final best, incumbent test accuracy
    assert figures == 4


def test_analysis_notebook_finds_the_quickstart_study_from_the_repository_root(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Jupyter started in the repository root runs the notebook in notebooks/; the README's
    quickstart wrote detol.journal in the root. Nothing to set, nothing created."""
    monkeypatch.delenv("DETOL_STORAGE", raising=False)
    monkeypatch.delenv("DETOL_STUDY", raising=False)
    make_study(str(tmp_path / "detol.journal"), "quickstart", trials=6)
    here = tmp_path / "notebooks"
    here.mkdir()
    text, figures = outputs(run_notebook("analysis.ipynb", here))
    assert "study quickstart: 6 trials, strategy random, objectives ['val_accuracy'], " \
        "objective kind training" in text
    assert figures >= 4
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["detol.journal", "notebooks"]


@pytest.mark.parametrize(("name", "env", "message"), [
    ("analysis.ipynb", {}, "StudyError: storage: no detol.journal in {here} or {parent}: run "
                           "`search run studies/quickstart.toml` in the repository root first, "
                           "or set STORAGE (or DETOL_STORAGE) to the journal file or storage "
                           "URL of your study"),
    ("compare-strategies.ipynb", {}, "StudyError: storage: no detol.journal in {here}"),
    ("analysis.ipynb", {"DETOL_STORAGE": "{parent}/none.journal"},
     "StudyError: storage: no file '{parent}/none.journal'"),
    ("analysis.ipynb", {"DETOL_STORAGE": "shared", "DETOL_STUDY": "nope"},
     "StudyError: study: no study 'nope' in {shared} (found: nb-random-0, nb-random-1, "),
])
def test_a_missing_storage_or_study_says_what_to_set_and_creates_nothing(
        storage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
        env: dict[str, str], message: str) -> None:
    monkeypatch.delenv("DETOL_STORAGE", raising=False)
    monkeypatch.delenv("DETOL_STUDY", raising=False)
    here = tmp_path / "notebooks"
    here.mkdir()
    for key, value in env.items():
        monkeypatch.setenv(key, storage if value == "shared" else value.format(parent=tmp_path))
    with pytest.raises(CellExecutionError) as failed:
        run_notebook(name, here)
    error = re.sub(r"\x1b\[[0-9;]*m", "", str(failed.value))  # the traceback's colours
    assert message.format(here=here, parent=tmp_path, shared=storage) in error, error[-600:]
    assert [p.name for p in tmp_path.rglob("*")] == ["notebooks"]


def test_without_a_browser_figures_stay_interactive_and_say_so() -> None:
    """No Chrome/Chromium for kaleido: one line says how to get static images; no hang."""
    code = ("import plotly.io as pio; from search.analysis._notebook import static_images; "
            "pio.renderers.default = 'plotly_mimetype'; "
            "print(static_images(), pio.renderers.default)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=90, env={**os.environ, "BROWSER_PATH": "/nonexistent"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("figures are interactive only, with no static image for GitHub "
                               "or nbviewer (")
    assert lines[0].endswith("pip install kaleido, and install Chrome or Chromium (Debian: "
                             "apt-get install chromium)")
    assert lines[1] == "False plotly_mimetype"
