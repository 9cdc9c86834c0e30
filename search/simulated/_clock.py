"""The simulated clock of a benchmark sweep: the driver as one serial server, and the trials'
events (per-epoch reports, the end, a fault) in the order they happen on ``concurrency`` workers.

A benchmark objective (``nb201:``, ``simulated:``) answers at once with ``sim_time_s``; the
driver then runs on this clock instead of the wall clock. :class:`SimClock` is the driver's
time. Its ``service`` says what the driver's own work costs on it:

- ``0.0`` (NAS-Bench-201's default): nothing; a trial starts when the previous one is told.
- a number ``s``: each trial's ask + submit + tell costs ``s`` simulated seconds, charged when
  it is submitted (the trial starts ``s`` after the driver took it up).
- ``"measured"``: the driver's real work costs its real wall time. The clock runs while the
  driver works (ask, suggest, submit, tell, result fetch, progress) and stops while it waits for
  the next event (:meth:`idle`); so one driver is a serial server, and a slow one leaves
  workers waiting.

:class:`EventQueue` is the simulated backend's event list. Each running trial's answer becomes
events at ``start + k * sim_time_s / epochs`` (an epoch's report, judged by the study's own
pruner at that simulated moment: a pruned trial frees its worker there; an answer may give each
epoch's own seconds, ``sim_epoch_s`` as a list, and a start, ``sim_start_s``: a learning-curve
table's), and its end: complete,
failed (the objective raised partway, ``sim_time_s`` is how far it got) or lost (its answer's
``lost_at_s``: the worker vanished; the driver gets what a real ``KilledWorker`` gives it).
A pruner that pauses (``pauses = True``) pauses the trial there, with a stand-in checkpoint
attribute; the driver's own promotion continues it, and the continuation (``resumed_epoch``)
reports and pays only the epochs after its checkpoint's.

>>> clock = SimClock(service=0.5)
>>> clock.serve(), clock.serve(), clock.now()
(0.5, 1.0, 1.0)
>>> clock.advance_to(600.0); clock.serve()
600.5
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
from distributed import wait

# A benchmark objective's prefix -> what the driver's work costs on its clock by default.
DEFAULT_SERVICE: dict[str, float | str] = {"nb201": 0.0, "simulated": "measured", "curves": 0.0}
# Event kinds, in the order they are taken at the same simulated moment.
_EPOCH, _END = 0, 1


class SimClock:
    """The driver's simulated time (seconds); ``service``: 0.0, seconds per trial, "measured"."""

    def __init__(self, *, service: float | str = 0.0) -> None:
        if service != "measured" and not (
            isinstance(service, int | float) and not isinstance(service, bool) and service >= 0
        ):
            raise ValueError(
                f"service: expected seconds >= 0 or 'measured', got {service!r}"
            )
        self.service = service
        self.measured = service == "measured"
        self._now = 0.0
        self._since: float | None = None  # perf_counter when the driver's current work began
        self.work_s = 0.0  # driver work charged so far (measured or constant)
        self.served = 0  # trials submitted

    def now(self) -> float:
        """The driver's simulated time now (measured: including the work under way)."""
        if self._since is None:
            return self._now
        return self._now + time.perf_counter() - self._since

    def serve(self) -> float:
        """A trial was submitted: charge its service; the simulated time it starts."""
        self.served += 1
        if self.measured:
            if self._since is None:
                self.busy()
        else:
            self._now += float(self.service)
            self.work_s += float(self.service)
        return self.now()

    def busy(self) -> None:
        """The driver starts working (measured: the clock runs)."""
        if self.measured and self._since is None:
            self._since = time.perf_counter()

    def idle(self) -> None:
        """The driver waits for the next event (measured: its work so far is charged)."""
        if self._since is not None:
            spent = time.perf_counter() - self._since
            self._now += spent
            self.work_s += spent
            self._since = None

    def charge(self, seconds: float) -> None:
        """Measured driver work done while idle() (fetching a result): charged too."""
        if self.measured:
            self._now += seconds
            self.work_s += seconds

    def advance_to(self, t: float) -> None:
        """The next event is at ``t``: a driver that is free waits until then."""
        self._now = max(self._now, t)


def default_clock(objective: str | None) -> SimClock:
    return SimClock(service=DEFAULT_SERVICE.get(str(objective).partition(":")[0], 0.0))


@dataclass
class _Pending:
    run: Any  # the driver's _Running
    result: dict[str, Any]
    curve: list[float]
    ends: list[float]  # after sim_start, when each epoch from resumed + 1 on is reported
    end: float
    resumed: int = 0  # a continuation's checkpoint epoch: it reports the epochs after it
    reported: int = 0


