"""A trial's :class:`training.Session` and checkpointer on its communicator: what both front
doors (a user's own loop, the built-in trainer) train through, in the cold job and a warm pool.
"""

from __future__ import annotations

from typing import Any


def open_session(spec: Any, config: Any, comm: Any, *, identity: dict[str, Any],
                 params: dict[str, Any] | None = None, objectives: list[str] | None = None,
                 memory: Any = None) -> Any:
    """The trial's :class:`training.Session` on ``comm``: the one front through which both doors,
    a user's own loop and the built-in trainer, report to rank 0's trial, save and restore
    checkpoints in its artifact store and agree on their calls within ``agree_timeout_s``.
    ``identity`` is what a checkpoint must match to resume; ``memory``: a warm pool's shelf of
    paused states (training.jobs._regroup), on its rank 0. Collective: every rank calls it."""
    from training.session import Session, trial_reporter

    reporter = trial_reporter(spec, comm.rank)
    control = comm.Dup()  # the session's calls never match the loop's own collectives
    return Session(
        comm=comm,
        params=params,
        reporter=reporter,
        checkpointer=make_checkpointer(spec, control, reporter, memory),
        resume_from=spec.resume_from,
        identity=identity,
        objectives=objectives,
        agree_timeout_s=config.agree_timeout_s,
        epochs=config.epochs,
        control=control,
        prune=config.prune,  # an own loop's session.prune_units (the trainer prunes itself)
    )


def make_checkpointer(spec: Any, comm: Any, reporter: Any, memory: Any = None) -> Any:
    """The trial's checkpointer (None when the study keeps no checkpoints); rank 0's writes to
    the study's artifact store, linked to the trial ``reporter`` reports to."""
    from training.state import Checkpointer
    from training.storage import CheckpointPlan

    plan = CheckpointPlan.from_json(spec.checkpoints)
    if plan is None:
        if spec.resume_from:
            raise ValueError("resume_from is set but the trial has no checkpoint store")
        return None
    if comm.rank != 0:
        return Checkpointer(plan, comm)
    from optuna.artifacts import download_artifact, upload_artifact

    from training.storage import CHECKPOINT_ATTR, artifact_store

    store = artifact_store(plan.store)

    def upload(path: str, epoch: int) -> str:
        if reporter is None:
            raise RuntimeError("checkpoints need the trial's storage (storage_url, trial_id)")
        artifact_id = upload_artifact(
            artifact_store=store, file_path=path, study_or_trial=reporter.trial
        )
        return str(artifact_id)

    def link(artifact_id: str, header: dict[str, Any]) -> None:
        # What the driver needs without reading the file: where it is, its epoch, and whether
        # it restores on another rank count (search.driver._resize keeps a width it cannot).
        reporter.trial.set_user_attr(CHECKPOINT_ATTR, {
            "id": artifact_id, "epoch": int(header["epoch"]), "store": plan.store,
            "ranks": int(header.get("ranks", comm.size)),
            "reshard": bool(header.get("reshard", False)),
        })

    def download(artifact_id: str, path: str) -> None:
        download_artifact(artifact_store=store, file_path=path, artifact_id=artifact_id)

    return Checkpointer(plan, comm, upload=upload, download=download, remove=store.remove,
                        memory=memory, link=link)
