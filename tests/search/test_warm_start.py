"""Warm starts (``[strategy] warm_start``): sources are read, never written; their best
candidates run first, once, as marked trials of the new study that count toward its budget;
bad sources are one-line errors (exit 2) before anything is written."""

from __future__ import annotations

import hashlib
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from search._errors import StudyError
from search.driver import _warm_start as warm
from search.driver._study import open_study
from search.strategies._base import candidate_key, draw, uniform_choice
from search.studyfile._study_file import parse_study
from tests.cli_helpers import run_cli, run_search
from training.contract import open_storage

pytestmark = pytest.mark.timeout(120)

CELL = {"genome": {"family": "cell"}}


@pytest.fixture(autouse=True)
def _in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a default storage would land here, not in the repository


def _nb201(name: str, dataset: str = "cifar100", *, trials: int = 8, strategy: str = "random",
           warm_start: str | None = None, extra: str = "") -> str:
    ws = f"warm_start = {warm_start}\n" if warm_start is not None else ""
    return textwrap.dedent(f"""\
        name = "{name}"
        objective = "nb201:{dataset}"
        metric = "val_accuracy"
        pruner = "none"
        [budget]
        trials = {trials}
        [strategy]
        name = "{strategy}"
        seed = 3
        """) + ws + extra + '[space.genome]\nfamily = "cell"\n'


def _write(directory: Path, name: str, text: str) -> Path:
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


def _make_source(url: str | optuna.storages.BaseStorage, name: str, values: list[float], *,
                 seed: int = 0,
                 direction: str = "maximize", cells: list[dict[str, Any] | None] | None = None
                 ) -> list[dict[str, Any]]:
    """A finished study of distinct NB201 cells in ``url`` made with plain Optuna: trial i has
    value ``values[i]`` (and the cell ``cells[i]`` when given); returns the trials' params."""
    space = parse_study({"name": "x", "objective": "nb201:cifar10", "space": CELL}).search_space
    rng = np.random.default_rng(seed)
    storage = open_storage(url) if isinstance(url, str) else url
    study = optuna.create_study(study_name=name, storage=storage, direction=direction)
    out: list[dict[str, Any]] = []
    keys = set()
    for i, value in enumerate(values):
        rec = draw(space, uniform_choice, rng)
        while candidate_key(space, rec.params) in keys:  # distinct networks (none isomorphic)
            rec = draw(space, uniform_choice, rng)
        keys.add(candidate_key(space, rec.params))
        params = (cells[i] if cells and i < len(cells) else None) or rec.params
        study.add_trial(optuna.trial.create_trial(params=params, distributions=rec.distributions,
                                                  value=value))
        out.append(params)
    return out


def _study(url: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=open_storage(url))


def _transferred(study: optuna.Study) -> list[str]:
    return [t.user_attrs["transferred_from"] for t in study.get_trials(deepcopy=False)
            if "transferred_from" in t.user_attrs]


def _snapshot(url: str, name: str) -> list[Any]:
    s = _study(url, name)
    return [s.user_attrs, s._storage.get_study_system_attrs(s._study_id),  # noqa: SLF001
            [(t.number, t.state, t.values, t.params, t.user_attrs, t.system_attrs)
             for t in s.get_trials(deepcopy=False)]]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _error_line(code: int, stdout: str, stderr: str) -> str:
    assert code == 2, f"exit code {code}\nstdout: {stdout}\nstderr: {stderr}"
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), stderr
    return lines[0]


# --- the study file ---------------------------------------------------------------------------


@pytest.mark.unit
def test_study_file_names_sources_by_name_or_table() -> None:
    sf = parse_study({"name": "t", "objective": "nb201:cifar100", "space": CELL, "strategy": {
        "name": "evolution", "warm_start": ["a", {"study": "b", "storage": "x.journal"}],
        "warm_start_top": 3}})
    assert [(s.study, s.storage) for s in sf.strategy.warm_start or []] == [
        ("a", None), ("b", "x.journal")]
    assert sf.strategy.warm_start_top == 3