Result = dict[str, Any]


class EventQueue:
    """The running trials' events on the simulated clock, earliest first.

    ``fetch(future) -> result`` reads an answer (the driver's own ``_result``); ``lost(exc)`` is
    what the driver makes of an exception from a lost worker.
    """

    def __init__(
        self,
        *,
        study: optuna.Study,
        clock: SimClock,
        fetch: Callable[[Any], Result],
        lost: Callable[[BaseException], Result],
        checkpoint_attr: str = "detol:checkpoint",
    ) -> None:
        self.study = study
        self.checkpoint_attr = checkpoint_attr  # a paused trial's stand-in checkpoint
        self.clock = clock
        self.fetch = fetch
        self.lost = lost
        self._heap: list[tuple[float, int, int, Any]] = []
        self._pending: dict[Any, _Pending] = {}
        self._seq = itertools.count()
        self._reports = len(study.directions) == 1  # Optuna refuses multi-objective reports
        self.round_trip_s = 0.0  # wall time spent waiting for Dask to compute the answers
        # Every epoch's report as it happened: (simulated time, trial number, epoch, value),
        # what an anytime benchmark reads (what the search had seen by each moment).
        self.reports: list[tuple[float, int, int, float]] = []

    def add(self, future: Any, run: Any) -> None:
        """A submitted trial's answer (computed, see next_end): its events join the queue."""
        started = time.perf_counter()
        result = self.fetch(future)
        self.clock.charge(time.perf_counter() - started)  # the driver reads the answer
        duration = float(result.get("sim_time_s") or 0.0)
        curve = [float(v) for v in result.pop("curve", None) or []]
        lost_at = result.pop("lost_at_s", None)
        epochs = len(curve)
        per = result.pop("sim_epoch_s", None)
        lead = float(result.pop("sim_start_s", None) or 0.0)
        # A continuation (a promoted paused trial) trains the epochs after its checkpoint only.
        resumed = min(int(getattr(run, "resumed_epoch", 0) or 0), epochs)
        if isinstance(per, list):  # each epoch's own seconds (a learning-curve table)
            ends = list(itertools.accumulate(float(s) for s in per[resumed:epochs]))
            ends = [lead + e for e in ends]
        else:
            epoch_s = float(per or (duration / epochs if epochs else 0))
            ends = [lead + (k + 1) * epoch_s for k in range(epochs - resumed)]
        if resumed or isinstance(per, list):
            duration = ends[-1] if ends else lead
            result["sim_time_s"] = duration
        if lost_at is not None:  # the worker disappears at lost_at: no answer comes back
            address = f"sim-worker-{run.trial.number}"
            # The trial's name, not the future's key (which names the driver object, a random
            # suffix): a sweep replayed with the same seed says the same.
            name = f"trial-{run.trial.study.study_name}-{run.trial.number}"
            exc = _killed_worker(name, address)
            result = {**self.lost(exc), "sim_time_s": float(lost_at)}
            duration = float(lost_at)
        pending = _Pending(run, result, curve, ends, run.sim_start + duration, resumed, resumed)
        self._pending[future] = pending
        self._schedule(future, pending)

    def _schedule(self, future: Any, p: _Pending) -> None:
        nxt = p.reported + 1
        at = p.run.sim_start + p.ends[nxt - p.resumed - 1] if nxt <= len(p.curve) else math.inf
        if self._reports and at <= p.end:
            heapq.heappush(self._heap, (at, _EPOCH, next(self._seq), future))
        else:
            heapq.heappush(self._heap, (p.end, _END, next(self._seq), future))

    def next_end(self, running: dict[Any, Any]) -> tuple[Any, Any, Result]:
        """Play events until a trial ends (completes, fails, is lost or pruned); that trial,
        taken out of ``running``, and its result. The driver's clock moves to its end."""
        new = [f for f in running if f not in self._pending]
        if new:
            # Dask's round trip (submit -> worker -> done) overlaps the trials' work in a real
            # sweep: waiting for it is not the driver's work; reading the answer is (add).
            started = time.perf_counter()
            wait(new)
            self.round_trip_s += time.perf_counter() - started
        for future in new:
            self.add(future, running[future])
        while True:
            at, kind, _seq, future = heapq.heappop(self._heap)
            p = self._pending[future]
            if kind == _EPOCH:
                p.reported += 1
                trial: optuna.Trial = p.run.trial
                trial.report(p.curve[p.reported - 1], step=p.reported)
                self.reports.append((at, trial.number, p.reported, p.curve[p.reported - 1]))
                if trial.should_prune():  # the study's pruner, at this simulated moment
                    # A pruner that pauses (pause-and-promote) pauses, as a real trial's rank
                    # 0 does: a checkpoint stands in for the one it would have written.
                    pauses = getattr(self.study.pruner, "pauses", False)
                    p.result = _pruned(p.result, p.reported, p.resumed, at - p.run.sim_start,
                                       {self.checkpoint_attr: {
                                           "id": f"simulated-{trial.number}",
                                           "epoch": p.reported}} if pauses else None)
                    p.end = at
                    heapq.heappush(self._heap, (at, _END, next(self._seq), future))
                else:
                    self._schedule(future, p)
                continue
            del self._pending[future]
            self.clock.advance_to(at)
            return future, running.pop(future), p.result


