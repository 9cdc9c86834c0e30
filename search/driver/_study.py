"""Opening the Optuna study for a study file: create on first run, resume afterwards."""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from search._errors import StudyError
from search.driver import _warm_start as warm_start
from search.driver._resize import KEPT_ATTR, SEGMENTS_ATTR, WIDTH_ATTR
from search.pruners._promotion import (
    LINEAGE_ATTR,
    LINEAGE_EPOCHS_ATTR,
    LINEAGE_TOTALS,
    RESUME_OF_ATTR,
)
from search.storage._checkpoint_store import check_store, fix_store
from search.strategies._registry import build_sampler, pruner_spec, resolve
from search.studyfile._study_file import StudyFile
from training.contract import CHECKPOINT_ATTR, FREE_ON_RESTORE, USED_BY, TrainConfig
from training.launch import pid_alive

DRIVER_ATTR = "detol:driver"
HEARTBEAT_ATTR = "detol:heartbeat"  # wall-clock time the owning driver last saw the trial alive
HEARTBEAT_S = 30.0  # how often a driver renews it
STALE_AFTER_S = 180.0  # a trial of another host whose heartbeat is older than this is orphaned
RETRY_ATTR = "detol:retry_of"  # on a re-queued trial: the number of the trial it repeats
ATTEMPT_ATTR = "detol:attempt"  # 1 for a first run, 2 for its first retry, ...
# On a trial that continues from a checkpoint: {"id": artifact id, "epoch", "trial": its writer}.
RESUME_FROM_ATTR = "detol:resume_from"


def driver_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def driver_beat_key(owner: str) -> str:
    """The study attribute that holds driver ``owner``'s last heartbeat (wall-clock time): one
    write per ``HEARTBEAT_S`` for all its running trials, however many run."""
    return f"{HEARTBEAT_ATTR}:{owner}"


STRATEGY_ATTR = "detol:strategy"  # the strategy the study runs (what `auto` chose), by name
STUDY_ATTR = "detol:study"  # the validated study file the study was made with (its latest form)
CHANGES_ATTR = "detol:study_changes"  # the accepted changes, one entry per run that made some

# Keys of the study file that only say how (or how long) to run: changing them keeps every trial
# comparable. Strategy and pruner change which trials are run, not what a trial means: allowed,
# and said. Anything else (objective, metric, direction, [training], [space]) changes what a
# trial's value means: refused. The [training] settings that may change are exactly those a
# checkpoint restores across (training.storage._artifacts.FREE_ON_RESTORE, less ``epochs``, which
# changes what a trial's value means, and ``ranks``, which changes asgd's, localsgd's and
# simuparallel's results: a width the trial's checkpoints restore across (training.state._reshard),
# but for the study a setting of what is trained; ``[resize]`` changes widths per segment):
# a paused trial stays promotable whatever changes here.
_HOW_TO_RUN = ("name", "storage", "budget.", "cluster.", "launcher.", "checkpoints.",
               *(f"training.{k}" for k in FREE_ON_RESTORE if k not in ("epochs", "ranks")))
_DECIDERS = ("strategy.", "pruner.")


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): data}


def _changes(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """What differs, leaving out what cannot change any trial: a training field that a newer
    detol added, set to its default (the old trials ran as that default says), and a field
    that only algorithms neither study can run read (``send_every`` of a sync study)."""
    a, b = _flat(old), _flat(new)
    defaults = _flat(json.loads(TrainConfig().model_dump_json()), "training.")
    algorithms = _algorithms(old) | _algorithms(new)
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) == b.get(k):
            continue
        if k not in a and k in defaults and b.get(k) == defaults[k]:
            continue  # added since the study was made; its default is what the trials had
        users = USED_BY.get(k.removeprefix("training.")) if k.startswith("training.") else None
        if users and not algorithms & set(users):
            continue
        out.append((k, a.get(k), b.get(k)))
    return out


def _algorithms(form: dict[str, Any]) -> set[str]:
    """Every algorithm a study's trials can run: [training]'s, and a searched one's choices."""
    found = {str((form.get("training") or {}).get("algorithm", "sync"))}
    searched = (form.get("space") or {}).get("algorithm")
    if isinstance(searched, dict):
        found |= {str(c) for c in searched.get("choices") or []}
    return found


def _show(value: Any) -> str:
    return "(none)" if value is None else json.dumps(value)


