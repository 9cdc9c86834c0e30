"""Learning-curve tables (search.simulated._curves) replayed through the real driver on the
simulated clock: each trial is its nearest recorded configuration, its epochs reported when
their recorded seconds end; a pausing pruner pauses and the driver's own promotion continues
the trial from its epoch, paying only the epochs after it; budget.timeout is simulated time."""

from __future__ import annotations

import gzip
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from distributed import Client
from optuna.distributions import (
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
    distribution_to_json,
)
from optuna.trial import TrialState

from search import Driver, open_study, parse_study
from search.pruners._promotion import PAUSED_ATTR, RESUME_OF_ATTR
from search.simulated._curves import (
    _Index,
    append_chunk,
    check_name,
    evaluate,
    load_table,
    write_header,
)

X = FloatDistribution(1e-3, 1.0, log=True)
KIND = CategoricalDistribution(["a", "b"])
DEPTH = IntDistribution(1, 3)


def _table(path: Path, rows: list[dict[str, Any]], epochs: int = 4,
           direction: str = "maximize") -> str:
    # (a function objective: its [space] names are free, as a plug-in model's are)
    study = ('name = "t"\nobjective = "builtins:print"\n[space]\n'
             'x = { type = "float", low = 0.001, high = 1.0, log = true }\n'
             'kind = { type = "categorical", choices = ["a", "b"] }\n')
    write_header(str(path), name="t", metric="val_accuracy", direction=direction,
                 epochs=epochs, study=study)
    append_chunk(str(path), {"chunk": 0, "distributions": {
        "x": distribution_to_json(X), "kind": distribution_to_json(KIND)}}, rows)
    return str(path)


def _row(i: int, x: float, kind: str, curve: list[float], epoch_s: list[float],
         start_s: float = 0.5, state: str = "complete", cold: bool = False) -> dict[str, Any]:
    return {"trial": i, "params": {"x": x, "kind": kind}, "state": state, "curve": curve,
            "epoch_s": epoch_s, "start_s": start_s, "cold": cold}


@pytest.mark.unit
def test_a_table_reads_back_and_a_cold_start_is_the_warm_median(tmp_path: Path) -> None:
    path = _table(tmp_path / "t.jsonl.gz", [
        _row(0, 0.01, "a", [0.1, 0.2], [1.0, 1.0], start_s=9.0, cold=True),
        _row(1, 0.1, "b", [0.3, 0.4], [2.0, 2.0], start_s=0.4),
        _row(2, 0.5, "a", [0.5], [1.0], start_s=0.6, state="failed")])
    t = load_table(path)
    assert (t.configs, t.epochs, t.maximize) == (3, 4, True)
    assert t.curves == [[0.1, 0.2], [0.3, 0.4], [0.5]] and t.epoch_s[1] == [2.0, 2.0]
    assert t.start_s == [0.6, 0.4, 0.6]  # the pool's 9 s start is not a trial's
    assert t.states == ["complete", "complete", "failed"]
    assert set(t.distributions) == {"x", "kind"}


@pytest.mark.unit
def test_a_damaged_or_foreign_table_is_one_line_naming_the_file(tmp_path: Path) -> None:
    torn = tmp_path / "torn.jsonl.gz"
    whole = gzip.compress(b'{"format": "detol-curves/1"}\n')
    torn.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ValueError, match=f"^{torn}: not a readable detol-curves/1 table"):
        load_table(str(torn))
    foreign = tmp_path / "foreign.jsonl.gz"
    foreign.write_bytes(gzip.compress(b'{"name": "x"}\n'))
    with pytest.raises(ValueError, match=f"^{foreign}: not a detol-curves/1 table"):
        load_table(str(foreign))
    with pytest.raises(ValueError, match="no learning-curve table"):
        check_name(str(tmp_path / "missing.jsonl.gz"))


@pytest.mark.unit
def test_the_nearest_configuration_scales_logs_and_counts_choices_and_absences(
        tmp_path: Path) -> None:
    path = _table(tmp_path / "n.jsonl.gz", [
        _row(0, 0.001, "a", [0.1], [1.0]),
        _row(1, 0.01, "b", [0.2], [1.0]),
        _row(2, 1.0, "a", [0.3], [1.0])])
    index = _Index(load_table(path))
    assert index.nearest({"x": 0.002, "kind": "a"}) == 0
    assert index.nearest({"x": 0.05, "kind": "a"}) == 2  # log scale: 0.05 nearer 1.0 than 0.001
    # another choice counts as much as a number's whole range: a third of it is nearer
    assert index.nearest({"x": 0.01, "kind": "a"}) == 0
    assert index.nearest({"x": 0.001, "kind": "b"}) == 1  # a third of the range + same choice
    # a parameter the query lacks (a conditional one) counts 1 against every row alike
    assert index.nearest({"kind": "b"}) == 1


@pytest.mark.unit
def test_a_diverged_row_raises_with_what_it_did(tmp_path: Path) -> None:
    path = _table(tmp_path / "d.jsonl.gz", [
        _row(0, 0.1, "a", [0.5, 0.1], [1.0, 2.0], start_s=0.5, state="failed")])
    with pytest.raises(RuntimeError, match="row 0 failed after 2 of 4 epochs") as err:
        evaluate({}, dataset=path, noise_seed=0, trial_params={"x": 0.1, "kind": "a"})
    assert err.value.partial["sim_time_s"] == 3.5  # type: ignore[attr-defined]
    assert err.value.partial["curve"] == [0.5, 0.1]  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with Client(processes=False, n_workers=1, threads_per_worker=2,
                dashboard_address=None) as c:
        yield c


