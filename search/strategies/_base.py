"""What the space-aware samplers share: a whole proposal per trial, served name by name.

Evolution and REINFORCE decide a trial's parameters jointly (a mutated genome, a policy draw), but
Optuna asks for them one at a time, define-by-run. :class:`ProposalSampler` computes the proposal
on the first ``sample_independent`` call of a trial and answers every later call from it; a name
the proposal lacks (or a value the asked distribution does not hold) falls back to random.

Proposals are built by running ``space.suggest`` against a :class:`Recorder`, a stand-in trial that
answers each ``suggest_*`` from a chooser (uniform, a policy, ...) and records the distributions:
the names and choices come out exactly as ``space.suggest(trial)`` asks for them, genome included.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import weakref
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalChoiceType,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

import spaces

# + a parameter name: a system attribute on a trial whose value for that name was drawn at
# random because the strategy's proposal had none for it (an edited space, a name the
# objective asks for outside the space).
FALLBACK_ATTR = "detol:fallback:"
GENOME = "genome"  # the name a genome family has in a study's space
# A chooser answers one decision: (rng, name, distribution) -> external value.
Chooser = Callable[[np.random.Generator, str, BaseDistribution], Any]

_ALL_STATES = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING, TrialState.PRUNED)

# storage object -> a number, in this process (study_key)
_STORAGES: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_STORAGE_NUMBERS = itertools.count()


def study_key(study: Study) -> tuple[int, int]:
    """A study's identity for a sampler's caches: its storage object (numbered in this process)
    and its id. The id alone is not one: every in-memory storage's first study has id 0, and a
    sampler given to two such studies modelled the first one's trials in the second. Another
    storage object for the same study (a resumed run) is a fresh key: the caches rebuild."""
    storage = study._storage  # noqa: SLF001
    try:
        number = _STORAGES.get(storage)
        if number is None:
            number = _STORAGES[storage] = next(_STORAGE_NUMBERS)
    except TypeError:  # a storage that is not hashable or weakly referenceable: its id
        number = id(storage)
    return number, study._study_id  # noqa: SLF001


def uniform_choice(rng: np.random.Generator, name: str, dist: BaseDistribution) -> Any:
    """A uniform draw from ``dist`` (log-uniform for log scales, on the step grid)."""
    if isinstance(dist, CategoricalDistribution):
        return dist.choices[int(rng.integers(len(dist.choices)))]
    assert isinstance(dist, FloatDistribution | IntDistribution), name
    return from_unit(dist, float(rng.random()))


def to_unit(dist: FloatDistribution | IntDistribution, value: float) -> float:
    """A numeric value mapped to [0, 1] (log scale when the distribution has one)."""
    low, high, x = float(dist.low), float(dist.high), float(value)
    if dist.log:
        low, high, x = math.log(low), math.log(high), math.log(x)
    return 0.0 if high == low else min(1.0, max(0.0, (x - low) / (high - low)))


def from_unit(dist: FloatDistribution | IntDistribution, u: float) -> float | int:
    """The inverse of :func:`to_unit`, rounded onto the distribution's grid."""
    low, high = float(dist.low), float(dist.high)
    u = min(1.0, max(0.0, u))
    x = math.exp(math.log(low) + u * (math.log(high) - math.log(low))) if dist.log else (
        low + u * (high - low)
    )
    if isinstance(dist, IntDistribution):
        step = dist.step
        return int(min(dist.high, max(dist.low, dist.low + round((x - dist.low) / step) * step)))
    if dist.step is not None:
        n = round((x - low) / dist.step)
        return float(min(high, max(low, low + n * dist.step)))
    return float(min(high, max(low, x)))


class Recorder:
    """A stand-in trial for ``space.suggest``: each decision comes from ``chooser``; the params
    and distributions it was asked for are recorded, in order."""

    def __init__(self, chooser: Chooser, rng: np.random.Generator) -> None:
        self.chooser = chooser
        self.rng = rng
        self.params: dict[str, Any] = {}
        self.distributions: dict[str, BaseDistribution] = {}

    def _ask(self, name: str, dist: BaseDistribution) -> Any:
        if name not in self.params:
            self.params[name] = self.chooser(self.rng, name, dist)
            self.distributions[name] = dist
        return self.params[name]

    def suggest_categorical(self, name: str, choices: Sequence[CategoricalChoiceType]) -> Any:
        return self._ask(name, CategoricalDistribution(tuple(choices)))

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float:
        return self._ask(name, FloatDistribution(low, high, step=step, log=log))

    def suggest_int(
        self, name: str, low: int, high: int, *, step: int = 1, log: bool = False
    ) -> int:
        return self._ask(name, IntDistribution(low, high, step=step, log=log))


