"""Warm starts: earlier studies inform a new one without becoming its trials.

``[strategy] warm_start = ["nb201-c10", { study = "x", storage = "old.journal" }]`` names the
sources. They are only read (storage reads; no study object is opened on them, nothing is
written). What they give the new study:

* Every strategy: on the study's first run (recorded in the study system attribute
  ``detol:warm_start``, so a resumed study does not repeat it), the ``warm_start_top`` best
  transferred candidates are enqueued as ordinary trials, each with the user attribute
  ``transferred_from = "SOURCE#NUMBER"``. They are real evaluations of the new study and count
  toward its budget; the source trials themselves are never copied.
* The predictor strategy also learns from every finished source trial (:func:`prior`).

Each source trial's parameters are restricted to this study's space (a dimension of the same name
whose value the new dimension holds; the genome when it is one of this study's family); what a
source lacks, the sampler draws. Values are rank-normalised per source (1: its best trial,
0: its worst), so sources on other datasets or metrics compare by rank, not by value.

>>> rank_quantiles([3.0, 1.0, 2.0], maximize=True).tolist()
[1.0, 0.0, 0.5]
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.storages import BaseStorage
from optuna.study import StudyDirection
from optuna.trial import TrialState

import spaces
from search._errors import StudyError, words
from search.strategies import PredictorSampler
from search.strategies._base import GENOME, candidate_key, family_of, scalar_distributions
from search.studyfile._sections import DEFAULT_WARM_START_TOP, WarmSource
from search.studyfile._study_file import StudyFile
from training.contract import open_storage, redact, storage_file

TRANSFERRED_FROM = "transferred_from"  # user attr of an enqueued trial: "SOURCE#NUMBER"
DONE_ATTR = "detol:warm_start"  # study system attr: the candidates enqueued (once per study)
_FIELD = "strategy.warm_start"


@dataclass(frozen=True)
class SourceTrial:
    """A finished trial of a source: its parameters restricted to this study's space and its
    rank quantile in its own study (1: the source's best)."""

    number: int
    params: dict[str, Any]
    score: float


@dataclass(frozen=True)
class Source:
    name: str
    where: str  # the storage, redacted, or "this study's storage"
    trials: tuple[SourceTrial, ...]  # complete ones, best first
    common: tuple[str, ...]  # this study's dimensions that the source's trials give values for


def rank_quantiles(values: Sequence[float], *, maximize: bool) -> np.ndarray:
    """Each value's rank among ``values`` scaled to [0, 1], 1 for the best (ties share their
    mean rank; a single value scores 1)."""
    v = np.asarray(values, dtype=float) * (1.0 if maximize else -1.0)
    if len(v) < 2:
        return np.ones(len(v))
    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v))
    ranks[order] = np.arange(len(v), dtype=float)
    for value in np.unique(v):  # ties: the mean of their ranks
        same = v == value
        ranks[same] = ranks[same].mean()
    return ranks / (len(v) - 1)


def restrict(
    space: spaces.Space, dists: dict[str, BaseDistribution], params: dict[str, Any]
) -> dict[str, Any]:
    """``params`` (a source trial's) reduced to what this ``space`` can take: each scalar
    dimension of the same name whose distribution holds the value and whose condition holds,
    and the genome when the parameters make a genome of this space's family."""
    family = family_of(space)
    out: dict[str, Any] = {}
    for name in space:  # conditions come first
        if name == GENOME:
            assert family is not None
            try:
                genome = family.from_params(params, prefix=GENOME)
            except (ValueError, KeyError, TypeError, IndexError):
                continue
            out |= family.to_params(genome, prefix=GENOME)
        elif name in params and name in dists and space.is_active(name, out):
            dist = dists[name]
            try:
                if dist._contains(dist.to_internal_repr(params[name])):  # noqa: SLF001
                    out[name] = params[name]
            except (ValueError, TypeError):
                pass
    return out


