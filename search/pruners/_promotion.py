"""Successive halving and Hyperband in their promotion form (Li et al. 2020, "A System for
Massively Parallel Hyperparameter Tuning": asynchronous successive halving, ASHA).

Optuna's ``SuccessiveHalvingPruner`` can only stop a trial: one cut at a low rung never comes
back, however good it would have been. Here a trial that reaches a rung and is not in the top
``1/eta`` of the configurations that reached that rung *pauses*: it is told PRUNED (what plain
Optuna, the dashboard and notebooks read: it stopped there) with its checkpoint kept and
``detol:paused_at`` = the epoch. Whenever a worker is free, the driver first looks for a paused
configuration that is now in the top ``1/eta`` of its rung (more trials have arrived since),
highest rung first, best first, and *promotes* it: a new trial with the same parameters,
``detol:resume_of`` = the paused trial's number, which continues from the checkpoint. Only when
nothing is promotable does a new configuration start.

A chain of trials (a configuration, its promoted continuations, re-runs after a lost worker)
is one *lineage*, named by its first trial's number (``detol:lineage``). A continuation begins
with its parent's intermediate values, so its learning curve is whole; at a rung each lineage
counts once. When the budget of new configurations is spent, no rung grows any more, so each
rung's top becomes at least its best configuration (``promotable(finishing=True)``): a finite
study still trains its best configurations to the last epoch. Optuna's storage is the only
record: rungs, paused trials and promotions are all read back from it, so a driver that
crashed resumes with the same rungs.

Hyperband (``brackets`` > 1) runs that many ASHA brackets side by side, bracket ``s`` with its
first rung at ``min_resource * eta**s``; configuration ``n`` belongs to bracket ``n % brackets``
and competes only within it (Li et al.'s asynchronous Hyperband). ``n`` counts configurations
in the order they started (:func:`configuration_numbers`), not trial numbers: continuations and
re-runs use up trial numbers but belong to their lineage's configuration. A configuration that
failed keeps its number, so a lineage's bracket never changes once it started.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from search.pruners._lineage import (  # noqa: F401 - re-exported: the attributes live there
    COUNTED,
    KEPT_ATTR,
    LINEAGE_ATTR,
    LINEAGE_EPOCHS_ATTR,
    LINEAGE_RANK_SECONDS_ATTR,
    LINEAGE_TOTALS,
    LINEAGE_WALL_ATTR,
    MAX_FAILED_CONTINUATIONS,
    PAUSED_ATTR,
    RESUME_OF_ATTR,
    WIDEN_ATTR,
    WIDTH_ATTR,
    configuration_numbers,
    is_segment,
    lineage,
)


class PromotingHalving(optuna.pruners.BasePruner):
    """Pause-and-promote successive halving (``brackets`` = 1) or Hyperband (more).

    ``prune`` answers True when the trial should *pause* at this epoch (``pauses`` tells the
    reporter so); ``promotable`` lists the paused trials to resume now. Both read the rung
    values from an index kept up to date trial by trial (search.pruners._rung_index);
    ``index=False`` reads every trial on every answer instead (the reference: the same answers,
    at O(trials) each).
    """

    pauses = True

    def __init__(
        self,
        min_resource: int = 1,
        reduction_factor: int = 3,
        min_early_stopping_rate: int = 0,
        brackets: int = 1,
        max_resource: int | None = None,
        widen_until: int = 0,
        index: bool = True,
    ) -> None:
        if min_resource < 1 or reduction_factor < 2 or min_early_stopping_rate < 0:
            raise ValueError(
                "min_resource >= 1, reduction_factor >= 2, min_early_stopping_rate >= 0 needed"
            )
        self.min_resource = min_resource
        self.eta = reduction_factor
        self.rate = min_early_stopping_rate
        self.brackets = max(1, brackets)
        self.max_resource = max_resource
        # [resize]: a trial that passes a rung narrower than this pauses anyway, to be promoted
        # at once onto a wider job (search.driver._resize); 0: it trains on where it is.
        self.widen_until = widen_until
        # Keep the rung values indexed (search.pruners._rung_index): an answer then reads only
        # the trials that changed. False: read every trial each time (the reference).
        self.index = index
        self._index: Any = None

    # --- rungs --------------------------------------------------------------------------
    def bracket(self, configuration: int) -> int:
        """The bracket of configuration number ``configuration`` (see configuration_numbers)."""
        return configuration % self.brackets

    def _bracket_of(self, n: int, configurations: dict[int, int]) -> int:
        """Lineage ``n``'s bracket (a lineage that is not in the map: its own number)."""
        return self.bracket(configurations.get(n, n)) if self.brackets > 1 else 0

    def rung_epochs(self, bracket: int, until: int) -> list[int]:
        """The rung epochs of ``bracket`` below ``until`` (a trial at ``until`` completes)."""
        out, k = [], 0
        while (epoch := self.min_resource * self.eta ** (self.rate + bracket + k)) < until:
            out.append(epoch)
            k += 1
        return out

    def _is_rung(self, bracket: int, epoch: int) -> bool:
        return epoch in self.rung_epochs(bracket, epoch + 1)

    def _rung_values(
        self, trials: Sequence[FrozenTrial], epoch: int, bracket: int,
        configurations: dict[int, int] | None = None,
    ) -> dict[int, float]:
        """lineage -> its value at ``epoch``, over the lineages of ``bracket``."""
        if configurations is None and self.brackets > 1:
            configurations = configuration_numbers(trials)
        configurations = configurations or {}
        values: dict[int, float] = {}
        for t in trials:
            if t.state not in COUNTED or epoch not in t.intermediate_values:
                continue
            n = lineage(t)
            if self._bracket_of(n, configurations) == bracket:
                value = t.intermediate_values[epoch]
                if math.isfinite(value):
                    values.setdefault(n, value)
        return values

    def _top(
        self, values: dict[int, float], direction: StudyDirection, *, at_least_one: bool = False
    ) -> set[int]:
        """The lineages in the top ``floor(n / eta)`` (none while fewer than eta reached it,
        unless ``at_least_one``)."""
        k = len(values) // self.eta
        if at_least_one and values:
            k = max(k, 1)
        best_first = sorted(
            values, key=lambda n: values[n], reverse=direction == StudyDirection.MAXIMIZE
        )
        return set(best_first[:k])

    # --- the two questions ----------------------------------------------------------------
    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        """True: pause ``trial`` now (it reached a rung and is not promotable)."""
        epoch = trial.last_step
        if epoch is None:
            return False
        if self.max_resource is not None and epoch >= self.max_resource:
            return False
        n = lineage(trial)
        width = int(trial.user_attrs.get(WIDTH_ATTR, self.widen_until))
        if KEPT_ATTR in trial.user_attrs:  # its checkpoints cannot go wider: no pause for it
            width = max(width, self.widen_until)
        # Idle slots at the study's end: this trial is to go on wider (a value, not a rung's).
        wanted = int(trial.system_attrs.get(WIDEN_ATTR, 0)) > width
        if self.brackets == 1 and not self._is_rung(0, epoch):
            return wanted  # one bracket: no trial to read between its rungs
        trials = study.get_trials(deepcopy=False)
        index = self._indexed(study, trials)
        if index is not None:
            bracket, configurations = index.bracket(n), None  # read again only if needed
        else:
            configurations = configuration_numbers(trials) if self.brackets > 1 else {}
            bracket = self._bracket_of(n, configurations)
        if not self._is_rung(bracket, epoch):
            return wanted
        value = trial.intermediate_values[epoch]  # this very report, however it is stored
        if index is not None and math.isfinite(value):
            top = index.in_top(epoch, bracket, n, value)
        else:
            values = self._rung_values(trials, epoch, bracket, configurations)
            values[n] = value
            top = n in self._top(values, study.direction)
        if not top:
            return True
        # Promoted: a trial that is to run wider pauses now and continues on its new width.
        return width < self.widen_until or wanted

    def promotable(self, study: optuna.Study, *, finishing: bool = False) -> list[FrozenTrial]:
        """Paused trials whose configuration is now in its rung's top ``1/eta`` and not yet
        promoted: highest rung first, then best first.

        ``finishing``: no new configuration will start (the budget is spent), so no rung will
        grow any more; each rung's top is then at least its best configuration. Without this,
        a finite study whose top rung holds fewer than eta configurations would end with none
        trained to the last epoch.

        A trial that paused between rungs because the driver asked it to go on wider
        (``WIDEN_ATTR``: idle slots at the study's end) was judged by no rung: it is promotable
        as it is (at a rung, the rung judges it as any other)."""
        trials = study.get_trials(deepcopy=False)
        sign = -1.0 if study.direction == StudyDirection.MAXIMIZE else 1.0
        index = self._indexed(study, trials)
        if index is not None:
            chosen, widening = index.promotable(finishing)
            return _best_first(
                [(trials[i], int(trials[i].user_attrs[PAUSED_ATTR])) for i in chosen],
                [(trials[i], int(trials[i].user_attrs[PAUSED_ATTR])) for i in widening], sign)
        continued = continued_parents(trials)
        configurations = configuration_numbers(trials) if self.brackets > 1 else {}
        candidates: list[tuple[FrozenTrial, int, int, tuple[int, int]]] = []
        widening: list[tuple[FrozenTrial, int]] = []  # paused between rungs to go on wider
        for t in trials:
            if t.state != TrialState.PRUNED or PAUSED_ATTR not in t.user_attrs:
                continue
            if t.number in continued:
                continue
            epoch = int(t.user_attrs[PAUSED_ATTR])
            n = lineage(t)
            bracket = self._bracket_of(n, configurations)
            if WIDEN_ATTR in t.system_attrs and not self._is_rung(bracket, epoch):
                widening.append((t, epoch))  # no rung judged it: it paused only to widen
                continue
            candidates.append((t, epoch, n, (epoch, bracket)))
        # Every rung the candidates paused at, read in one pass over the trials (the driver asks
        # this whenever a worker is free: one pass, not one per rung).
        values: dict[tuple[int, int], dict[int, float]] = {c[3]: {} for c in candidates}
        rungs: dict[int, list[int]] = {}
        for epoch, bracket in values:
            rungs.setdefault(bracket, []).append(epoch)
        for t in trials if values else ():
            if t.state not in COUNTED or not t.intermediate_values:
                continue
            n = lineage(t)
            bracket = self._bracket_of(n, configurations)
            for epoch in rungs.get(bracket, ()):
                value = t.intermediate_values.get(epoch)
                if value is not None and math.isfinite(value):
                    values[(epoch, bracket)].setdefault(n, value)
        tops = {key: self._top(v, study.direction, at_least_one=finishing)
                for key, v in values.items()}
        return _best_first([(t, epoch) for t, epoch, n, key in candidates if n in tops[key]],
                           widening, sign)

    def _indexed(self, study: optuna.Study, trials: list[FrozenTrial]) -> Any:
        """This study's rung index (search.pruners._rung_index) brought up to date with
        ``trials``; None when ``index`` is off or the trials do not fit one (read them all)."""
        if not self.index:
            return None
        from search.pruners._rung_index import RungIndex, Unindexable

        for fresh in (False, True):
            if fresh or self._index is None or not self._index.serves(study):
                self._index = RungIndex(self, study)
            try:
                self._index.update(trials)
                return self._index
            except Unindexable:
                self._index = None
        return None


