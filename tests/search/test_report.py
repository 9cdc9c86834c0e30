"""`search report`: one self-contained HTML file, opened in a real headless Chromium.

The studies are filled the way the driver fills them (``study.ask()``, the real search space's
``suggest``, per-epoch ``trial.report`` with a real median pruner, the same user attributes),
with training simulated by a formula, so a whole storage is made in well under a second.
:func:`make_study` is shared with the notebook, dashboard and export tests.
"""

from __future__ import annotations

import html
import math
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

import spaces
from tests.cli_helpers import run_cli
from training.contract import open_storage

pytestmark = pytest.mark.timeout(120)

# Study names in the storage of :func:`make_storage` and what they hold.
NB201 = ["nb-random-0", "nb-random-1", "nb-tpe-0", "nb-tpe-1"]  # cell genomes, 1 objective
MULTI = "multi-macro"  # macro genomes, objectives val_accuracy and n_params, no pruning
OTHER_DATA = "other-data"  # like NB201 but on another dataset: not compared unless named
TINY = "tiny"  # one complete trial, nothing searched
EMPTY = "empty"  # no trial at all


def make_study(storage: str, name: str, *, trials: int = 10, family: str | None = None,
               objectives: tuple[str, ...] = ("val_accuracy",), strategy: str = "random",
               seed: int = 0, epochs: int = 4, dataset: str = "digits") -> optuna.Study:
    """A study as ``search run`` leaves it, with training replaced by a formula of lr/hidden."""
    minimize = ("val_loss", "train_loss", "n_params", "flops")
    directions = [optuna.study.StudyDirection.MINIMIZE if o in minimize
                  else optuna.study.StudyDirection.MAXIMIZE for o in objectives]
    sampler = (optuna.samplers.TPESampler(seed=seed, n_startup_trials=4) if strategy == "tpe"
               else optuna.samplers.RandomSampler(seed=seed))
    pruner = (optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1)
              if len(objectives) == 1 else optuna.pruners.NopPruner())
    study = optuna.create_study(study_name=name, storage=open_storage(storage), sampler=sampler,
                                pruner=pruner, directions=directions)
    study.set_metric_names(list(objectives))
    study.set_user_attr("detol:study", {
        "name": name, "metric": list(objectives),
        "strategy": {"name": strategy, "seed": seed},
        "training": {"dataset": dataset, "epochs": epochs, "ranks": 1, "algorithm": "sync"},
    })
    dims: dict[str, spaces.Dimension] = {
        "lr": spaces.Float(low=1e-4, high=0.3, log=True),
        "hidden": spaces.Int(low=16, high=128),
        "ranks": spaces.Categorical((1, 2)),
        "algorithm": spaces.Categorical(("sync", "asgd")),
    }
    if family:
        dims["genome"] = spaces.make_family(family)
    space = spaces.Space(dims)
    rng = np.random.default_rng(seed)
    for _ in range(trials):
        trial = study.ask()
        params = space.suggest(trial)
        genome = params.pop("genome", None)
        n_params = params["hidden"] * 74 + 10
        if genome is not None:
            trial.set_user_attr("genome", genome.canonical_json)
            trial.set_user_attr("genome_key", genome.key)
            trial.set_user_attr("genome_summary", genome.summary())
            n_params += 50 * len(genome.canonical_json)
        quality = (0.95 - 0.12 * abs(math.log10(params["lr"] / 0.05))
                   - 0.0005 * (128 - params["hidden"]) + rng.normal(0, 0.01))
        history: list[dict[str, float]] = []
        state = TrialState.COMPLETE
        for epoch in range(1, epochs + 1):
            acc = float(quality * (1 - math.exp(-epoch / 1.5)))
            history.append({"epoch": epoch, "train_loss": 2.3 * (1 - acc),
                            "val_loss": 2.3 * (1 - acc) + 0.05, "val_accuracy": acc,
                            "n_params": float(n_params), "flops": float(2 * n_params)})
            if len(objectives) == 1:  # the driver reports only in single-objective studies
                trial.report(history[-1][objectives[0]], epoch)
                if trial.should_prune():
                    state = TrialState.PRUNED
                    break
        ranks = params["ranks"]
        wall = 0.5 + 0.4 * len(history) / ranks
        for key, value in {
            "ranks": ranks, "algorithm": params["algorithm"], "wall_time_s": wall,
            "train_time_s": wall - 0.3, "epochs_run": len(history),
            "samples_per_s": 1400.0 * len(history) / wall,
            "exit_reason": (f"pruned after epoch {len(history)}" if state == TrialState.PRUNED
                            else "completed all epochs"),
            "test_accuracy": history[-1]["val_accuracy"] - 0.01, "n_params": n_params,
            "flops": 2 * n_params, "launch_overhead_s": 0.4, "history": history,
            "counters": {"sent": 12, "accepted": 9} if params["algorithm"] == "asgd" else {},
        }.items():
            trial.set_user_attr(key, value)
        if state == TrialState.PRUNED:
            study.tell(trial, state=state)
        else:
            last = [history[-1][o] for o in objectives]
            study.tell(trial, last if len(last) > 1 else last[0])
    return study


