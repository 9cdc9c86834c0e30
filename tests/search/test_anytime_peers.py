"""The anytime peers' harness (benchmarks/_common/anytime_peers.py): a library's ask/tell on the
table's clock with N workers, every job trained from scratch to the epochs asked, the library
told when a job ends (a pruner: after every epoch), nothing started once the budget is spent;
and the benchmark's one scoring rule (benchmarks/anytime.py) over what a search saw."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from optuna.distributions import FloatDistribution, distribution_to_json

from search.simulated._curves import append_chunk, write_header

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks")]

from _common.anytime_peers import Harness, Job  # noqa: E402
from anytime import incumbent_trace, regret_at  # noqa: E402

pytestmark = pytest.mark.unit


def _table(tmp_path: Path) -> str:
    """Row i: x = i; curve rises to (i + 1) / 4 over 4 epochs of (i + 1) s, start 1 s; row 3
    diverged after epoch 2."""
    path = str(tmp_path / "t.jsonl.gz")
    write_header(path, name="t", metric="val_accuracy", direction="maximize", epochs=4, study="")
    rows = []
    for i in range(4):
        epochs = 2 if i == 3 else 4
        rows.append({"trial": i, "params": {"x": float(i)}, "state": "failed" if i == 3 else
                     "complete", "curve": [(i + 1) / 4 * (k + 1) / 4 for k in range(epochs)],
                     "epoch_s": [float(i + 1)] * epochs, "start_s": 1.0})
    append_chunk(path, {"chunk": 0, "distributions": {
        "x": distribution_to_json(FloatDistribution(0.0, 3.0))}}, rows)
    return path


def test_jobs_run_from_scratch_on_the_recorded_clock_until_the_budget(tmp_path: Path) -> None:
    h = Harness(_table(tmp_path), workers=2, budget_s=12.0)
    asked = iter([({"x": 0.1}, 4), ({"x": 1.2}, 2), ({"x": 2.1}, 1), ({"x": 0.0}, 4)])
    told: list[tuple[float, float | None, float]] = []

    def ask() -> Job | None:
        params, epochs = next(asked, (None, 0))
        return None if params is None else Job(params, epochs, len(told))

    h.run(ask, lambda job, value, seconds, stopped: told.append(
        (job.params["x"], value, seconds)))
    # row 0, 4 epochs: 1 + 4 x 1 = 5 s; row 1, 2 epochs: 1 + 2 x 2 = 5 s; then row 2 (1 epoch,
    # 1 + 3 = 4 s, from 5 to 9) and row 0 again (5 to 10); nothing starts after 12 s
    assert told == [(0.1, 0.25, 5.0), (1.2, 0.25, 5.0), (2.1, 0.1875, 4.0), (0.0, 0.25, 5.0)]
    assert h.reports == [(5.0, 0, 4, 0.25), (5.0, 1, 2, 0.25), (9.0, 2, 1, 0.1875),
                         (10.0, 0, 4, 0.25)]


def test_a_diverged_run_is_a_crash_and_a_pruner_sees_every_epoch(tmp_path: Path) -> None:
    h = Harness(_table(tmp_path), workers=1, budget_s=100.0)
    jobs = iter([Job({"x": 3.0}, 4, "diverges"), Job({"x": 2.0}, 4, "pruned after 2")])
    told: list[tuple[Any, float | None, float, bool]] = []
    seen: list[tuple[Any, int]] = []

    def report(job: Job, epoch: int, value: float) -> bool:
        seen.append((job.handle, epoch))
        return not (job.handle == "pruned after 2" and epoch == 2)

    h.run(lambda: next(jobs, None), lambda job, value, seconds, stopped: told.append(
        (job.handle, value, seconds, stopped)), report)
    # row 3 ran 2 of 4 epochs (1 + 2 x 4 = 9 s), both judged, and diverged: a crash
    assert told[0] == ("diverges", None, 9.0, False)
    assert told[1] == ("pruned after 2", 0.375, 7.0, True)  # stopped by the tool at epoch 2
    assert seen == [("diverges", 1), ("diverges", 2), ("pruned after 2", 1),
                    ("pruned after 2", 2)]


def test_the_incumbent_is_the_best_latest_report_scored_by_its_final_value(
        tmp_path: Path) -> None:
    from search.simulated._curves import load_table

    table = load_table(_table(tmp_path))
    # finals: 0.25, 0.5, 0.75 and the diverged row scores the worst (0.25); median 0.375,
    # best 0.75: regret (0.75 - final) / (0.75 - 0.375)
    reports = [(1.0, 1, 1, 0.125), (2.0, 0, 4, 0.25), (3.0, 2, 1, 0.1875), (4.0, 2, 4, 0.75)]
    trace = incumbent_trace(table, reports)
    assert trace == [(1.0, 2 / 3), (2.0, 4 / 3), (4.0, 0.0)]
    assert regret_at(trace, 0.5) is None and regret_at(trace, 3.5) == pytest.approx(4 / 3)


def test_the_speedup_is_our_time_to_the_best_peers_final_regret_over_its_own() -> None:
    from anytime import speedup, summarise

    ours = [[(1.0, 0.9), (2.0, 0.1)], [(1.0, 0.5), (2.0, 0.1)]]  # mean 0.1 from t = 2
    peer = [[(1.0, 0.8), (4.0, 0.1)], [(1.0, 0.6), (4.0, 0.1)]]  # mean 0.1 from t = 4
    sp = speedup(ours, peer, budget=10.0)
    assert sp["ratio"] == pytest.approx(0.5, rel=0.02) and sp["reached"] == 1.0  # 2x faster
    assert speedup(peer, ours, budget=10.0)["ratio"] == pytest.approx(2.0, rel=0.02)
    never = [[(1.0, 0.9)], [(1.0, 0.9)]]
    assert speedup(never, peer, budget=10.0)["ratio"] is None
    runs = [{"table": "t", "workers": 1, "seed": s, "tool": tool, "budget_s": 10.0, "trace": tr}
            for tool, traces in (("detol", ours), ("dehb", peer)) for s, tr in enumerate(traces)]
    summary = summarise(runs)
    cell = summary["t w1"]
    assert cell["speedup"]["best_peer"] == "dehb" and cell["speedup"]["goal"] == 0.1
    # at 25 % (2.5 s) ours is at 0.1 and the peer at 0.7: ranks 1 and 2; at the end both 0.1
    assert summary["average rank"]["detol"]["25%"] == 1.0
    assert summary["average rank"]["dehb"]["100%"] == 1.5


def test_a_variant_of_ours_is_ranked_in_our_place_and_baselines_are_paired_by_seed() -> None:
    from anytime import summarise

    ends = {"detol": [0.1, 0.2], "detol-partial": [0.5, 0.6], "one-epoch": [0.4, 0.4],
            "dehb": [0.3, 0.3]}
    runs = [{"table": "t", "workers": 8, "seed": s, "tool": tool, "budget_s": 10.0,
             "trace": [(1.0, v)]} for tool, vs in ends.items() for s, v in enumerate(vs)]
    cell = summarise(runs)["t w8"]
    ranks = {t: cell["tools"][t]["rank"]["100%"] for t in ends}
    # each of ours against one-epoch and dehb only: detol first, the partial one last, dehb
    # second (behind detol, not pushed down by the partial one)
    assert ranks == {"detol": 1.0, "detol-partial": 3.0, "one-epoch": 3.0, "dehb": 2.0}
    diff = cell["against"]["one-epoch"]["100%"]
    assert diff["mean"] == pytest.approx(-0.25) and diff["se"] == pytest.approx(0.05)
    assert cell["speedup"]["best_peer"] == "dehb"  # baselines and variants are not peers