def check_same_study(study: optuna.Study, sf: StudyFile, where: str) -> list[str]:
    """StudyError if ``sf`` would add trials that cannot be compared with the study's own.

    Returns one note per allowed change of strategy or pruner (the budget, cluster and launcher
    may change freely). ``where`` names the storage in the message.
    """
    stored = study.user_attrs.get(STUDY_ATTR)
    if not isinstance(stored, dict):  # made by plain Optuna or an older detol: nothing to compare
        return []
    new = _stored_form(sf)
    changes = [c for c in _changes(stored, new) if not c[0].startswith(_HOW_TO_RUN)]
    refused = [c for c in changes if not c[0].startswith(_DECIDERS)]
    if refused:
        shown = "; ".join(f"{k}: {_show(a)} -> {_show(b)}" for k, a, b in refused[:6])
        more = f" (and {len(refused) - 6} more)" if len(refused) > 6 else ""
        n = len(study.get_trials(deepcopy=False))
        raise StudyError(
            "name",
            f"study {sf.name!r} in {where} holds {n} trials made with another study file "
            f"({shown}{more}): new trials would not be comparable with them. Give the study a "
            f"new name, or delete the old one first (search delete {sf.name})",
        )
    return [f"{k} changed from {_show(a)} to {_show(b)}" for k, a, b in changes]


def recorded_strategy(study: optuna.Study) -> str | None:
    """The strategy a study ran: recorded by name, or, for a study made before detol recorded
    it, its stored study file's ``strategy.name``; None for a study made by plain Optuna."""
    name = study.user_attrs.get(STRATEGY_ATTR)
    if isinstance(name, str):
        return name
    stored = study.user_attrs.get(STUDY_ATTR)
    if isinstance(stored, dict) and isinstance(stored.get("strategy"), dict):
        old = stored["strategy"].get("name")
        return old if isinstance(old, str) else None
    return None


def _stored_form(sf: StudyFile) -> dict[str, Any]:
    return json.loads(sf.model_dump_json()) | {"storage": None}


def open_study(
    sf: StudyFile,
    storage: BaseStorage,
    *,
    url: str = "",
    sources: list[warm_start.Source] | None = None,
) -> optuna.Study:
    """Create the study, or load it if it exists with the same objectives (resume).

    With ``[strategy] warm_start``: the sources (``sources``, else read now from ``storage`` and
    their own URLs; ``url`` names ``storage`` in messages) start the study once
    (:mod:`search.driver._warm_start`)."""
    if sf.strategy.warm_start and sources is None:  # read before anything is written
        sources = warm_start.load_sources(sf, storage=storage, url=url)
    try:
        existing = optuna.load_study(study_name=sf.name, storage=storage)
    except KeyError:
        existing = None
    directions = [optuna.study.StudyDirection[d.upper()] for d in sf.directions]
    if existing is not None:
        check_store(existing, sf)  # before anything is written
        if list(existing.directions) != directions:
            have = [d.name.lower() for d in existing.directions]
            raise StudyError(
                "direction",
                f"study {sf.name!r} already exists with directions {have}, "
                f"not {sf.directions}; use another name",
            )
        names = existing.metric_names
        if names is not None and names != sf.objectives:
            raise StudyError(
                "metric",
                f"study {sf.name!r} already exists with metrics {names}, "
                f"not {sf.objectives}; use another name",
            )
    # A seeded sampler that resumes must not replay the sequence it already produced.
    seed = sf.strategy.seed
    if seed is not None and existing is not None:
        seed += len(existing.get_trials(deepcopy=False))
    # `auto` runs the strategy the study recorded when it was made (a resume never switches).
    name = resolve(sf.strategy.name, sf.search_space, sf.directions,
                   recorded_strategy(existing) if existing is not None else None)
    sampler = build_sampler(name, sf.strategy.model_dump(), seed, sf.search_space, sf.directions)
    pruner = pruner_spec(sf.pruner.name, sf.pruner.spec_options(sf.training.epochs)).build()
    study = optuna.create_study(
        study_name=sf.name,
        storage=storage,
        sampler=sampler,
        pruner=pruner,
        directions=directions,
        load_if_exists=True,
    )
    if study.user_attrs.get(STRATEGY_ATTR) != name:
        study.set_user_attr(STRATEGY_ATTR, name)
    if existing is None:
        study.set_metric_names(sf.objectives)
        study.set_user_attr(STUDY_ATTR, _stored_form(sf))
    else:
        notes = check_same_study(existing, sf, "its storage")
        if notes:  # the stored file says what the next trials run with; the history what changed
            history = list(existing.user_attrs.get(CHANGES_ATTR, []))
            history.append({"time": time.time(), "before_trial": len(existing.trials),
                            "changes": notes})
            study.set_user_attr(CHANGES_ATTR, history)
            study.set_user_attr(STUDY_ATTR, _stored_form(sf))
    fix_store(study, sf, url)  # every later run reads the checkpoints from there
    if sources:
        warm_start.apply(study, sf, sources)
    return study


