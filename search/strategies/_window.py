"""What keeps a model-based proposal's cost bounded as a study grows: a window of the trials the
model is fitted on, and an incremental grouped search space.

**The window** (TPE's and GP's ``window`` option): once a study holds more finished trials than
the window, the model sees the best ones of *all* trials (``best`` of them: for TPE exactly its
"good" set, so that set is the same as without the window) plus the most recent others (by
trial number), ``size`` in all. On several objectives "the best" is the Pareto front of all
trials (kept incrementally), then the most recent. Optuna's TPE fits a Parzen estimator on every
trial and GP a Gaussian process (cubic), so without a window one proposal at 10,000 trials
costs 150 ms (TPE) and many seconds (GP).

**The grouped search space** (TPE with ``group=True``): Optuna's
``_GroupDecomposedSearchSpace`` re-reads every finished trial's distributions on every ask;
adding a trial twice changes nothing (its groups are already split along its names), so
:class:`IncrementalGroupSpace` adds each finished trial once and gives the same groups in the
same order.
"""

from __future__ import annotations

import copy
import heapq
import math
from typing import Any

from optuna.search_space.group_decomposed import _GroupDecomposedSearchSpace, _SearchSpaceGroup
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from search.strategies._base import study_key


class WindowedStudy:
    """``study`` as a model-based sampler sees it: ``_get_trials`` answers from ``trials`` (the
    window) filtered by state; everything else (directions, storage, ids) is the study's."""

    def __init__(self, study: Study, trials: list[FrozenTrial]) -> None:
        self._study = study
        self._trials = trials

    def _get_trials(
        self,
        deepcopy: bool = True,
        states: Any = None,
        use_cache: bool = False,
    ) -> list[FrozenTrial]:
        trials = self._trials if states is None else [
            t for t in self._trials if t.state in states
        ]
        return copy.deepcopy(trials) if deepcopy else trials

    def get_trials(self, deepcopy: bool = True, states: Any = None) -> list[FrozenTrial]:
        return self._get_trials(deepcopy=deepcopy, states=states)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)


class Window:
    """The trials a model is fitted on (see the module docstring), one study's. What it needs of
    the whole study -- the best COMPLETE trials (one objective) or the Pareto front (several) --
    is kept incrementally: each finished trial is looked at once."""

    def __init__(self) -> None:
        self._seen: set[int] = set()  # trial numbers looked at
        self._heap: list[tuple[float, int, FrozenTrial]] = []  # the best: (reward, -number, t)
        self._capacity = 0
        self._front: list[FrozenTrial] = []
        self._scanned = False  # every trial looked at once (since the heap was last reset)

    def pick(
        self,
        study: Study,
        trials: list[FrozenTrial],
        *,
        size: int,
        best: int,
        fresh: list[FrozenTrial] | None = None,
    ) -> list[FrozenTrial]:
        """``trials`` (in trial number order) itself when no more than ``size``; else the
        ``best`` best COMPLETE ones of them (one objective; the Pareto front, at most
        ``size // 2`` of it, on several) and the most recent others, ``size`` in all, in trial
        number order. ``fresh``: a caller that keeps ``trials`` incrementally names the ones
        added since its last call, and only those are looked at for the best."""
        if len(trials) <= size:
            return trials
        best = min(best, size)
        multi = len(study.directions) > 1
        if not multi and best > self._capacity:  # (only when a custom gamma grows)
            self._seen, self._heap, self._capacity = set(), [], best
            self._scanned = False
        signs = [1.0 if d == StudyDirection.MAXIMIZE else -1.0 for d in study.directions]
        seen, complete = self._seen, TrialState.COMPLETE
        # the first look goes over every trial; later ones over the fresh, when named
        looked_at = trials if fresh is None or not self._scanned else fresh
        self._scanned = True
        for t in looked_at:  # (complete trials only: a pruned one is modelled when recent)
            if t.state != complete or t.number in seen or not t.values:
                continue
            seen.add(t.number)
            if multi:
                self._add_to_front(t, signs)
            elif not math.isnan(t.values[0]):
                item = (signs[0] * t.values[0], -t.number, t)
                if len(self._heap) < self._capacity:
                    heapq.heappush(self._heap, item)
                elif self._heap and item[:2] > self._heap[0][:2]:  # (best=0: none kept)
                    heapq.heapreplace(self._heap, item)
        if multi:
            top = self._front[-(size // 2):]
        else:
            top = [item[2] for item in heapq.nlargest(best, self._heap, key=lambda i: i[:2])]
        keep = {t.number for t in top}
        recent: list[FrozenTrial] = []
        for t in reversed(trials):
            if len(recent) + len(keep) >= size:
                break
            if t.number not in keep:
                recent.append(t)
        return sorted([*top, *recent], key=lambda t: t.number)

    def _add_to_front(self, t: FrozenTrial, signs: list[float]) -> None:
        v = [s * x for s, x in zip(signs, t.values, strict=True)]
        front = []
        for f in self._front:
            w = [s * x for s, x in zip(signs, f.values, strict=True)]
            if all(a >= b for a, b in zip(w, v, strict=True)):
                return  # dominated (an equal point too: kept once)
            if not all(a >= b for a, b in zip(v, w, strict=True)):
                front.append(f)
        self._front = [*front, t]


class IncrementalGroupSpace(_GroupDecomposedSearchSpace):
    """Optuna's grouped search space, adding each finished trial's distributions once (see the
    module docstring), kept per study (``study_key``): where Optuna's refuses a second study of
    its storage and mixes two in-memory studies (both have id 0), a sampler given to several
    studies gets each one's own groups."""

    def __init__(self, include_pruned: bool = False) -> None:
        super().__init__(include_pruned)
        self._studies: dict[tuple[int, int], tuple[_SearchSpaceGroup, set[int]]] = {}

    def calculate(self, study: Study, use_cache: bool = False) -> _SearchSpaceGroup:
        groups, added = self._studies.setdefault(study_key(study), (_SearchSpaceGroup(), set()))
        states = (
            (TrialState.COMPLETE, TrialState.PRUNED)
            if self._include_pruned
            else (TrialState.COMPLETE,)
        )
        trials = study._get_trials(  # noqa: SLF001
            deepcopy=False, states=states, use_cache=use_cache
        )
        for trial in trials:
            if trial.number not in added:
                added.add(trial.number)
                groups.add_distributions(trial.distributions)
        return copy.deepcopy(groups)