@pytest.mark.unit
@pytest.mark.parametrize(("strategy", "where", "expected"), [
    ({"warm_start": "a"}, "strategy.warm_start", "expected a list"),
    ({"warm_start": [3]}, "strategy.warm_start[0]", "expected a study name or a table"),
    ({"warm_start": [{"study": "a", "url": "x"}]}, "strategy.warm_start[0].url", "unknown key"),
    ({"warm_start": [{"storage": "x"}]}, "strategy.warm_start[0].study", "required"),
    ({"warm_start": ["a b"]}, "strategy.warm_start[0].study", "not a study name"),
    ({"warm_start": ["a", "a"]}, "strategy.warm_start[1]", "named twice"),
    ({"warm_start": ["t"]}, "strategy.warm_start[0]", "this study itself"),
    ({"warm_start": [{"study": "a", "storage": " "}]}, "strategy.warm_start[0].storage",
     "must not be empty"),
    ({"warm_start_top": 2}, "strategy.warm_start_top", "only with warm_start"),
    ({"warm_start": ["a"], "warm_start_top": -1}, "strategy.warm_start_top",
     "greater than or equal to 0"),
])
def test_bad_warm_start_is_one_error_naming_the_field(
    strategy: dict[str, Any], where: str, expected: str
) -> None:
    with pytest.raises(StudyError) as exc:
        parse_study({"name": "t", "objective": "nb201:cifar100", "space": CELL,
                     "strategy": {"name": "tpe", **strategy}})
    assert len(exc.value.errors) == 1
    assert exc.value.where == where and expected in exc.value.message, str(exc.value)


@pytest.mark.unit
def test_stored_study_form_hides_a_source_password() -> None:
    sf = parse_study({"name": "t", "objective": "nb201:cifar100", "space": CELL, "strategy": {
        "name": "tpe", "warm_start": [{"study": "a", "storage": "postgresql://u:pw@h/db"}]}})
    assert "pw@" not in sf.model_dump_json() and "u:***@h" in sf.model_dump_json()


# --- bad sources: exit 2, one line, nothing written -------------------------------------------


@pytest.mark.unit
def test_unknown_source_names_it_and_lists_the_studies_there(tmp_path: Path) -> None:
    url = str(tmp_path / "s.journal")
    _make_source(url, "c10", [90.0, 91.0])
    _make_source(url, "other", [1.0], seed=1)
    path = _write(tmp_path, "t", _nb201("t", warm_start='["c1O"]'))
    line = _error_line(*run_cli("run", str(path), "--storage", url, "--no-progress"))
    assert "strategy.warm_start[0]" in line and "'c1O'" in line and "c10, other" in line
    assert sorted(optuna.get_all_study_names(open_storage(url))) == ["c10", "other"]


@pytest.mark.unit
def test_source_with_nothing_in_common_is_an_error_naming_it(tmp_path: Path) -> None:
    url = str(tmp_path / "s.journal")
    flat = optuna.create_study(study_name="flat", storage=open_storage(url))
    flat.add_trial(optuna.trial.create_trial(
        params={"lr": 0.1}, distributions={"lr": optuna.distributions.FloatDistribution(0, 1)},
        value=0.5))
    path = _write(tmp_path, "t", _nb201("t", warm_start='["flat"]'))
    line = _error_line(*run_cli("run", str(path), "--storage", url, "--no-progress"))
    assert "'flat'" in line and "nothing in common" in line and "'cell' family" in line
    assert optuna.get_all_study_names(open_storage(url)) == ["flat"]


@pytest.mark.unit
def test_missing_source_storage_file_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    url = str(tmp_path / "s.journal")
    gone = tmp_path / "gone.journal"
    path = _write(tmp_path, "t", _nb201(
        "t", warm_start=f'[{{ study = "c10", storage = "{gone}" }}]'))
    line = _error_line(*run_cli("run", str(path), "--storage", url, "--no-progress"))
    assert "strategy.warm_start[0].storage" in line and "gone.journal" in line
    assert not gone.exists() and not Path(url).exists()


@pytest.mark.unit
def test_source_in_another_storage_equal_to_the_study_itself_is_an_error(tmp_path: Path) -> None:
    url = str(tmp_path / "s.journal")
    _make_source(url, "t", [90.0])
    path = _write(tmp_path, "t", _nb201("t", warm_start=f'[{{ study = "t", storage = "{url}" }}]'))
    before = _digest(Path(url))
    line = _error_line(*run_cli("run", str(path), "--storage", url, "--no-progress"))
    assert "this study itself" in line
    assert _digest(Path(url)) == before