def draw(space: spaces.Space, chooser: Chooser, rng: np.random.Generator) -> Recorder:
    """Run ``space.suggest`` against a :class:`Recorder`; returns it (params, distributions)."""
    recorder = Recorder(chooser, rng)
    space.suggest(recorder)  # type: ignore[arg-type]  # duck-typed trial
    return recorder


def scalar_distributions(space: spaces.Space) -> dict[str, BaseDistribution]:
    """Each scalar dimension's distribution, conditional ones included (a single draw would
    leave out those whose condition it did not meet)."""
    recorder = Recorder(uniform_choice, np.random.default_rng(0))
    for name, dim in space.items():
        if name != GENOME:
            dim.suggest(recorder, name)  # type: ignore[arg-type]  # duck-typed trial
    return recorder.distributions


def consistent(
    space: spaces.Space,
    params: dict[str, Any],
    dists: dict[str, BaseDistribution],
    rng: np.random.Generator,
) -> dict[str, Any]:
    """``params`` as ``space.suggest`` could have made them: a dimension whose condition fails
    is dropped, one whose condition holds but that ``params`` lacks is drawn uniformly (after a
    mutation or crossover changed the value a condition names)."""
    out: dict[str, Any] = {}
    for name in space:  # conditions come first
        if name == GENOME:
            out |= {k: v for k, v in params.items() if k.startswith(GENOME + ".")}
        elif space.is_active(name, out):
            out[name] = params[name] if name in params else uniform_choice(rng, name, dists[name])
    return out


def family_of(space: spaces.Space) -> spaces.GenomeFamily | None:
    dim = space.get(GENOME)
    return dim if isinstance(dim, spaces.GenomeFamily) else None


def genome_or_fresh(
    family: spaces.GenomeFamily, params: dict[str, Any], rng: np.random.Generator
) -> spaces.Genome:
    """The genome in ``params``, or a random one when ``params`` hold none of this family: a
    parent from before ``[space]`` gained its genome or changed family (define-by-run: what a
    parent lacks is sampled)."""
    try:
        return family.from_params(params, prefix=GENOME)
    except (ValueError, KeyError, TypeError, IndexError):
        return family.sample(rng)


def with_genome(
    space: spaces.Space, params: dict[str, Any], rng: np.random.Generator
) -> dict[str, Any]:
    """``params`` whose genome parameters are a valid genome of ``space``'s family (the
    parent's, or a fresh one when it has none); unchanged without a family."""
    family = family_of(space)
    if family is None:
        return params
    genome = genome_or_fresh(family, params, rng)
    out = {k: v for k, v in params.items() if not k.startswith(GENOME + ".")}
    return out | family.to_params(genome, prefix=GENOME)


def candidate_key(space: spaces.Space, params: dict[str, Any]) -> tuple[Any, ...] | None:
    """What makes two trials the same candidate: the genome's canonical key (isomorphic cells
    are one network) and the values of the scalar dimensions that apply to it (a dimension whose
    condition fails counts as absent, whatever ``params`` hold). None when ``params`` is
    incomplete."""
    family = family_of(space)
    scalars: list[str | None] = []
    for name in space:
        if name == GENOME:
            continue
        if not space.is_active(name, params):
            scalars.append(None)
            continue
        if name not in params:
            return None
        scalars.append(repr(params[name]))
    if family is None:
        return ("", *scalars)
    try:
        genome = family.from_params(params, prefix=GENOME)
    except ValueError:
        return None
    return (genome.key, *scalars)


def trials_of_this_ask(study: Study, states: tuple[TrialState, ...]) -> list[FrozenTrial]:
    """The study's trials in ``states`` from Optuna's per-ask snapshot (``use_cache``: read from
    storage once per ``ask``, shared with Optuna's own samplers and cleared by ``ask`` and
    ``tell``), so a proposal reads the study once, not once per helper."""
    return study._get_trials(deepcopy=False, states=states, use_cache=True)  # noqa: SLF001


class KeyCache:
    """What :func:`seen_keys` remembers between proposals: per study, the candidate keys of the
    trials that finished for good (complete or pruned: their parameters never change) and which
    trials those were; per unfinished trial, its key with the parameter count it came from."""

    def __init__(self) -> None:
        # study (study_key) -> ids of its complete / pruned trials seen; -> their candidate keys
        self.done: dict[tuple[int, int], set[int]] = {}
        self.final: dict[tuple[int, int], set[tuple[Any, ...]]] = {}
        self.open: dict[tuple[tuple[int, int], int], tuple[int, tuple[Any, ...] | None]] = {}