def make_storage(path: Path) -> str:
    """A journal file with :data:`NB201`, :data:`MULTI`, :data:`OTHER_DATA`, :data:`TINY` and
    :data:`EMPTY`."""
    url = str(path)
    for i, name in enumerate(NB201):
        make_study(url, name, trials=10, family="cell", strategy=name.split("-")[1], seed=i)
    make_study(url, MULTI, trials=8, family="macro", objectives=("val_accuracy", "n_params"))
    make_study(url, OTHER_DATA, trials=4, dataset="mnist1d")
    tiny = optuna.create_study(study_name=TINY, storage=open_storage(url), direction="maximize")
    tiny.set_metric_names(["val_accuracy"])
    tiny.add_trial(optuna.trial.create_trial(
        value=0.5, intermediate_values={1: 0.4, 2: 0.5},
        user_attrs={"ranks": 2, "wall_time_s": 3.0, "epochs_run": 2,
                    "exit_reason": "completed all epochs"}))
    optuna.create_study(study_name=EMPTY, storage=open_storage(url))
    return url


_SHARED: dict[Path, str] = {}


def shared_storage(tmp_path_factory: pytest.TempPathFactory) -> str:
    """:func:`make_storage` once per test session (the tests that use it only read it)."""
    base = tmp_path_factory.getbasetemp()
    if base not in _SHARED:
        _SHARED[base] = make_storage(tmp_path_factory.mktemp("studies") / "studies.journal")
    return _SHARED[base]


# --- headless Chromium ---------------------------------------------------------------------------

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                  "--virtual-time-budget=30000"]


def chromium() -> str:
    found = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                  if shutil.which(n)), None)
    if not found:
        pytest.fail("headless Chromium is not installed (Debian: apt-get install chromium); "
                    ".ci/run installs it on a fresh machine")
    return found


def browse(page: Path, *args: str) -> str:
    """Open ``page`` in a fresh headless Chromium profile; its stdout (e.g. the DOM)."""
    with tempfile.TemporaryDirectory(prefix="detol-chromium-") as profile:
        proc = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args,
                               page.resolve().as_uri()],
                              capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def check_rendered(page: Path, screenshot: Path) -> int:
    """Every figure of the report rendered by plotly.js, no JavaScript error; returns how many.

    One browser run dumps the DOM after rendering and keeps a screenshot at ``screenshot``.
    """
    dom = browse(page, "--dump-dom", f"--screenshot={screenshot}", "--window-size=1280,5200")
    meta = re.search(r'<meta name="detol-figures" content="(\d+)">', dom)
    assert meta is not None, dom[:2000]
    expected = int(meta.group(1))
    errors = re.search(r'<pre id="js-errors">(.*?)</pre>', dom, re.S)
    assert errors is not None and errors.group(1).strip() == "", errors
    figure_divs = re.findall(r'<div id="figure-([a-z]+)" class="([^"]*)"', dom)
    assert len(figure_divs) == expected, figure_divs
    for key, classes in figure_divs:
        assert "js-plotly-plot" in classes, f"figure {key} was not drawn by plotly.js"
    assert dom.count('class="plot-container plotly"') == expected
    assert dom.count('class="main-svg"') >= expected
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert screenshot.stat().st_size > 50_000  # a blank page is a few kB
    return expected


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> str:
    return shared_storage(tmp_path_factory)