@pytest.mark.unit
def test_source_without_complete_trials_is_an_error(tmp_path: Path) -> None:
    url = str(tmp_path / "s.journal")
    optuna.create_study(study_name="empty", storage=open_storage(url))
    path = _write(tmp_path, "t", _nb201("t", warm_start='["empty"]'))
    line = _error_line(*run_cli("run", str(path), "--storage", url, "--no-progress"))
    assert "'empty'" in line and "no complete trial" in line


# --- what a warm start does -------------------------------------------------------------------


def test_best_source_cells_run_first_once_marked_and_counted(tmp_path: Path) -> None:
    url = str(tmp_path / "s.journal")
    values = [80.0, 91.0, 85.0, 90.5, 70.0, 89.0, 60.0]
    cells = _make_source(url, "c10", values)
    before = _snapshot(url, "c10")
    path = _write(tmp_path, "t", _nb201("t", trials=6, warm_start='["c10"]',
                                        extra="warm_start_top = 3\n"))
    code, out, err = run_cli("run", str(path), "--storage", url, "--no-progress")
    assert code == 0, out + err
    study = _study(url, "t")
    trials = study.get_trials(deepcopy=False)
    # the source's three best (trials 1, 3, 5), best first, are the study's first three trials
    assert _transferred(study) == ["c10#1", "c10#3", "c10#5"]
    for t, number in zip(trials[:3], (1, 3, 5), strict=True):
        assert t.state == TrialState.COMPLETE and t.params == cells[number]
        assert 0 < t.values[0] <= 100  # evaluated on CIFAR-100 by the table, not copied
    assert len(trials) == 6  # they count toward budget.trials = 6: three more, not six
    assert all("transferred_from" not in t.user_attrs for t in trials[3:])
    assert _snapshot(url, "c10") == before  # the source is untouched
    # resume with a larger budget: nothing is enqueued again
    code, out, err = run_cli("run", str(path), "--storage", url, "--no-progress", "--trials", "9")
    assert code == 0, out + err
    study = _study(url, "t")
    assert len(study.trials) == 9 and _transferred(study) == ["c10#1", "c10#3", "c10#5"]
    assert _snapshot(url, "c10") == before


def test_candidates_queued_twice_by_two_drivers_run_once(tmp_path: Path) -> None:
    """Two drivers that open the new study at the same moment both pass the "not warm-started
    yet" check and both queue the candidates. Each candidate still runs once: the later copy
    is told FAIL as a duplicate when taken from the queue, counts neither toward the budget nor
    toward budget.max_failures, and the study ends with its budget."""
    url = str(tmp_path / "s.journal")
    _make_source(url, "c10", [80.0, 91.0, 85.0, 90.5, 70.0])
    text = _nb201("t", trials=5, warm_start='["c10"]', extra="warm_start_top = 3\n")
    path = _write(tmp_path, "t", text.replace("trials = 5\n", "trials = 5\nmax_failures = 1\n"))
    sf = parse_study(tomllib.loads(path.read_text()))
    storage = open_storage(url)
    sources = warm.load_sources(sf, storage=storage, url=url)
    study = open_study(sf, storage, sources=sources)  # the first driver queues three
    for params, label in warm.candidates(sources, sf.search_space, 3, set()):
        study.enqueue_trial(params, user_attrs={warm.TRANSFERRED_FROM: label})  # the second
    assert _transferred(study) == ["c10#1", "c10#3", "c10#2"] * 2
    code, out, err = run_cli("run", str(path), "--storage", url, "--no-progress")
    assert code == 0, out + err
    trials = _study(url, "t").get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    duplicates = [t for t in trials if t.state == TrialState.FAIL]
    assert len(complete) == 5  # the budget, in configurations that ran
    assert [t.user_attrs.get("transferred_from") for t in complete[:3]] == [
        "c10#1", "c10#3", "c10#2"]
    assert [t.number for t in duplicates] == [3, 4, 5]
    for t, first in zip(duplicates, (0, 1, 2), strict=True):
        assert t.user_attrs["exit_reason"].startswith(f"duplicate of trial {first}:")
        assert "sim_clock_s" not in t.user_attrs  # never ran (a table answer sets it)


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_source_in_another_storage_is_byte_identical_afterwards(tmp_path: Path, kind: str) -> None:
    source = tmp_path / ("src.journal" if kind == "journal" else "src.db")
    src_url = str(source) if kind == "journal" else f"sqlite:///{source}"
    _make_source(src_url, "c10", [90.0, 91.0, 89.5])
    digest = _digest(source)
    path = _write(tmp_path, "t", _nb201(
        "t", trials=4, warm_start=f'[{{ study = "c10", storage = "{src_url}" }}]'))
    url = str(tmp_path / "new.journal")
    code, out, err = run_cli("run", str(path), "--storage", url, "--no-progress")
    assert code == 0, out + err
    assert _transferred(_study(url, "t")) == ["c10#1", "c10#0", "c10#2"]
    assert _digest(source) == digest
    assert "t" not in optuna.get_all_study_names(open_storage(src_url))