def _replay(client: Client, path: str, *, pruner: dict[str, Any], concurrency: int,
            trials: int = 1000, timeout: float | None = None) -> tuple[optuna.Study, Driver]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sf = parse_study({
        "name": "replay", "objective": f"curves:{path}", "metric": "val_accuracy",
        "direction": "maximize", "pruner": pruner, "strategy": {"name": "random", "seed": 3},
        "budget": {"trials": trials, "concurrency": concurrency, "timeout": timeout},
        "training": {"epochs": 4},
        "space": {"x": {"type": "float", "low": 1e-3, "high": 1.0, "log": True},
                  "kind": {"type": "categorical", "choices": ["a", "b"]}}})
    study = open_study(sf, optuna.storages.InMemoryStorage())
    driver = Driver(sf, study, client, storage_url="")
    driver.run(trials=trials, concurrency=concurrency, timeout=timeout)
    return study, driver


def _grid(path: Path) -> str:
    """Eight configurations, four epochs each; epoch k of row i takes (i + 1) * k / 10 s."""
    rows = []
    for i, (x, kind) in enumerate(itertools.product([0.001, 0.01, 0.1, 1.0], ["a", "b"])):
        quality = i / 8
        rows.append(_row(i, x, kind, [quality * (k + 1) / 4 for k in range(4)],
                         [(i + 1) * (k + 1) / 10 for k in range(4)], start_s=0.25))
    return _table(path, rows)


def test_epochs_are_reported_when_their_recorded_seconds_end(
        client: Client, tmp_path: Path) -> None:
    path = _grid(tmp_path / "g.jsonl.gz")
    table = load_table(path)
    study, driver = _replay(client, path, pruner={"name": "none"}, concurrency=1, trials=5)
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    assert all(t.state == TrialState.COMPLETE for t in trials.values())
    for at, number, epoch, value in driver.events.reports:
        t = trials[number]
        row = t.user_attrs["curves_row"]
        assert value == table.curves[row][epoch - 1] == t.intermediate_values[epoch]
        expected = t.user_attrs["sim_start_s"] + 0.25 + sum(table.epoch_s[row][:epoch])
        assert at == pytest.approx(expected)
    for t in trials.values():  # a trial ends at its last epoch's end, one after another
        row = t.user_attrs["curves_row"]
        assert t.user_attrs["sim_clock_s"] - t.user_attrs["sim_start_s"] == pytest.approx(
            0.25 + sum(table.epoch_s[row]))
        assert t.value == table.curves[row][-1]


def test_a_paused_trial_is_promoted_and_trains_only_the_epochs_after_its_pause(
        client: Client, tmp_path: Path) -> None:
    path = _grid(tmp_path / "p.jsonl.gz")
    table = load_table(path)
    study, driver = _replay(client, path, pruner={
        "name": "asha", "promote": True, "min_epochs": 1, "reduction_factor": 2},
        concurrency=2, trials=8)
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    paused = [t for t in trials.values() if PAUSED_ATTR in t.user_attrs]
    continued = [t for t in trials.values() if RESUME_OF_ATTR in t.user_attrs]
    assert paused and continued
    for child in continued:
        parent = trials[int(child.user_attrs[RESUME_OF_ATTR])]
        at = int(parent.user_attrs[PAUSED_ATTR])
        row = child.user_attrs["curves_row"]
        assert parent.user_attrs["curves_row"] == row
        # its curve is whole (the parent's epochs carried over) ...
        assert [child.intermediate_values[k] for k in range(1, at + 1)] == table.curves[row][:at]
        # ... and only the epochs after the pause were trained, at their recorded seconds
        own = [(t, e) for t, n, e, _ in driver.events.reports if n == child.number]
        assert [e for _, e in own] == list(range(at + 1, at + 1 + len(own)))
        start = child.user_attrs["sim_start_s"]
        for t, e in own:
            assert t == pytest.approx(start + 0.25 + sum(table.epoch_s[row][at:e]))


def test_the_budget_timeout_is_simulated_seconds(client: Client, tmp_path: Path) -> None:
    path = _grid(tmp_path / "b.jsonl.gz")
    study, driver = _replay(client, path, pruner={"name": "none"}, concurrency=2, timeout=12.0)
    starts = [t.user_attrs["sim_start_s"] for t in study.get_trials(deepcopy=False)]
    assert max(starts) <= 12.0 < driver.sim_clock  # none started after it; those running end
    assert len(starts) >= 4


@pytest.mark.unit
def test_a_study_must_search_the_space_the_table_was_recorded_with(tmp_path: Path) -> None:
    from search._errors import StudyError

    path = _grid(tmp_path / "s.jsonl.gz")
    base = {"name": "replay", "objective": f"curves:{path}", "metric": "val_accuracy",
            "direction": "maximize", "training": {"epochs": 4},
            "space": {"x": {"type": "float", "low": 1e-3, "high": 1.0, "log": True},
                      "kind": {"type": "categorical", "choices": ["a", "b"]}}}
    parse_study(base)  # the recorded space: fine
    other = {**base, "space": {**base["space"], "x": {"type": "float", "low": 1e-3,
                                                      "high": 1.0}}}
    with pytest.raises(StudyError, match=r"space: must be the space the table was recorded "
                                         r"with .*differs in x"):
        parse_study(other)
    fewer = {**base, "space": {"x": base["space"]["x"]}}
    with pytest.raises(StudyError, match="differs in kind"):
        parse_study(fewer)