def requeue(
    study: optuna.Study, trial: optuna.Trial | FrozenTrial, reason: str, max_retries: int
) -> str:
    """Queue ``trial``'s parameters again unless they ran ``max_retries`` + 1 times already.

    Call before the trial is told FAIL. Returns ``reason`` with what was done appended; the new
    trial carries ``detol:retry_of`` and ``detol:attempt``, the failed one ``detol:requeued``.
    When the trial wrote a checkpoint (or itself resumed from one), the new trial resumes from
    the newest (``detol:resume_from``): a lost worker costs the epochs since that checkpoint.
    """
    attrs = study._storage.get_trial(trial._trial_id).user_attrs  # noqa: SLF001 - rank 0 wrote
    attempt = int(attrs.get(ATTEMPT_ATTR, 1))
    if attempt > max_retries:
        return f"{reason}; not re-queued (attempt {attempt}, budget.max_retries={max_retries})"
    carried: dict[str, Any] = {RETRY_ATTR: trial.number, ATTEMPT_ATTR: attempt + 1,
               LINEAGE_ATTR: lineage_of(trial.number, attrs)}
    if RESUME_OF_ATTR in attrs:  # a promoted continuation stays one
        carried[RESUME_OF_ATTR] = attrs[RESUME_OF_ATTR]
    # ... at the width it was given, with the lineage's segments before it (search.driver._resize)
    carried.update({k: attrs[k] for k in (WIDTH_ATTR, SEGMENTS_ATTR, KEPT_ATTR) if k in attrs})
    resume = resume_point(trial.number, attrs)
    if resume is not None:
        carried[RESUME_FROM_ATTR] = resume
    # The lineage's work so far: what the lost trial was given, plus the epochs it trained up
    # to its own checkpoint (kept; those after it are lost, and so is the lost segment's time).
    carried.update({k: attrs[k] for k in LINEAGE_TOTALS if k in attrs})
    if resume is not None and resume["trial"] == trial.number:
        inherited = attrs.get(RESUME_FROM_ATTR)
        start = int(inherited["epoch"]) + 1 if isinstance(inherited, dict) else 1
        carried[LINEAGE_EPOCHS_ATTR] = int(attrs.get(LINEAGE_EPOCHS_ATTR, 0)) + max(
            0, int(resume["epoch"]) - start + 1)
    study.enqueue_trial(trial.params, user_attrs=carried, skip_if_exists=False)
    _set_attr(study, trial, "detol:requeued", True)
    where = f" from its epoch-{resume['epoch']} checkpoint" if resume is not None else ""
    return f"{reason}; parameters re-queued{where} (attempt {attempt + 1} of {max_retries + 1})"


def paused_when_lost(study: optuna.Study, trial: optuna.Trial | FrozenTrial,
                     promoter: Any) -> int | None:
    """The rung epoch at which a trial whose result was lost (its worker or its driver died)
    pauses: its own newest checkpoint is at its last reported epoch and ``promoter`` (a pruner
    that pauses) says, asked again now, that it pauses there. None otherwise: a re-run then
    continues from the checkpoint, past the rung only with the pruner's consent. Without this
    a pause whose answer was lost would be re-run past its rung with no decision at all."""
    if promoter is None or not getattr(promoter, "pauses", False):
        return None
    frozen = study._storage.get_trial(trial._trial_id)  # noqa: SLF001 - rank 0 wrote to it
    checkpoint = frozen.user_attrs.get(CHECKPOINT_ATTR)
    epoch = frozen.last_step
    if not isinstance(checkpoint, dict) or not checkpoint.get("id") or epoch is None:
        return None
    if int(checkpoint["epoch"]) != epoch or checkpoint.get("cursor"):
        return None  # (a checkpoint within the next epoch: the pruner let it go on)
    return epoch if promoter.prune(study, frozen) else None


def tell_paused(study: optuna.Study, trial: optuna.Trial | FrozenTrial, epoch: int,
                why: str) -> None:
    """Tell a trial whose pause result was lost PRUNED, paused at ``epoch`` (promotable)."""
    _set_attr(study, trial, "detol:paused_at", epoch)
    _set_attr(study, trial, "exit_reason", f"paused after epoch {epoch} ({why}; its "
              "checkpoint is kept and the pruner asked again)")
    study.tell(trial.number, state=TrialState.PRUNED)


