"""Uneven ranks on purpose: ``[training] slowdown`` (training/algorithms/_pace.py) and its validation."""

from __future__ import annotations

import time

import pytest
from pydantic import ValidationError

from training._config import TrainConfig
from training.algorithms._pace import Pace

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def _busy(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_slowed_rank_sleeps_factor_minus_one_times_its_compute() -> None:
    pace = Pace([1.0, 3.0], rank=1)
    pace.start()
    cpu = time.thread_time()
    _busy(0.03)
    cpu = time.thread_time() - cpu
    wall = time.perf_counter()
    pace.stop()
    waited = time.perf_counter() - wall
    assert pace.slept_s == pytest.approx(2 * cpu, rel=0.1)  # CPU time: load does not matter
    assert waited >= 0.99 * pace.slept_s  # and it really waited


@pytest.mark.parametrize(("slowdown", "rank"), [([1.0, 3.0], 0), ([3.0], 1), ([], 0)])
def test_other_ranks_keep_their_own_pace(slowdown: list[float], rank: int) -> None:
    pace = Pace(slowdown, rank)
    pace.start()
    _busy(0.005)
    pace.stop()
    assert pace.factor == 1.0 and pace.slept_s == 0.0


@pytest.mark.parametrize(
    ("slowdown", "ranks", "message"),
    [
        ([1.0, 0.5], 2, "rank 1's factor is 0.5: a factor must be a finite number >= 1"),
        ([1.0, float("nan")], 2, "rank 1's factor is nan"),
        ([1.0, 3.0, 2.0], 2, "slowdown gives 3 factors but the trial has ranks = 2"),
    ],
)
def test_bad_slowdowns_are_refused_with_the_field(
    slowdown: list[float], ranks: int, message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        TrainConfig(dataset="digits", ranks=ranks, slowdown=slowdown)


def test_a_straggler_setting_is_part_of_the_config() -> None:
    config = TrainConfig(dataset="digits", ranks=2, algorithm="asgd", slowdown=[1, 3])
    assert config.slowdown == [1.0, 3.0]
    assert TrainConfig(dataset="digits").slowdown == []