_FINAL = frozenset((TrialState.COMPLETE, TrialState.PRUNED))


def seen_keys(
    study: Study,
    exclude: int,
    cache: KeyCache,
    key_of: Callable[[dict[str, Any]], tuple[Any, ...] | None],
    params_of: Callable[[FrozenTrial], dict[str, Any]] = lambda t: t.params,
) -> set[tuple[Any, ...]]:
    """Candidate keys (``key_of(params_of(trial))``) of every trial that ran, runs or waits
    (failed ones and trial id ``exclude`` excepted). Incremental: a complete or pruned trial's
    key is computed once and kept in ``cache.final``; a running or waiting trial's parameters
    only grow (define-by-run), so its key is cached with the parameter count it came from. A
    proposal at 10,000 trials computes the keys of the trials that changed since the last one."""
    sid = study_key(study)
    done = cache.done.setdefault(sid, set())
    final = cache.final.setdefault(sid, set())
    running: set[tuple[Any, ...]] = set()
    for t in trials_of_this_ask(study, _ALL_STATES):
        tid = t._trial_id  # noqa: SLF001
        if tid in done or tid == exclude:
            continue
        params = params_of(t)
        if t.state == TrialState.WAITING:  # enqueued: Optuna keeps its values aside until ask
            params = {**t.system_attrs.get("fixed_params", {}), **params}
        where = (sid, tid)
        hit = cache.open.get(where)
        if hit is not None and hit[0] == len(params):
            key = hit[1]
        else:
            key = key_of(params)
            cache.open[where] = (len(params), key)
        if t.state in _FINAL:
            done.add(tid)
            del cache.open[where]
            if key is not None:
                final.add(key)
        elif key is not None:
            running.add(key)
    if len(cache.open) > 100_000:  # keys of trials that failed while running
        cache.open.clear()
    return final | running if running else set(final)


def sign(study: Study) -> float:
    """+1 to maximise, -1 to minimise the (single) objective: ``sign * value`` is a reward."""
    return 1.0 if study.direction == StudyDirection.MAXIMIZE else -1.0


def complete_in_order(study: Study) -> list[FrozenTrial]:
    """COMPLETE trials with a finite value, in the order they finished (then by number)."""
    done = [
        t
        for t in trials_of_this_ask(study, (TrialState.COMPLETE,))
        if t.values is not None and len(t.values) == 1 and math.isfinite(t.values[0])
    ]
    done.sort(key=lambda t: (t.datetime_complete or t.datetime_start, t.number))
    return done


class CompleteSoFar:
    """:func:`complete_in_order` kept incrementally, per study: each COMPLETE trial is looked
    at once (its values and parameters never change again) and put in place by bisection, so
    a proposal at 10,000 trials sorts nothing. ``keep(study, trial)`` filters the trials once,
    as they arrive. A call answers (in the order they finished, in trial number order, the
    trials new since the last call); the first two are the kept lists themselves, read only."""

    def __init__(self, keep: Callable[[Study, FrozenTrial], bool] | None = None) -> None:
        self._keep = keep
        self._seen: dict[tuple[int, int], set[int]] = {}  # study_key -> trial ids looked at
        self._by_finish: dict[tuple[int, int], list[FrozenTrial]] = {}
        self._by_number: dict[tuple[int, int], list[FrozenTrial]] = {}

    def __call__(
        self, study: Study
    ) -> tuple[list[FrozenTrial], list[FrozenTrial], list[FrozenTrial]]:
        sid = study_key(study)
        seen = self._seen.setdefault(sid, set())
        by_finish = self._by_finish.setdefault(sid, [])
        by_number = self._by_number.setdefault(sid, [])
        fresh: list[FrozenTrial] = []
        for t in trials_of_this_ask(study, (TrialState.COMPLETE,)):
            tid = t._trial_id  # noqa: SLF001
            if tid in seen:
                continue
            seen.add(tid)
            if t.values is None or len(t.values) != 1 or not math.isfinite(t.values[0]):
                continue
            if self._keep is not None and not self._keep(study, t):
                continue
            fresh.append(t)
            bisect.insort(by_finish, t, key=_finish_order)
            bisect.insort(by_number, t, key=_number)
        return by_finish, by_number, fresh


def _finish_order(t: FrozenTrial) -> tuple[Any, int]:
    return (t.datetime_complete or t.datetime_start, t.number)


def _number(t: FrozenTrial) -> int:
    return t.number