def test_source_on_postgresql_is_read_not_written(tmp_path: Path, postgres_url: str) -> None:
    name = f"c10-{tmp_path.name}"[:60]  # the server is shared by the session's tests
    _make_source(postgres_url, name, [90.0, 91.0, 89.5])
    before = _snapshot(postgres_url, name)
    studies = sorted(optuna.get_all_study_names(open_storage(postgres_url)))
    path = _write(tmp_path, "t", _nb201(
        "t", trials=3, warm_start=f'[{{ study = "{name}", storage = "{postgres_url}" }}]'))
    url = str(tmp_path / "new.journal")
    code, out, err = run_cli("run", str(path), "--storage", url, "--no-progress")
    assert code == 0, out + err
    assert _transferred(_study(url, "t")) == [f"{name}#1", f"{name}#0", f"{name}#2"]
    assert _snapshot(postgres_url, name) == before
    assert sorted(optuna.get_all_study_names(open_storage(postgres_url))) == studies
    stored = _study(url, "t").user_attrs["detol:study"]["strategy"]["warm_start"]
    assert "pg-secret" not in str(stored)  # the stored study form holds no password


def test_several_sources_rank_by_quantile_and_a_cell_runs_once(tmp_path: Path) -> None:
    url = str(tmp_path / "s.journal")
    a = _make_source(url, "a", [50.0, 40.0, 30.0, 20.0], seed=1)
    # b's best is a's best (the same cell): it runs once; b ranks its trials by its own values,
    # which are on another scale (a minimised loss): quantiles, not values, compare sources.
    _make_source(url, "b", [0.9, 0.1, 0.5], seed=2, direction="minimize", cells=[None, a[0]])
    path = _write(tmp_path, "t", _nb201("t", trials=4, warm_start='["a", "b"]'))
    code, out, err = run_cli("run", str(path), "--storage", url, "--no-progress")
    assert code == 0, out + err
    # quantiles: a#0 1, b#1 1 (= a#0's cell), a#1 2/3, b#2 1/2, a#2 1/3, b#0 0, a#3 0
    assert _transferred(_study(url, "t")) == ["a#0", "a#1", "b#2", "a#2"]


def test_params_are_restricted_to_this_space_and_the_rest_is_drawn(tmp_path: Path) -> None:
    (tmp_path / "quad.py").write_text(
        "def objective(params):\n    return (params['x'] - .3) ** 2 + params['z']\n")
    url = str(tmp_path / "s.journal")
    dist = optuna.distributions.FloatDistribution(0, 1)
    src = optuna.create_study(study_name="old", storage=open_storage(url))
    for x, y, v in ((0.3, 0.5, 0.1), (0.9, 0.2, 0.2), (2.0, 0.1, 0.0)):
        big = optuna.distributions.FloatDistribution(0, 5)
        src.add_trial(optuna.trial.create_trial(params={"x": x, "y": y}, value=v,
                                                distributions={"x": big, "y": dist}))
    path = _write(tmp_path, "q", textwrap.dedent("""\
        name = "q"
        objective = "quad:objective"
        metric = "loss"
        direction = "minimize"
        pruner = "none"
        [strategy]
        name = "tpe"
        seed = 1
        warm_start = ["old"]
        [budget]
        trials = 3
        [space]
        x = { type = "float", low = 0, high = 1 }
        z = { type = "categorical", choices = [0, 1] }
        """))
    code, out, err = run_search("run", str(path), "--storage", url, "--no-progress",
                                cwd=tmp_path)
    assert code == 0, out + err
    trials = _study(url, "q").trials
    # x = 2.0 lies outside this study's x: its trial (the source's best) carries nothing over,
    # y is not a dimension here, z is drawn by the sampler
    assert _transferred(_study(url, "q")) == ["old#0", "old#1"]
    assert [t.params["x"] for t in trials[:2]] == [0.3, 0.9]
    assert all("y" not in t.params and t.params["z"] in (0, 1) for t in trials)


