"""The rung values of one study, kept up to date trial by trial, for
:class:`search.pruners._promotion.PromotingHalving` (its ``prune`` and ``promotable``).

Without it each answer reads every trial: ``promotable`` whenever a worker is free, ``prune`` at
every rung a trial reports at, so a study costs O(trials^2) (1,024 slots and 4,096
configurations did not fit a benchmark's time; issue 31). Optuna never changes a finished
trial, so a finished trial is taken in once; an unfinished one (RUNNING, WAITING: at most the
running trials and the queue) is looked at again only when its stored record changed (Optuna's
storages replace a trial's ``FrozenTrial`` on every update, so an unchanged trial is the same
object; a storage that hands out new objects each time is re-read, never missed).

The answers are the plain scan's (``PromotingHalving(index=False)``), tie for tie; the test
(tests/search/test_rung_index.py) compares the two on randomised studies:

- a lineage's value at an epoch is the finite value of its lowest-numbered trial in a counted
  state (``COUNTED``) that has one there (the scan's ``setdefault`` in trial order);
- a rung's lineages rank by value, ties by that trial's number (the scan's stable sort of a
  dict filled in trial order); its top is the first ``floor(n / eta)`` (at least one when
  finishing);
- a paused trial is a candidate unless a continuation of it is waiting, running or ended, or
  ``MAX_FAILED_CONTINUATIONS`` of them failed (``continued_parents``); one that paused between
  rungs to widen (``WIDEN_ATTR``) is promotable as it is.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections import Counter
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from search.pruners._lineage import (
    COUNTED,
    MAX_FAILED_CONTINUATIONS,
    PAUSED_ATTR,
    RESUME_OF_ATTR,
    WIDEN_ATTR,
    lineage,
)

Key = tuple[float, float, int]  # (sign x value, the trial that gave it, lineage): rank order


class Unindexable(Exception):
    """The trials do not fit the index (a lineage named after a later trial, a lineage that
    changed): the caller reads them all."""


@dataclass
class _Open:
    """What an unfinished trial gave the index when it was last taken in."""

    trial: FrozenTrial
    lineage: int
    values: dict[int, float]  # epoch -> finite value (a counted state; else empty)
    parent: int | None  # the paused trial it continues (RESUME_OF_ATTR)
    failed: bool


class RungIndex:
    def __init__(self, pruner: Any, study: optuna.Study) -> None:
        self.pruner = pruner
        self.storage = study._storage  # noqa: SLF001 - which study this index is of
        self.study_id = study._study_id  # noqa: SLF001
        self.sign = -1.0 if study.direction == StudyDirection.MAXIMIZE else 1.0
        self.seen = 0  # trials[:seen] are taken in
        self.open: dict[int, _Open] = {}
        self.configurations: dict[int, int] = {}  # lineage start -> configuration number
        self.providers: dict[tuple[int, int], dict[int, float]] = {}  # (epoch, lineage) ->
        self.entry: dict[tuple[int, int], Key] = {}  # (epoch, lineage) -> its rank key
        self.ranked: dict[tuple[int, int], list[Key]] = {}  # (epoch, bracket) -> sorted keys
        self.live: Counter[int] = Counter()  # paused trial -> continuations not failed
        self.failed: Counter[int] = Counter()  # paused trial -> continuations failed
        self.paused: dict[int, tuple[int, int, bool]] = {}  # number -> (epoch, lineage, widen)
        self.candidates: dict[tuple[int, int], set[int]] = {}  # (epoch, lineage) -> numbers
        self.candidate_keys: dict[tuple[int, int], list[Key]] = {}  # (epoch, bracket) -> sorted
        self.widening: set[int] = set()

    def serves(self, study: optuna.Study) -> bool:
        return (study._storage is self.storage and study._study_id == self.study_id  # noqa: SLF001
                and self.sign == (-1.0 if study.direction == StudyDirection.MAXIMIZE else 1.0))

    def bracket(self, n: int) -> int:
        """Lineage ``n``'s bracket (as ``PromotingHalving._bracket_of``)."""
        if self.pruner.brackets == 1:
            return 0
        return self.pruner.bracket(self.configurations.get(n, n))

    # --- taking trials in -------------------------------------------------------------------
    def update(self, trials: list[FrozenTrial]) -> None:
        """Take in what changed: new trials, and unfinished ones whose record is new.
        ``trials``: all of the study's, in number order. Raises :class:`Unindexable`."""
        if len(trials) < self.seen:
            raise Unindexable("fewer trials than before")
        for number, before in list(self.open.items()):
            t = trials[number]
            if t is not before.trial:
                self._take(t, before)
        for t in trials[self.seen:]:
            if t.number != self.seen:
                raise Unindexable(f"trial {t.number} at position {self.seen}")
            self._take(t, None)
            self.seen += 1

    def _take(self, t: FrozenTrial, before: _Open | None) -> None:
        n = lineage(t)
        if before is None:
            if n > t.number:
                raise Unindexable(f"trial {t.number}'s lineage is a later trial, {n}")
            if n == t.number and self.pruner.brackets > 1:
                self.configurations[n] = len(self.configurations)
        elif before.lineage != n or before.trial.number != t.number:
            raise Unindexable(f"trial {t.number}'s lineage changed")
        values = ({e: v for e, v in t.intermediate_values.items() if math.isfinite(v)}
                  if t.state in COUNTED else {})
        old = before.values if before is not None else {}
        for epoch, value in old.items():
            if values.get(epoch) != value:
                self._provide(epoch, n, t.number, None)
        for epoch, value in values.items():
            if old.get(epoch) != value:
                self._provide(epoch, n, t.number, value)
        parent = int(t.user_attrs[RESUME_OF_ATTR]) if RESUME_OF_ATTR in t.user_attrs else None
        failed = t.state == TrialState.FAIL
        touched = set()
        if before is not None and before.parent is not None:
            (self.failed if before.failed else self.live)[before.parent] -= 1
            touched.add(before.parent)
        if parent is not None:
            (self.failed if failed else self.live)[parent] += 1
            touched.add(parent)
        if t.state == TrialState.PRUNED and PAUSED_ATTR in t.user_attrs:
            epoch = int(t.user_attrs[PAUSED_ATTR])
            widen = WIDEN_ATTR in t.system_attrs and not self.pruner._is_rung(  # noqa: SLF001
                self.bracket(n), epoch)
            self.paused[t.number] = (epoch, n, widen)
            touched.add(t.number)
        for p in touched:
            self._candidacy(p)
        if t.state.is_finished():
            self.open.pop(t.number, None)
        else:
            self.open[t.number] = _Open(t, n, values, parent, failed)

    def _provide(self, epoch: int, n: int, number: int, value: float | None) -> None:
        """Trial ``number`` gives lineage ``n`` ``value`` at ``epoch`` (None: no longer)."""
        cell = (epoch, n)
        givers = self.providers.setdefault(cell, {})
        if value is None:
            givers.pop(number, None)
        else:
            givers[number] = value
        first = min(givers) if givers else None
        new = (self.sign * givers[first], first, n) if first is not None else None
        old = self.entry.get(cell)
        if new == old:
            return
        rung = (epoch, self.bracket(n))
        held = bool(self.candidates.get(cell))
        if old is not None:
            _remove(self.ranked[rung], old)
            if held:
                _remove(self.candidate_keys[rung], old)
        if new is None:
            del self.entry[cell]
            return
        self.entry[cell] = new
        insort(self.ranked.setdefault(rung, []), new)
        if held:
            insort(self.candidate_keys.setdefault(rung, []), new)

    def _candidacy(self, number: int) -> None:
        """Paused trial ``number`` is a candidate again, or no longer (its continuations)."""
        if number not in self.paused:
            return
        epoch, n, widen = self.paused[number]
        out = self.live[number] > 0 or self.failed[number] >= MAX_FAILED_CONTINUATIONS
        if widen:
            (self.widening.discard if out else self.widening.add)(number)
            return
        cell = (epoch, n)
        group = self.candidates.setdefault(cell, set())
        was = bool(group)
        (group.discard if out else group.add)(number)
        if was != bool(group) and cell in self.entry:
            keys = self.candidate_keys.setdefault((epoch, self.bracket(n)), [])
            (insort if group else _remove)(keys, self.entry[cell])

    # --- the two questions ------------------------------------------------------------------
    def promotable(self, finishing: bool) -> tuple[list[int], list[int]]:
        """The paused trials in their rung's top (numbers, ascending) and those that paused
        only to widen (ascending): what ``PromotingHalving.promotable`` orders."""
        chosen: list[int] = []
        for (epoch, bracket), keys in self.candidate_keys.items():
            ranked = self.ranked.get((epoch, bracket), [])
            k = len(ranked) // self.pruner.eta
            if finishing and ranked:
                k = max(k, 1)
            if not keys or k == 0:
                continue
            for key in keys[:bisect_right(keys, ranked[k - 1])]:
                chosen.extend(self.candidates[(epoch, key[2])])
        return sorted(chosen), sorted(self.widening)

    def in_top(self, epoch: int, bracket: int, n: int, value: float) -> bool:
        """Whether lineage ``n`` with finite ``value`` at ``epoch`` in place of its own (a
        trial's report as ``prune`` reads it) is in the rung's top ``floor(count / eta)``."""
        ranked = self.ranked.get((epoch, bracket), [])
        old = self.entry.get((epoch, n))
        # The lineage keeps its place among equal values; one without a value comes last.
        new = (self.sign * value, old[1] if old is not None else math.inf, n)
        rank = bisect_left(ranked, new) - (1 if old is not None and old < new else 0)
        count = len(ranked) + (old is None)
        return rank < count // self.pruner.eta


def _remove(keys: list[Key], key: Key) -> None:
    i = bisect_left(keys, key)
    if i == len(keys) or keys[i] != key:
        raise Unindexable(f"rung index lost {key}")
    del keys[i]