@pytest.fixture
def artifacts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """Where screenshots go: $DETOL_ARTIFACTS (CI keeps it) or the test's tmp dir."""
    where = Path(os.environ.get("DETOL_ARTIFACTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where






def _on_white(color: str, opacity: float) -> float:
    """WCAG contrast ratio of a line of ``color`` drawn with ``opacity`` on a white page."""
    rgb = [float(v) for v in re.findall(r"[\d.]+", color)[:3]]
    lin = []
    for v in rgb:
        c = (255 - opacity * (255 - v)) / 255  # composited over white
        lin.append(c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4)
    luminance = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    return 1.05 / (luminance + 0.05)


@pytest.mark.unit
@pytest.mark.parametrize("objective", ["val_accuracy", "val_loss"])  # maximised, minimised
def test_parallel_coordinates_draw_the_best_trials_dark(tmp_path: Path, objective: str) -> None:
    from search.analysis._figures import PARALLEL_SCALE, parallel_figure

    study = make_study(str(tmp_path / "p.journal"), "p", trials=16, objectives=(objective,),
                       seed=3)
    maximize = objective == "val_accuracy"
    fig = parallel_figure(study)
    lines = [t for t in fig.data if t.mode == "lines" and t.y is not None and len(t.y) > 1]
    assert len(lines) == len(study.get_trials(states=(TrialState.COMPLETE,)))
    # Optuna's first axis is the objective, scaled to [0, 1]; its label is (name, value).
    ranked = sorted(lines, key=lambda t: t.y[0] if maximize else -t.y[0])
    worst, best = ranked[0], ranked[-1]
    assert float(best.customdata[0][1]) == pytest.approx(study.best_value, rel=1e-2)
    # The chosen scale's best end, dark and saturated: #0d0887, drawn on top of the others.
    assert PARALLEL_SCALE[-1] == "#0d0887"
    assert best.line.color == "rgb(13, 8, 135)"
    assert lines[-1] is best
    assert _on_white(best.line.color, best.opacity) > 7  # 13.7; was rgb(247,251,255): 1.02
    assert _on_white(worst.line.color, worst.opacity) > 1.4  # the worst still shows
    bar = next(t for t in fig.data if t.marker is not None and t.marker.showscale)
    scale = [c for _, c in bar.marker.colorscale]
    at_best = scale[-1] if maximize != bool(bar.marker.reversescale) else scale[0]
    assert at_best == "#0d0887"  # the colour bar says the same


def _panels(page: str) -> dict[str, str]:
    """data-panel -> "figure", or the note that stands in for the figure."""
    found = {}
    for kind, key, body in re.findall(r'<section class="panel (figure|skipped)" '
                                      r'data-panel="([a-z]+)">(.*?)</section>', page, re.S):
        note = re.search(r"not drawn: (.*?)</p>", body, re.S)
        found[key] = "figure" if kind == "figure" else html.unescape(note.group(1) if note else "")
    return found


def test_report_of_a_topology_study_renders_every_figure(
        storage: str, tmp_path: Path, artifacts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "report.html"
    code, out, err = run_cli("report", "nb-tpe-0", "--storage", storage, "-o", str(page))
    assert code == 0, out + err
    assert out.startswith(f"wrote {page}: 7 figures\n")
    assert "not drawn" not in out
    assert ("note: Strategies compared: not compared (another objective, direction or dataset): "
            f"{OTHER_DATA} (dataset mnist1d), {EMPTY} (value, minimize)") in out
    text = page.read_text()
    # Self-contained: no script, style or image is fetched (plotly.js is inlined).
    markup = re.sub(r"<script[^>]*>.*?</script>", "", text, flags=re.S)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", markup)
    assert all("src=" not in attrs for attrs in re.findall(r"<script([^>]*)>", text))
    assert len(text) > 3_000_000  # plotly.js itself
    assert _panels(text) == dict.fromkeys(
        ["history", "curves", "parallel", "importance", "genome", "map", "compare"], "figure")
    assert "Best genome: trial" in text and "Strategies compared: 6 studies" in text
    shot = artifacts / "report-single-objective.png"
    assert check_rendered(page, shot) == 7
    with capsys.disabled():
        print(f"\nreport screenshot: {shot}")


def test_report_of_a_multi_objective_study_draws_the_pareto_front(
        storage: str, tmp_path: Path, artifacts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "multi.html"
    code, out, err = run_cli("report", MULTI, "--storage", storage, "-o", str(page), "--no-compare")
    assert code == 0, out + err
    text = page.read_text()
    assert _panels(text) == dict.fromkeys(
        ["history", "curves", "parallel", "importance", "pareto", "genome", "map"], "figure")
    shot = artifacts / "report-multi-objective.png"
    assert check_rendered(page, shot) == 7
    with capsys.disabled():
        print(f"\nreport screenshot: {shot}")


@pytest.mark.unit
def test_figures_that_cannot_be_drawn_leave_a_note(storage: str, tmp_path: Path) -> None:
    page = tmp_path / "tiny.html"
    code, out, err = run_cli("report", TINY, "--storage", storage, "-o", str(page),
                          "--compare", "nb-random-0")
    assert code == 0, out + err
    panels = _panels(page.read_text())
    assert panels["history"] == panels["curves"] == panels["compare"] == "figure"
    assert panels["parallel"] == "the study searches no parameters"
    assert panels["importance"].startswith("parameter importances need at least 2 complete "
                                           "trials and 1 searched parameter")
    assert "not drawn: Parameter importances: parameter importances need" in out
    assert panels["map"] == "a map needs at least 3 complete trials; this study has 1"

    code, out, err = run_cli("report", EMPTY, "--storage", storage, "-o", str(tmp_path / "e.html"),
                          "--no-compare")
    assert code == 0, out + err
    assert out.startswith(f"wrote {tmp_path / 'e.html'}: 0 figures")
    assert "no complete trial yet" in (tmp_path / "e.html").read_text()


@pytest.mark.unit
def test_default_output_is_named_after_the_study(
        storage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("report", "nb-random-1", "--storage", storage, "--compare",
                          "nb-tpe-1,nb-random-0", "--compare", OTHER_DATA)
    assert code == 0, out + err
    written = Path(storage).parent / "nb-random-1-report.html"  # beside the storage file
    text = written.read_text()
    assert list(tmp_path.iterdir()) == []  # nothing in the working directory
    written.unlink()
    assert "Strategies compared: 4 studies" in text  # named: another dataset is compared too


@pytest.mark.unit
@pytest.mark.parametrize(("args", "message"), [
    (["nope"], "error: study: no study 'nope' in {storage} (found: nb-"),
    (["nb-tpe-0", "--compare", "nope"], "error: compare: no study 'nope' in {storage}"),
    (["nb-tpe-0", "-o", "{tmp}/missing/r.html"], "error: output: cannot write {tmp}/missing/"
                                                  "r.html: directory '{tmp}/missing' does not "
                                                  "exist"),
    (["nb-tpe-0", "-o", "{tmp}"], "error: output: cannot write {tmp}: it is a directory"),
])
def test_bad_input_is_one_line_and_exit_2(storage: str, tmp_path: Path, args: list[str],
                                          message: str) -> None:
    argv = [a.format(tmp=tmp_path) for a in args]
    code, out, err = run_cli("report", *argv, "--storage", storage)
    assert code == 2
    assert err.startswith(message.format(storage=storage, tmp=tmp_path)), err
    assert len(err.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.html")) and not list(tmp_path.glob(".*tmp"))


@pytest.mark.unit
@pytest.mark.parametrize("storage_arg", ["{tmp}/none.journal", "bogus://x"])
def test_bad_storage_is_one_line_and_creates_nothing(tmp_path: Path, storage_arg: str) -> None:
    code, out, err = run_cli("report", "x", "--storage", storage_arg.format(tmp=tmp_path))
    assert code == 2
    assert err.startswith("error: storage: ") and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_the_error_hook_catches_javascript_errors(tmp_path: Path) -> None:
    """The negative control for check_rendered: an error on the page ends up in #js-errors."""
    from search.analysis._report import _ERROR_HOOK

    page = tmp_path / "broken.html"
    page.write_text(f"<!DOCTYPE html><html><head><script>{_ERROR_HOOK}</script>"
                    "<script>notDefinedAnywhere();</script></head><body>"
                    '<pre id="js-errors"></pre><script>Promise.reject("late");</script>'
                    "</body></html>")
    dom = browse(page, "--dump-dom")
    errors = re.search(r'<pre id="js-errors">(.*?)</pre>', dom, re.S)
    assert errors is not None
    assert "notDefinedAnywhere is not defined" in errors.group(1)
    assert "unhandled rejection: late" in errors.group(1)