@pytest.mark.unit
@pytest.mark.parametrize("strategy", ["random", "tpe", "evolution", "reinforce", "gp"])
def test_every_strategy_starts_from_the_transferred_cells(strategy: str) -> None:
    storage = optuna.storages.InMemoryStorage()
    _make_source(storage, "c10", [float(i) for i in range(6)])
    src = optuna.load_study(study_name="c10", storage=storage)
    sf = parse_study({"name": "t", "objective": "nb201:cifar100", "space": CELL,
                      "pruner": "none", "budget": {"trials": 12},
                      "strategy": {"name": strategy, "seed": 0, "warm_start": ["c10"],
                                   "warm_start_top": 2}})
    study = open_study(sf, storage)
    from search.simulated._nb201 import evaluate
    for _ in range(4):
        trial = study.ask()
        params = sf.search_space.suggest(trial)
        study.tell(trial, evaluate(params, dataset="cifar100", noise_seed=0)["values"][
            "val_accuracy"])
    trials = study.get_trials(deepcopy=False)
    assert _transferred(study) == ["c10#5", "c10#4"]
    assert [t.params for t in trials[:2]] == [src.trials[5].params, src.trials[4].params]
    keys = {candidate_key(sf.search_space, t.params) for t in trials}
    assert len(keys) == 4  # the strategy proposes neither transferred cell again
    assert len(src.trials) == 6 and all(t.state == TrialState.COMPLETE for t in src.trials)
    open_study(sf, storage)  # opened again (a resume): nothing enqueued twice
    assert _transferred(study) == ["c10#5", "c10#4"]


@pytest.mark.unit
def test_rank_quantiles_are_per_source_and_direction_aware() -> None:
    assert warm.rank_quantiles([0.2, 0.1, 0.1, 0.9], maximize=False).tolist() == [
        pytest.approx(1 / 3), pytest.approx(5 / 6), pytest.approx(5 / 6), 0.0]
    assert warm.rank_quantiles([5.0], maximize=True).tolist() == [1.0]


def _first_proposal(storage: optuna.storages.BaseStorage, name: str,
                    warm_start: list[str] | None) -> tuple[optuna.Study, dict[str, Any]]:
    strategy: dict[str, Any] = {"name": "predictor", "seed": 0}
    if warm_start is not None:
        strategy |= {"warm_start": warm_start, "warm_start_top": 0}
    sf = parse_study({"name": name, "objective": "nb201:cifar100", "space": CELL,
                      "pruner": "none", "strategy": strategy})
    study = open_study(sf, storage)
    trial = study.ask()
    sf.search_space.suggest(trial)
    return study, trial.params


@pytest.mark.unit
def test_predictor_learns_from_every_source_trial() -> None:
    from search.simulated._nb201 import mean_accuracy, table_key
    from search.strategies import PredictorSampler

    storage = optuna.storages.InMemoryStorage()
    space = parse_study({"name": "x", "objective": "nb201:cifar10", "space": CELL}).search_space
    rng = np.random.default_rng(4)
    cells = [draw(space, uniform_choice, rng).params for _ in range(40)]
    # the source: CIFAR-10 seed-mean accuracies of 40 random cells (a minimised error, to
    # check that ranks follow the source's direction)
    errors = [100 - mean_accuracy(table_key(space["genome"].from_params(c)), "cifar10")
              for c in cells]
    _make_source(storage, "c10", errors, direction="minimize", cells=list(cells))
    cold, cold_params = _first_proposal(storage, "cold", None)
    study, params = _first_proposal(storage, "warm", ["c10"])
    assert isinstance(study.sampler, PredictorSampler)
    assert _transferred(study) == []  # warm_start_top = 0: nothing enqueued, only the prior
    prior = study.sampler._prior  # noqa: SLF001 - what set_prior kept
    assert prior is not None and len(prior[0]) == 40
    assert params != cold_params  # the first ask is no longer a uniform draw ...
    first = mean_accuracy(table_key(space["genome"].from_params(params)), "cifar100")
    ranks = [mean_accuracy(table_key(space["genome"].from_params(c)), "cifar100") for c in cells]
    assert first > np.median(ranks)  # ... but a cell the source says is good