def _pruned(result: Result, epochs: int, resumed: int, ran_s: float,
            checkpoint: dict[str, Any] | None) -> Result:
    """A trial stopped after epoch ``epochs`` (it resumed after epoch ``resumed``); paused when
    it has a ``checkpoint`` (its trial attribute)."""
    out = {k: v for k, v in result.items() if k != "values"}
    stopped = {"sim_time_s": ran_s, "epochs_run": epochs - resumed, "start_epoch": resumed + 1}
    if checkpoint is None:
        return {**out, **stopped, "state": "pruned", "exit_reason": f"pruned after step {epochs}"}
    return {**out, **stopped, "state": "paused", "exit_reason": f"paused after epoch {epochs}",
            "user_attrs": {**(out.get("user_attrs") or {}), **checkpoint}}


def _killed_worker(key: str, address: str) -> BaseException:
    """The exception Dask raises for a task whose worker died (distributed.KilledWorker)."""
    from distributed.scheduler import KilledWorker

    return KilledWorker(key, types.SimpleNamespace(address=address), 0)  # type: ignore[arg-type]


def utilisation(
    intervals: list[tuple[float, float]], workers: int, start: float, stop: float
) -> float:
    """Busy worker-seconds in ``[start, stop]`` over the worker-seconds there (``workers *
    (stop - start)``); ``intervals``: each trial's (start, end) on its worker.

    >>> utilisation([(0, 10), (0, 5), (6, 10)], 2, 0, 10)  # 19 of 20 worker-seconds
    0.95
    """
    if workers < 1 or stop <= start:
        raise ValueError(f"utilisation: needs workers >= 1 and stop > start, got "
                         f"{workers}, [{start}, {stop}]")
    busy = sum(max(0.0, min(b, stop) - max(a, start)) for a, b in intervals)
    return busy / (workers * (stop - start))


def driver_bound(workers: int, busy_s: float, service_s: float) -> float:
    """Worker utilisation when one serial driver serves ``workers`` trials of mean ``busy_s``
    seconds, spending ``service_s`` of its own time on each (ask + submit + tell): the
    machine-repairman model (finite-source queue M/M/1//W). ``p0`` is the chance the driver is
    idle: ``1 / sum_k W!/(W-k)! * (s/D)^k``; utilisation ``(1 - p0) * D / (W * s)``. For
    ``W * s << D`` it is ``D / (D + s)``; past the knee ``D / (W * s)``.

    >>> round(driver_bound(1024, 600.0, 0.005), 5), round(driver_bound(1024, 600.0, 1.0), 3)
    (0.99999, 0.586)
    """
    if service_s <= 0:
        return 1.0
    r = service_s / busy_s
    # log of W!/(W-k)! r^k, summed in log space (the terms grow huge past the knee)
    logs, acc = [0.0], 0.0
    for k in range(1, workers + 1):
        acc += math.log((workers - k + 1) * r)
        logs.append(acc)
    top = max(logs)
    p0 = math.exp(-top) / sum(math.exp(v - top) for v in logs)
    return (1 - p0) * busy_s / (workers * service_s)


def max_workers(busy_s: float, service_s: float, goal: float = 0.95) -> int:
    """The most workers one driver keeps ``goal`` busy (driver_bound, by bisection)."""
    if service_s <= 0:
        raise ValueError("max_workers: service_s must be > 0")
    if driver_bound(1, busy_s, service_s) < goal:
        return 0
    lo, hi = 1, 2
    while driver_bound(hi, busy_s, service_s) >= goal:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if driver_bound(mid, busy_s, service_s) >= goal else (lo, mid)
    return lo