def _common(space: spaces.Space, restricted: list[dict[str, Any]]) -> tuple[str, ...]:
    found = {GENOME if k.startswith(GENOME + ".") else k for p in restricted for k in p}
    return tuple(name for name in space if name in found)


def _open(src: WarmSource, i: int, storage: BaseStorage | None, url: str) -> tuple[BaseStorage,
                                                                                     str]:
    """The source's storage, opened for reading only: a file that does not exist is an error,
    never created."""
    if src.storage is None:
        if storage is None:
            raise StudyError(f"{_FIELD}[{i}]", f"no study {src.study!r} in {redact(url)} "
                             "(the storage does not exist yet)")
        return storage, redact(url) if url else "this study's storage"
    where = redact(src.storage)
    path = storage_file(src.storage)
    if path is not None and not Path(path).expanduser().is_file():
        raise StudyError(f"{_FIELD}[{i}].storage", f"no storage file {path!r}")
    try:
        return open_storage(src.storage), where
    except ValueError as exc:
        raise StudyError(f"{_FIELD}[{i}].storage", str(exc)) from None


def _same_storage(a: str, b: str) -> bool:
    fa, fb = storage_file(a), storage_file(b)
    if fa is not None and fb is not None:
        return os.path.realpath(os.path.expanduser(fa)) == os.path.realpath(os.path.expanduser(fb))
    return a == b


def load_sources(sf: StudyFile, *, storage: BaseStorage | None, url: str = "") -> list[Source]:
    """Read every source of ``sf``'s warm start (``storage``/``url``: this study's). StudyError,
    naming the source, for one that is this study, does not exist, is not a single-objective
    study, holds no finished trial, or has nothing in common with this study's space."""
    space = sf.search_space
    dists = scalar_distributions(space)
    out = []
    for i, src in enumerate(sf.strategy.warm_start or []):
        if src.study == sf.name and (src.storage is None or (url and _same_storage(src.storage,
                                                                                   url))):
            raise StudyError(f"{_FIELD}[{i}]", f"{src.study!r} is this study itself: name an "
                             "earlier study")
        store, where = _open(src, i, storage, url)
        try:
            sid = store.get_study_id_from_name(src.study)
        except KeyError:
            known = optuna.get_all_study_names(store)
            raise StudyError(f"{_FIELD}[{i}]", f"no study {src.study!r} in {where} (it holds: "
                             f"{words(sorted(known)) or 'no study'})") from None
        directions = store.get_study_directions(sid)
        if len(directions) != 1:
            raise StudyError(f"{_FIELD}[{i}]", f"study {src.study!r} in {where} has "
                             f"{len(directions)} objectives; a warm start reads one")
        done = [t for t in store.get_all_trials(sid, deepcopy=False, states=(TrialState.COMPLETE,))
                if t.values is not None and math.isfinite(t.values[0])]
        if not done:
            raise StudyError(f"{_FIELD}[{i}]", f"study {src.study!r} in {where} holds no "
                             "complete trial to learn from")
        restricted = [restrict(space, dists, t.params) for t in done]
        common = _common(space, restricted)
        if not common:
            have = sorted({GENOME if k.startswith(GENOME + ".") else k
                           for t in done for k in t.params})
            family = family_of(space)
            raise StudyError(f"{_FIELD}[{i}]", f"study {src.study!r} in {where} has nothing in "
                             f"common with this study's space: no dimension of the same name "
                             f"with values this study allows (it has: {words(have) or 'none'})"
                             + (f" and no genome of the {family.name!r} family"
                                if family is not None else ""))
        scores = rank_quantiles([t.values[0] for t in done],
                                maximize=directions[0] == StudyDirection.MAXIMIZE)
        trials = sorted((SourceTrial(t.number, p, float(s))
                         for t, p, s in zip(done, restricted, scores, strict=True)),
                        key=lambda st: (-st.score, st.number))
        out.append(Source(src.study, where, tuple(trials), common))
    return out


