"""Pruners replayed on recorded learning curves: the pruner alone, without a sampler.

A discrete-event simulation of ``concurrency`` workers on an in-memory Optuna study. The
configurations start in a given order; each trial is one configuration (its Optuna parameter
``config``, the curve's index) and after every epoch reports that epoch's recorded value
(``trial.report``) and asks ``trial.should_prune()``, as the trainer's reporter does; an epoch
takes one unit of simulated time, or the configuration's recorded seconds for it.

A stopping pruner's True stops the trial (PRUNED). A pruner with ``pauses = True``
(``search.pruners._promotion.PromotingHalving``) *pauses* it: PRUNED with ``detol:paused_at`` and a
stand-in checkpoint (``detol:checkpoint``, the epoch; no file). What a free worker starts next is
decided by the driver's own code, :func:`search.driver._segments.next_start`: it queues the
promotion (``queue_promotion``) that the next ``ask`` takes, and the continuation is given its
parent's curve with ``continue_curve``, as in the driver, then trains on from the epoch after the
checkpoint's, on the same recorded curve. The budget counts as spent once every configuration
has started (the driver's rule with every trial told before the next starts, as on its simulated
clock). Time is a :class:`search.simulated._clock.SimClock`. A curve shorter than ``epochs`` is a
run that diverged: it fails after its last.

Widths (issue 31): with ``resize`` (search.driver._resize.WidenOnPromotion) a continuation is
queued with the policy's width, by the driver's own ``next_start``; ``concurrency`` then counts
*slots* (ranks), a configuration starts on one, and an epoch on ``w`` ranks takes its recorded
time times ``epoch_time(w)`` (a throughput model: 1 at w = 1). A continuation that does not fit
the free slots waits for them, and no new configuration starts ahead of it (promotions first).

>>> curves = [[0.1 * i, 0.1 * i + 0.05] for i in range(1, 7)]
>>> run = replay(curves, optuna.pruners.NopPruner(), concurrency=2, order=range(6))
>>> run.epochs, run.incumbent, round(run.regret, 6)
(12, 5, 0.0)
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import optuna
from optuna.trial import TrialState

from search.driver._resize import WIDTH_ATTR, WidenOnPromotion
from search.driver._segments import continue_curve, next_start, widen_idle
from search.driver._study import RESUME_FROM_ATTR
from search.pruners._promotion import PAUSED_ATTR
from search.simulated._clock import SimClock
from training.contract import CHECKPOINT_ATTR

CONFIG_PARAM = "config"


@dataclass
class ReplayRun:
    """What one replay spent and found."""

    epochs: int  # epochs trained; a continuation's re-reported epochs are not trained again
    time: float  # simulated time until the last worker stopped
    incumbent: int | None  # the configuration of the best trial that trained every epoch
    regret: float | None  # best final value of all full curves - the incumbent's final value
    complete: int = 0
    stopped: int = 0  # PRUNED for good
    paused: int = 0  # PRUNED with detol:paused_at (may have been promoted later)
    promotions: int = 0
    failed: int = 0
    # (configuration, first epoch, last epoch) that each trial trained, in the order they ended
    segments: list[tuple[int, int, int]] = field(default_factory=list)
    # (time, value, configuration) of each trial that completed, in the order they did
    completions: list[tuple[float, float, int]] = field(default_factory=list)
    rank_time: float = 0.0  # simulated slot-time spent training (width x epoch time)
    widths: list[int] = field(default_factory=list)  # each trial's width, in the order it ended
    widened: int = 0  # running trials given idle slots at the study's end (resize.idle)
    # when the last new configuration started: the study's tail is time - this
    last_configuration_start: float = 0.0
    study: optuna.Study | None = field(default=None, repr=False)


def _check(curves: Sequence[Sequence[float]], epochs: int, concurrency: int) -> None:
    if concurrency < 1:
        raise ValueError(f"concurrency: must be >= 1, got {concurrency}")
    if epochs < 1:
        raise ValueError(f"epochs: must be >= 1, got {epochs}")
    for i, curve in enumerate(curves):
        if not 1 <= len(curve) <= epochs:
            raise ValueError(f"curves[{i}]: has {len(curve)} values, expected 1..{epochs}")


def best_final(curves: Sequence[Sequence[float]], epochs: int) -> float:
    """The best final value over the curves that reach ``epochs`` (what no pruning finds)."""
    finals = [c[epochs - 1] for c in curves if len(c) == epochs]
    if not finals:
        raise ValueError(f"no curve has all {epochs} epochs")
    return max(finals)


class _Replay:
    """One run's state; ``run()`` drives the event loop to the end."""

    def __init__(
        self,
        curves: Sequence[Sequence[float]],
        pruner: optuna.pruners.BasePruner,
        *,
        concurrency: int,
        order: Iterable[int],
        epochs: int,
        durations: Sequence[Sequence[float]] | None,
        study_name: str,
        resize: WidenOnPromotion | None = None,
        epoch_time: Callable[[int], float] | None = None,
        restart: float = 0.0,
    ) -> None:
        self.curves = curves
        self.epochs = epochs
        self.durations = durations
        self.concurrency = concurrency
        self.queue = deque(order)
        self.pauses = bool(getattr(pruner, "pauses", False))
        self.promoter = pruner if self.pauses else None
        self.clock = SimClock(service=0.0)  # the driver's work costs nothing here
        # Hyperband's brackets hash the study name: a fixed name keeps a replay reproducible.
        self.study = optuna.create_study(
            study_name=study_name,
            direction="maximize",
            pruner=pruner,
            sampler=optuna.samplers.RandomSampler(seed=0),  # every value is enqueued anyway
        )
        self.heap: list[tuple[float, int, optuna.Trial, int, int]] = []
        self.seq = itertools.count()
        self.running = 0
        self.spent = 0
        self.budget = sum(len(c) for c in curves)
        self.counts = {"complete": 0, "stopped": 0, "paused": 0, "promotions": 0, "failed": 0}
        self.first: dict[int, int] = {}  # trial number -> the first epoch it trains
        self.segments: list[tuple[int, int, int]] = []
        self.resize = resize
        self.restart = restart  # a continuation's start: launch + checkpoint save and restore
        self.epoch_time = epoch_time or (lambda w: 1.0)
        self.width: dict[int, int] = {}  # trial number -> the ranks it runs on
        self.used = 0  # slots taken (with resize; else running trials)
        self.completions: list[tuple[float, float, int]] = []
        self.rank_time = 0.0
        self.widths: list[int] = []
        self.widened = 0  # running trials given idle slots at the study's end
        self.last_configuration_start: float | None = None

    @property
    def now(self) -> float:
        return self.clock.now()

    def _duration(self, config: int, epoch: int) -> float:
        return 1.0 if self.durations is None else float(self.durations[config][epoch - 1])

    def _schedule(self, trial: optuna.Trial, config: int, epoch: int, extra: float = 0.0) -> None:
        width = self.width[trial.number]
        took = self._duration(config, epoch) * self.epoch_time(width) + extra
        self.rank_time += width * took
        end = self.now + took
        heapq.heappush(self.heap, (end, next(self.seq), trial, config, epoch))

    def _start(self, config: int | None) -> None:
        """Ask the next trial: an enqueued continuation (``config`` None) or configuration
        ``config``."""
        if config is not None:
            self.study.enqueue_trial({CONFIG_PARAM: config})
            self.last_configuration_start = self.now
        trial = self.study.ask()
        config = trial.suggest_int(CONFIG_PARAM, 0, len(self.curves) - 1)  # the enqueued value
        first = 1
        resume = trial.user_attrs.get(RESUME_FROM_ATTR)
        if resume is not None:  # the curve so far, from its checkpoint: not trained again
            continue_curve(self.study, trial, resume, multi_objective=False)
            first = int(resume["epoch"]) + 1
        self.first[trial.number] = first
        width = min(int(trial.user_attrs.get(WIDTH_ATTR, 1)), self.concurrency) \
            if self.resize is not None else 1
        trial.set_user_attr(WIDTH_ATTR, width)
        self.width[trial.number] = width
        self.used += width
        self.running += 1
        self._schedule(trial, config, first, self.restart if first > 1 else 0.0)

    def _fill(self) -> None:
        """Free workers: what the driver starts (search.driver._segments.next_start), then
        the slots still idle to the running trials (``widen_idle``), as the driver does."""
        while self.used < self.concurrency:
            start = next_start(self.study, self.promoter, budget_spent=not self.queue,
                               resize=self.resize)
            if start is None:
                break
            if start != "configuration" and self._queued_width() > self.concurrency - self.used:
                return  # the promotion waits for its slots; nothing starts ahead of it
            if start == "configuration":
                # A configuration's start changes nothing the promoter reads (no report, no
                # pause): the answer holds for every free slot while the budget lasts.
                while self.queue and self.used < self.concurrency:
                    self._start(self.queue.popleft())
            else:
                self.counts["promotions"] += start == "continuation"
                self._start(None)
        self.widened += len(widen_idle(self.study, self.promoter, budget_spent=not self.queue,
                                       resize=self.resize, idle=self.concurrency - self.used))

    def _queued_width(self) -> int:
        """The width of the continuation the next ``ask`` takes (the oldest waiting trial)."""
        if self.resize is None:
            return 1
        waiting = self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        return min(int(waiting[0].user_attrs.get(WIDTH_ATTR, 1)), self.concurrency) \
            if waiting else 1

    def _end(self, trial: optuna.Trial, config: int, epoch: int, outcome: str) -> None:
        self.counts[outcome] += 1
        self.segments.append((config, self.first.pop(trial.number), epoch))
        width = self.width.pop(trial.number)
        self.widths.append(width)
        self.used -= width
        self.running -= 1

    def _at_rung(self, epoch: int) -> bool:
        """Whether a report at ``epoch`` can change the promoter's answer: it reads values at
        rungs only (any bracket's, to be safe); a pruner that does not pause reads none."""
        if self.promoter is None:
            return False
        rungs = getattr(self.promoter, "rung_epochs", None)
        if rungs is None:
            return True
        return any(epoch in rungs(b, epoch + 1)
                   for b in range(int(getattr(self.promoter, "brackets", 1))))

    def _epoch_end(self, trial: optuna.Trial, config: int, epoch: int) -> bool:
        """Play one epoch's end; True when it can change what starts next (the trial ended,
        freeing its slots, or reported at a rung), False when ``_fill`` would find the same."""
        curve = self.curves[config]
        value = float(curve[epoch - 1])
        self.spent += 1
        if self.spent > self.budget:  # each lineage trains each epoch once: a loop otherwise
            raise RuntimeError(f"{self.spent} epochs trained, more than the curves hold")
        if not math.isfinite(value) or (epoch == len(curve) and epoch < self.epochs):
            self.study.tell(trial, state=TrialState.FAIL)  # diverged: the trainer fails it
            self._end(trial, config, epoch, "failed")
            return True
        trial.report(value, epoch)
        decision = trial.should_prune()  # asked every epoch, the last too, as the reporter does
        if epoch == self.epochs:
            self.study.tell(trial, value)
            self.completions.append((self.now, value, config))
            self._end(trial, config, epoch, "complete")
        elif not decision:
            self._schedule(trial, config, epoch + 1)
            return self._at_rung(epoch)
        elif self.pauses:
            trial.set_user_attr(PAUSED_ATTR, epoch)
            trial.set_user_attr(CHECKPOINT_ATTR, {"id": f"replay-{trial.number}", "epoch": epoch})
            self.study.tell(trial, state=TrialState.PRUNED)
            self._end(trial, config, epoch, "paused")
        else:
            self.study.tell(trial, state=TrialState.PRUNED)
            self._end(trial, config, epoch, "stopped")
        return True

    def run(self) -> ReplayRun:
        self._fill()
        while self.heap:
            end, _, trial, config, epoch = heapq.heappop(self.heap)
            self.clock.advance_to(end)
            if self._epoch_end(trial, config, epoch):
                self._fill()  # also idle workers: a rung's report may make a pause promotable
        complete = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        incumbent = regret = None
        if complete:
            best = max(complete, key=lambda t: (t.values[0], -t.number))  # first of equals
            incumbent = int(best.params[CONFIG_PARAM])
            regret = best_final(self.curves, self.epochs) - float(self.curves[incumbent][-1])
        return ReplayRun(
            epochs=self.spent,
            time=self.now,
            incumbent=incumbent,
            regret=regret,
            segments=self.segments,
            completions=self.completions,
            rank_time=self.rank_time,
            widths=self.widths,
            widened=self.widened,
            last_configuration_start=self.last_configuration_start or 0.0,
            study=self.study,
            **self.counts,
        )


