"""The notebooks in notebooks/ run top to bottom (nbclient, a real Jupyter kernel) against a study
made by the test: DETOL_STORAGE and DETOL_STUDY point their parameter cells at it. Any cell error
fails the test."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.search.test_report import EMPTY, MULTI, NB201, OTHER_DATA, shared_storage

pytestmark = pytest.mark.timeout(180)

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
PLOTLY = "application/vnd.plotly.v1+json"


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
    """All printed text, and how many plotly figures were shown."""
    text, figures = [], 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "stream" and out.name == "stdout":
                text.append(out.text)
            figures += PLOTLY in out.get("data", {})
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