def candidates(
    sources: Sequence[Source], space: spaces.Space, k: int, taken: set[Any] | None = None
) -> list[tuple[dict[str, Any], str]]:
    """The ``k`` best transferred candidates, ``(params, "SOURCE#NUMBER")``: across sources the
    best by rank quantile (earlier sources first on ties), one per candidate key (isomorphic cells
    are one), none whose key is in ``taken``."""
    pool = sorted(((st.score, i, st) for i, src in enumerate(sources) for st in src.trials),
                  key=lambda x: (-x[0], x[1], x[2].number))
    seen = set(taken or ())
    out: list[tuple[dict[str, Any], str]] = []
    for _, i, st in pool:
        if len(out) >= k:
            break
        if not st.params:
            continue
        key = candidate_key(space, st.params)
        if key is None:  # the sampler draws what the source lacks: compare what it gave
            key = ("partial", *sorted((n, repr(v)) for n, v in st.params.items()))
        if key in seen:
            continue
        seen.add(key)
        out.append((dict(st.params), f"{sources[i].name}#{st.number}"))
    return out


def prior(sources: Sequence[Source]) -> list[tuple[dict[str, Any], float]]:
    """Every finished source trial as (params restricted to this space, rank quantile in its
    source: 1 best): what a learning strategy may start from."""
    return [(dict(st.params), st.score) for src in sources for st in src.trials if st.params]


def apply(study: optuna.Study, sf: StudyFile, sources: Sequence[Source]) -> list[str]:
    """Enqueue the best transferred candidates unless this study did so before (capped at the
    budget); hand the prior to a strategy that learns from one. Returns the enqueued labels."""
    if not sources:
        return []
    _hand_prior(study.sampler, sources)
    storage, sid = study._storage, study._study_id  # noqa: SLF001 - no public system attrs
    if DONE_ATTR in storage.get_study_system_attrs(sid):
        return []
    space = sf.search_space
    k = sf.strategy.warm_start_top
    k = min(DEFAULT_WARM_START_TOP if k is None else k, sf.budget.trials)
    taken = {candidate_key(space, t.params) for t in study.get_trials(deepcopy=False)}
    chosen = candidates(sources, space, k, taken - {None})
    for params, label in chosen:
        study.enqueue_trial(params, user_attrs={TRANSFERRED_FROM: label}, skip_if_exists=False)
    storage.set_study_system_attr(
        sid, DONE_ATTR,
        {"sources": [f"{s.name} ({s.where})" for s in sources],
         "enqueued": [label for _, label in chosen]},
    )
    return [label for _, label in chosen]


def duplicate_of(study: optuna.Study, number: int, attrs: dict[str, Any]) -> str | None:
    """Why trial ``number`` (user attributes ``attrs``), just taken from the queue, must not
    run, or None: it is a transferred
    candidate queued twice. :func:`apply` writes ``detol:warm_start`` after it checks for it, so
    two drivers that open a new study at the same moment may both queue the candidates; the copy
    with the lower number is the one that runs (whichever driver takes it), a later copy is
    told FAIL with this reason and is not a trial of the budget."""
    label = attrs.get(TRANSFERRED_FROM)
    if label is None:
        return None
    for t in study._storage.get_all_trials(study._study_id, deepcopy=False):  # noqa: SLF001
        if (t.number < number and t.state != TrialState.FAIL
                and t.user_attrs.get(TRANSFERRED_FROM) == label):
            return (f"duplicate of trial {t.number}: the warm-start candidate {label} was "
                    "queued twice (two drivers opened the new study at once); not run")
    return None


def _hand_prior(sampler: optuna.samplers.BaseSampler, sources: Sequence[Source]) -> None:
    """The predictor strategy learns from every finished source trial (its ``set_prior``)."""
    if isinstance(sampler, PredictorSampler):
        sampler.set_prior(prior(sources))