def _best_first(candidates: list[tuple[FrozenTrial, int]],
                widening: list[tuple[FrozenTrial, int]], sign: float) -> list[FrozenTrial]:
    """Promotable trials (each with its paused epoch, in trial order: rung candidates in their
    rung's top, then those paused only to widen) ordered highest rung first, then best first."""
    out: list[tuple[int, float, FrozenTrial]] = [
        (-epoch, sign * t.intermediate_values[epoch], t) for t, epoch in candidates]
    out += [(-epoch, sign * t.intermediate_values.get(epoch, 0.0), t) for t, epoch in widening]
    out.sort(key=lambda item: (item[0], item[1], item[2].number))
    return [t for _, _, t in out]


def continued_parents(trials: Sequence[FrozenTrial]) -> set[int]:
    """The paused trials that are promoted already: a continuation of theirs waits, runs or
    ended (complete or paused again). A continuation that failed does not count (a re-run of it
    after a lost worker, queued by the driver, does), so its parent is promotable again, up to
    ``MAX_FAILED_CONTINUATIONS`` failures."""
    live: set[int] = set()
    failed: dict[int, int] = {}
    for t in trials:
        if RESUME_OF_ATTR not in t.user_attrs:
            continue
        parent = int(t.user_attrs[RESUME_OF_ATTR])
        if t.state == TrialState.FAIL:
            failed[parent] = failed.get(parent, 0) + 1
        else:
            live.add(parent)
    return live | {p for p, n in failed.items() if n >= MAX_FAILED_CONTINUATIONS}


def hyperband_brackets(min_resource: int, max_resource: int, reduction_factor: int) -> int:
    """Li et al.'s bracket count: one per rung a configuration can start at."""
    ratio = max(1, max_resource // max(1, min_resource))
    return int(math.floor(math.log(ratio, reduction_factor) + 1e-9)) + 1