class LatestComplete:
    """The ``size`` most recently finished COMPLETE trials with a finite value, in the order
    they finished (then by number): the tail of :func:`complete_in_order`, kept incrementally
    (each trial is looked at once; a complete trial never changes), per study."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._seen: dict[tuple[int, int], set[int]] = {}  # study_key -> trial numbers looked at
        # study_key -> its heap of (finished, number, trial)
        self._heap: dict[tuple[int, int], list[tuple[Any, int, FrozenTrial]]] = {}

    def __call__(self, study: Study) -> list[FrozenTrial]:
        sid = study_key(study)
        seen = self._seen.setdefault(sid, set())
        heap = self._heap.setdefault(sid, [])
        for t in trials_of_this_ask(study, (TrialState.COMPLETE,)):
            if t.number in seen:
                continue
            seen.add(t.number)
            if t.values is None or len(t.values) != 1 or not math.isfinite(t.values[0]):
                continue
            item = (t.datetime_complete or t.datetime_start, t.number, t)
            if len(heap) < self._size:
                heapq.heappush(heap, item)
            elif item[:2] > heap[0][:2]:
                heapq.heapreplace(heap, item)
        return [item[2] for item in sorted(heap, key=lambda i: i[:2])]


def trial_seed(seed: int, number: int) -> np.random.Generator:
    """The generator for trial ``number``: same seed, same trial -> same stream, in any process."""
    return np.random.default_rng([seed & (2**63 - 1), number])


class ProposalSampler(optuna.samplers.BaseSampler):
    """Base for samplers that propose a trial's parameters jointly (see the module docstring).

    Subclasses implement :meth:`propose`. The proposal is computed once per trial, lazily, and
    cached until the trial is told; names it lacks are sampled at random.
    """

    def __init__(self, *, space: spaces.Space, seed: int | None) -> None:
        if not isinstance(space, spaces.Space):
            raise TypeError(f"space: expected a spaces.Space, got {type(space).__name__}")
        self._space = space
        entropy = int(np.random.SeedSequence().entropy)  # type: ignore[arg-type]
        self._seed = entropy % 2**63 if seed is None else seed
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._proposals: dict[tuple[tuple[int, int], int], dict[str, Any]] = {}  # (study, trial id)
        self._keys = KeyCache()

    @abstractmethod
    def propose(self, study: Study, trial: FrozenTrial, rng: np.random.Generator) -> dict[str, Any]:
        """The parameters for ``trial`` (external values, by parameter name)."""

    def seen_keys(self, study: Study, exclude: int) -> set[tuple[Any, ...]]:
        """Candidate keys of every trial that ran, runs or waits (failed ones excepted)."""
        return seen_keys(
            study, exclude, self._keys, lambda params: candidate_key(self._space, params)
        )

    def random_unique(
        self, rng: np.random.Generator, seen: set[tuple[Any, ...]], tries: int = 100
    ) -> dict[str, Any]:
        """A uniform draw from the space, a candidate not in ``seen`` when one is found."""
        params: dict[str, Any] = {}
        for _ in range(tries):
            params = draw(self._space, uniform_choice, rng).params
            if candidate_key(self._space, params) not in seen:
                break
        return params

    # -- BaseSampler -------------------------------------------------------------------------

    def reseed_rng(self) -> None:
        """New proposals from here on: proposals come from the seed and the trial number (so
        that every process agrees), and the seed is what changes."""
        self._seed = int(np.random.SeedSequence().entropy) % 2**63  # type: ignore[arg-type]
        self._random.reseed_rng()

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        self._raise_error_if_multi_objective(study)  # a single-objective strategy says so
        return {}

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        self._raise_error_if_multi_objective(study)
        tid = trial._trial_id  # noqa: SLF001
        where = (study_key(study), tid)
        proposal = self._proposals.get(where)  # a local: other threads may clear the cache
        if proposal is None:
            if len(self._proposals) > 10_000:  # trials asked but never told (crashed callers)
                self._proposals.clear()
            proposal = self.propose(study, trial, trial_seed(self._seed, trial.number))
            self._proposals[where] = proposal
        if param_name in proposal:
            value = proposal[param_name]
            try:
                if param_distribution._contains(param_distribution.to_internal_repr(value)):  # noqa: SLF001
                    return value
            except (ValueError, TypeError):
                pass
        # Not the strategy's decision: marked, so a learner (REINFORCE) does not learn from it.
        study._storage.set_trial_system_attr(tid, FALLBACK_ATTR + param_name, True)  # noqa: SLF001
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._proposals.pop((study_key(study), trial._trial_id), None)  # noqa: SLF001
