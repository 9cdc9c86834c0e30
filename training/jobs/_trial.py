"""One trial on a communicator, for both rank-side programs (the cold job, :mod:`.worker`, and the
warm pool, :mod:`.warm_worker`): the rank-count guard, the two front doors (a user's own loop or
the built-in trainer) behind ``train_spec``, and the trial's session and checkpointer that both
train through (``open_session``), in the cold job and a warm pool alike.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any


class WrongRankCount(RuntimeError):
    """The job has another number of ranks than the trial asked for: never train it."""


def check_rank_count(comm: Any, ranks: int, launcher: Any) -> None:
    """WrongRankCount unless ``comm`` has exactly ``ranks`` ranks (before anything is reported).

    The usual cause is a launcher that starts separate single-rank jobs: ``srun -n 2`` under
    SLURM's ``MpiDefault=none`` starts two singletons, each "rank 0 of 1", both training the
    whole model and reporting into the same trial.
    """
    if comm.size == ranks:
        return
    from mpi4py import MPI

    line = launcher if isinstance(launcher, str) else " ".join(launcher)
    library = MPI.Get_library_version().strip().splitlines()[0]
    singletons = " (separate single-rank jobs)" if comm.size == 1 and ranks > 1 else ""
    raise WrongRankCount(
        f"wrong rank count: the trial asked for {ranks} ranks but its MPI job has "
        f"{comm.size}{singletons}; launcher line {line!r}. The launcher must start one MPI "
        f"job of the MPI that mpi4py uses ({library}): with SLURM and the mpich wheel use "
        "'srun --mpi=pmi2 -n {ranks}', otherwise that MPI's own mpiexec"
    )


def thread_level() -> str:
    """The thread level MPI was initialised with ("single", "funneled", ...)."""
    from mpi4py import MPI

    names = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
             MPI.THREAD_SERIALIZED: "serialized", MPI.THREAD_MULTIPLE: "multiple"}
    return names.get(MPI.Query_thread(), str(MPI.Query_thread()))


def rank_hosts(comm: Any) -> list[str] | None:
    """The distinct hosts of ``comm``'s ranks, in rank order (rank 0's first), on rank 0; None on
    the others. Collective: every rank calls it."""
    import socket

    names = comm.gather(socket.gethostname(), root=0)
    return None if names is None else list(dict.fromkeys(names))


def train_spec(spec: Any, config: Any, comm: Any, data: Any = None,
               memory: Any = None) -> dict[str, Any] | None:
    """Train one trial on ``comm`` (this job, or a warm pool's); rank 0 returns the result.
    Two front doors, one session: the user's loop (``spec.own_loop``) or the built-in trainer.
    ``memory``: a warm pool's shelf of paused states (training.jobs._regroup), on its rank 0."""
    from training.jobs._trainer import Trainer
    from training.session import describe_device

    check_rank_count(comm, config.ranks, spec.launcher)
    hosts = rank_hosts(comm)
    if spec.own_loop is not None:  # the user's loop, with a training.Session
        from training.jobs._own_loop import run_own_loop

        own = run_own_loop(spec, config, comm, open_session)
        if own is None:
            return None
        return {**own, "ranks": comm.size, "hosts": hosts, "mpi_thread_level": thread_level(),
                "finish_time": time.time()}
    # The study's metric must be in every report, as for an own loop, when reports count.
    reports = spec.report and spec.storage_url and spec.trial_id is not None
    session = open_session(spec, config, comm, identity=config.model_dump(),
                           objectives=list(spec.objectives) if reports else None,
                           memory=memory)
    trainer = Trainer(config, session, objective=spec.objectives[0], data=data)
    result = trainer.train()
    if comm.rank != 0:
        return None
    restored = trainer.checkpointer.restored_from if trainer.checkpointer is not None else ""
    if spec.weights_path:
        import torch

        torch.save(trainer.state_dict(), spec.weights_path)
    out = asdict(result)
    out["ranks"] = comm.size
    out["hosts"] = hosts
    if restored:  # how this continuation got its state: "memory" is an in-place resize
        out["restored_from"] = restored
        out["restore_s"] = trainer.checkpointer.restore_seconds  # type: ignore[union-attr]
    out["algorithm"] = config.algorithm
    out["device"] = describe_device(session.device)
    out["mpi_thread_level"] = thread_level()
    out["finish_time"] = time.time()
    return out


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
            **({"cursor": header["cursor"]} if header.get("cursor") else {}),
        })

    def download(artifact_id: str, path: str) -> None:
        download_artifact(artifact_store=store, file_path=path, artifact_id=artifact_id)

    return Checkpointer(plan, comm, upload=upload, download=download, remove=store.remove,
                        memory=memory, link=link)