def replay(
    curves: Sequence[Sequence[float]],
    pruner: optuna.pruners.BasePruner,
    *,
    concurrency: int,
    order: Iterable[int],
    epochs: int | None = None,
    durations: Sequence[Sequence[float]] | None = None,
    study_name: str = "replay",
    resize: WidenOnPromotion | None = None,
    epoch_time: Callable[[int], float] | None = None,
    restart: float = 0.0,
) -> ReplayRun:
    """Replay ``pruner`` (a fresh instance: pruners may keep state) on ``curves`` (per
    configuration, its value after each epoch, higher is better), the configurations starting
    in ``order``, ``concurrency`` at a time. ``epochs``: the full budget (default: the longest
    curve). ``durations``: seconds per configuration and epoch (default: 1 per epoch).
    ``resize``: the width policy (``concurrency`` then counts slots); ``epoch_time(w)``: an
    epoch's time on ``w`` ranks relative to one (default: 1, no speed-up); ``restart``: the time
    a continuation spends before its first epoch (a new job restoring its checkpoint)."""
    curves = [list(c) for c in curves]
    full = epochs if epochs is not None else max((len(c) for c in curves), default=0)
    _check(curves, full, concurrency)
    return _Replay(
        curves,
        pruner,
        concurrency=concurrency,
        order=order,
        epochs=full,
        durations=durations,
        study_name=study_name,
        resize=resize,
        epoch_time=epoch_time,
        restart=restart,
    ).run()
