"""The simulated sweep (search.simulated._clock, search.simulated._workload) through the real
driver: seeded and deterministic, faults handled as the real driver handles them, pruning frees
workers early, the driver's own work charged as a serial server, utilisation computed right."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import optuna
import pytest
from distributed import Client
from optuna.trial import FrozenTrial, TrialState

from search import Driver, open_study, parse_study
from search._errors import StudyError
from search.driver._study import RETRY_ATTR
from search.simulated._clock import SimClock, driver_bound, max_workers, utilisation
from search.simulated._workload import evaluate, parse


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with Client(processes=False, n_workers=1, threads_per_worker=2,
                dashboard_address=None) as c:
        yield c


def _study(workload: str, *, trials: int, concurrency: int, pruner: Any = "none",
           strategy: str = "random", seed: int = 5, retries: int = 2) -> dict[str, Any]:
    return {
        "name": "sim", "objective": f"simulated:{workload}", "metric": "loss",
        "direction": "minimize", "pruner": pruner, "strategy": {"name": strategy, "seed": seed},
        "budget": {"trials": trials, "concurrency": concurrency, "max_failures": 1000,
                   "max_retries": retries},
        "space": {"x": {"type": "float", "low": 0, "high": 1},
                  "y": {"type": "float", "low": 0, "high": 1}},
    }


def _sweep(client: Client, study_dict: dict[str, Any], service: float | str = 0.0,
           ) -> tuple[list[FrozenTrial], SimClock]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sf = parse_study(study_dict)
    study = open_study(sf, optuna.storages.InMemoryStorage())
    clock = SimClock(service=service)
    budget = study_dict["budget"]
    Driver(sf, study, client, storage_url="", clock=clock).run(
        trials=budget["trials"], concurrency=budget["concurrency"], timeout=None)
    return study.get_trials(deepcopy=False), clock


def _record(trials: list[FrozenTrial]) -> list[tuple[Any, ...]]:
    return [(t.number, t.state, t.params, t.value, t.user_attrs.get("sim_start_s"),
             t.user_attrs.get("sim_clock_s"), t.user_attrs.get("exit_reason"),
             dict(t.intermediate_values)) for t in trials]


ASHA = {"name": "asha", "min_epochs": 1, "reduction_factor": 3}


def test_a_sweep_is_the_same_for_a_seed_and_differs_for_another(client: Client) -> None:
    study = _study("sweep,fail=0.1,lost=0.1", trials=40, concurrency=8, pruner=ASHA,
                   strategy="evolution")
    first, _ = _sweep(client, study, service=0.01)
    again, _ = _sweep(client, study, service=0.01)
    assert _record(first) == _record(again)
    states = {t.state for t in first}
    assert {TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL} <= states
    other, _ = _sweep(client, {**study, "strategy": {"name": "evolution", "seed": 6}},
                      service=0.01)
    assert _record(other) != _record(first)


def test_lost_workers_are_requeued_and_failures_are_not(client: Client) -> None:
    trials, _ = _sweep(client, _study("steady,fail=0.25,lost=0.25", trials=30, concurrency=4,
                                      retries=1))
    by_number = {t.number: t for t in trials}
    lost = [t for t in trials if "Dask worker lost: KilledWorker" in t.user_attrs["exit_reason"]]
    raised = [t for t in trials if "SimulatedFailure" in t.user_attrs["exit_reason"]]
    assert lost and raised
    assert all(t.state == TrialState.FAIL for t in lost + raised)
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    for t in lost:
        # The worker vanished partway: its time until then counts, and the driver re-queued its
        # parameters exactly as for a real KilledWorker (search.driver._study.requeue).
        assert 0 < t.user_attrs["sim_time_s"] < 600
        reason = t.user_attrs["exit_reason"]
        if "re-queued" in reason:
            retry = next(r for r in trials if r.user_attrs.get(RETRY_ATTR) == t.number)
            assert retry.params == t.params and retry.number > t.number
        else:
            assert "not re-queued (attempt 2, budget.max_retries=1)" in reason
            assert by_number[t.user_attrs[RETRY_ATTR]].params == t.params
    for t in raised:  # the objective's own error: failed, not retried
        assert "re-queued" not in t.user_attrs["exit_reason"]
        assert 0 < t.user_attrs["sim_time_s"] < 600
        assert not [r for r in trials if r.user_attrs.get(RETRY_ATTR) == t.number]
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 30 and all(t.user_attrs["sim_time_s"] == 600 for t in complete)


def test_a_pruned_trial_frees_its_worker_at_its_epoch(client: Client) -> None:
    # Every trial takes 600 s over 20 epochs (30 s each); ASHA judges each epoch's report.
    trials, _ = _sweep(client, _study("steady", trials=30, concurrency=3, pruner=ASHA))
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert pruned and len(pruned) < len(trials)
    starts = sorted(t.user_attrs["sim_start_s"] for t in trials)
    for t in pruned:
        step = max(t.intermediate_values)
        assert step in (1, 3, 9)  # ASHA's rungs (min 1 epoch, eta 3)
        assert t.user_attrs["sim_time_s"] == pytest.approx(30 * step)
        end = t.user_attrs["sim_start_s"] + 30 * step
        assert t.user_attrs["sim_clock_s"] == pytest.approx(end)
        # Its worker took the next trial at once (no driver cost on this clock), not at 600 s
        # (until the budget was spent: no trial starts after the last start).
        if end <= starts[-1] + 1e-9:
            assert any(s == pytest.approx(end) for s in starts)
    assert sum(any(s == pytest.approx(t.user_attrs["sim_clock_s"]) for s in starts)
               for t in pruned) >= len(pruned) // 2
    for t in trials:
        if t.state == TrialState.COMPLETE:
            assert sorted(t.intermediate_values) == list(range(1, 21))


def test_the_driver_is_a_serial_server_and_utilisation_is_counted_by_hand(
    client: Client,
) -> None:
    # 2 workers, 4 trials of 600 s, 1 s of driver work per trial (charged at submit):
    # starts 1, 2 (the driver serves one at a time), then 601 + 1 and 602 + 1; ends 1202, 1203.
    trials, clock = _sweep(client, _study("steady", trials=4, concurrency=2), service=1.0)
    starts = sorted(t.user_attrs["sim_start_s"] for t in trials)
    assert starts == pytest.approx([1, 2, 602, 603])
    spans = [(t.user_attrs["sim_start_s"], t.user_attrs["sim_start_s"]
              + t.user_attrs["sim_time_s"]) for t in trials]
    assert max(t.user_attrs["sim_clock_s"] for t in trials) == pytest.approx(1203)
    assert clock.work_s == pytest.approx(4.0) and clock.served == 4
    assert utilisation(spans, 2, 0, 1203) == pytest.approx(2400 / 2406)
    assert utilisation(spans, 2, 600, 700) == pytest.approx((100 + 100 - 1 - 1) / 200)


def test_measured_service_charges_real_driver_work(client: Client) -> None:
    trials, clock = _sweep(client, _study("steady", trials=6, concurrency=3), "measured")
    assert clock.work_s > 0 and clock.served == 6
    starts = sorted(t.user_attrs["sim_start_s"] for t in trials)
    assert 0 < starts[0] < starts[1] < starts[2] < 1  # the first fill, one after another
    assert clock.now() > 1200


@pytest.mark.unit
def test_the_model_of_one_serial_driver() -> None:
    # Far below the knee: each trial waits only its own service; far past it: W s per cycle.
    assert driver_bound(8, 600.0, 1.0) == pytest.approx(600 / 601, rel=1e-3)
    assert driver_bound(4096, 600.0, 1.0) == pytest.approx(600 / 4096, rel=1e-3)
    w = max_workers(600.0, 0.01)
    assert driver_bound(w, 600.0, 0.01) >= 0.95 > driver_bound(w + 1, 600.0, 0.01)
    assert w == pytest.approx(600 / (0.95 * 0.01), rel=0.01)


@pytest.mark.unit
def test_workload_draws_are_seeded_and_shaped() -> None:
    a = evaluate({"x": 0.3}, dataset="sweep", noise_seed=11)
    assert a == evaluate({"x": 0.3}, dataset="sweep", noise_seed=11)
    durations = [evaluate({"x": 0.3}, dataset="sweep,fail=0,lost=0", noise_seed=s)["sim_time_s"]
                 for s in range(4000)]
    assert sum(durations) / len(durations) == pytest.approx(600, rel=0.1)
    assert max(durations) > 10 * 600  # heavy tail: log-normal with stragglers
    slow = [evaluate({"x": 0.3}, dataset="steady,straggle=0.5,slowdown=3", noise_seed=s)
            for s in range(40)]
    assert {o["sim_time_s"] for o in slow} == {300.0, 900.0}
    assert all((o["sim_time_s"] == 900.0) == o["user_attrs"]["sim_straggler"] for o in slow)


@pytest.mark.unit
@pytest.mark.parametrize(("objective", "message"), [
    ("simulated:nope", "unknown simulated workload 'nope'"),
    ("simulated:sweep,fail=2", "fail=2.0 is out of range"),
    ("simulated:sweep,speed=2", "option 'speed=2': expected NAME=VALUE"),
    ("simulated:sweep,epochs=x", "option epochs: not a number"),
])
def test_bad_workloads_are_one_line_errors(objective: str, message: str) -> None:
    with pytest.raises(StudyError, match="objective") as info:
        parse_study({**_study("sweep", trials=1, concurrency=1), "objective": objective})
    assert message in str(info.value) and "\n" not in str(info.value).strip()
    with pytest.raises(ValueError, match="service: expected seconds >= 0 or 'measured'"):
        SimClock(service=-1.0)
    assert parse("sweep,epochs=9").epochs == 9