def resume_point(number: int, attrs: dict[str, Any]) -> dict[str, Any] | None:
    """The newest checkpoint trial ``number`` can continue from: its own, else the one it
    resumed from itself; ``{"id", "epoch", "trial"}`` or None."""
    own = attrs.get(CHECKPOINT_ATTR)
    if isinstance(own, dict) and own.get("id"):
        return {"id": own["id"], "epoch": int(own["epoch"]), "trial": number}
    inherited = attrs.get(RESUME_FROM_ATTR)
    return dict(inherited) if isinstance(inherited, dict) else None


def lineage_of(number: int, attrs: dict[str, Any]) -> int:
    return int(attrs.get(LINEAGE_ATTR, number))


def finished_configurations(study: optuna.Study) -> int:
    """Finished (complete or pruned) trials that count for ``budget.trials``: promoted
    continuations of a paused trial are the same configuration, not another one."""
    states = (TrialState.COMPLETE, TrialState.PRUNED)
    return sum(
        1 for t in study.get_trials(deepcopy=False, states=states)
        if RESUME_OF_ATTR not in t.user_attrs
    )


def recover_orphans(
    study: optuna.Study,
    max_retries: int = 1,
    *,
    claim_wait_s: float = 2.0,
    stale_after_s: float = STALE_AFTER_S,
) -> list[int]:
    """Fail RUNNING trials whose driver process on this host is gone; re-queue their params.

    Returns the numbers of the trials that were failed. Trials owned by a live driver are left
    alone; a driver on another host counts as dead once its heartbeat (renewed every
    ``HEARTBEAT_S``) is older than ``stale_after_s``. A trial that no driver claimed (its
    driver died between ``ask`` and recording itself, which a live driver does at once) is
    failed if it is still unclaimed after ``claim_wait_s``.
    """
    host = socket.gethostname()
    failed = []
    unclaimed = []
    study_attrs = study.user_attrs  # the drivers' heartbeats (driver_beat_key)
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = str(t.user_attrs.get(DRIVER_ATTR, ""))
        if not owner:
            unclaimed.append(t.number)
            continue
        owner_host, _, pid = owner.rpartition(":")
        if owner_host == host and pid.isdigit() and not _alive(int(pid)):
            # claimed, but nothing suggested yet: the driver died between claim and start
            when = "while the trial ran" if t.params else "before the trial started"
            _fail_orphan(study, t, f"driver {owner} died {when}", max_retries)
            failed.append(t.number)
            continue
        # The driver's beat, or (drivers before issue 18) the trial's own; before the first
        # beat, the trial's start.
        beats = [b for b in (study_attrs.get(driver_beat_key(owner)),
                             t.user_attrs.get(HEARTBEAT_ATTR)) if isinstance(b, int | float)]
        beat = max(beats) if beats else (
            t.datetime_start.timestamp() if t.datetime_start else time.time())
        silent = time.time() - float(beat)
        if owner_host != host and silent > stale_after_s:
            why = f"driver {owner} sent no heartbeat for {silent:.0f} s"
            _fail_orphan(study, t, why, max_retries)
            failed.append(t.number)
    if unclaimed:
        time.sleep(claim_wait_s)
        for number in unclaimed:
            t = study._storage.get_trial(
                study._storage.get_trial_id_from_study_id_trial_number(  # noqa: SLF001
                    study._study_id, number
                )
            )  # noqa: SLF001
            if t.state is TrialState.RUNNING and DRIVER_ATTR not in t.user_attrs:
                _fail_orphan(study, t, "its driver died before the trial started", max_retries)
                failed.append(number)
    return sorted(failed)


def _fail_orphan(study: optuna.Study, t: FrozenTrial, why: str, max_retries: int) -> None:
    paused = paused_when_lost(study, t, study.pruner)
    if paused is not None:  # the driver died before it told the pause
        tell_paused(study, t, paused, why)
        return
    reason = requeue(study, t, why, max_retries) if t.params else why
    _set_attr(study, t, "exit_reason", reason)
    study.tell(t.number, state=TrialState.FAIL)


def _set_attr(study: optuna.Study, trial: optuna.Trial | FrozenTrial, key: str, value: Any) -> None:
    # The storage's public API, so a RUNNING trial of a dead driver can be annotated too.
    study._storage.set_trial_user_attr(trial._trial_id, key, value)  # noqa: SLF001


def _alive(pid: int) -> bool:
    return pid == os.getpid() or pid_alive(pid)
