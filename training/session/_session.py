"""The Session: the one front of the training core for a trial's ranks. Two doors use it: a
user's own loop (``objective = "mpi:package.module:train"``) and the built-in trainer
(training.jobs._trainer), which reports, checkpoints and agrees through the same calls.

``train(session)`` runs on every rank of the trial's MPI job. The distributed parts are a few
explicit calls; model, data and loop stay the user's::

    def train(session):
        model = Net(session.params["hidden"]).to(session.device)
        opt = torch.optim.SGD(model.parameters(), lr=session.params["lr"])
        model, opt = session.wrap(model, opt, algorithm="sync")
        loader = session.shard(train_set, batch_size=64)
        for epoch in range(1, 11):
            for x, y in loader:
                opt.zero_grad()
                loss_fn(model(x), y).backward()
                opt.step()
            correct, seen = evaluate(model)  # this rank's share of the validation set
            metrics = session.reduce({"val_accuracy": (correct, seen)})  # exact over ranks
            if session.report(epoch, metrics) != "continue":
                return

Every rank makes the same ``report`` and ``save_checkpoint`` calls; ranks that do not fail the
trial within ``agree_timeout_s`` with the reason (:mod:`training.session._agreement`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from mpi4py import MPI

from training.data import GlobalBatchSlices
from training.pruning import UnitPruning, step_at
from training.session._agreement import FINISH, REPORT, SAVE, RankDisagreement, agree
from training.session._decisions import CONTINUE, PAUSE, STOP, Decision, NullReporter, Reporter
from training.session._wrap import DistributedOptimizer, wrap

DEFAULT_AGREE_TIMEOUT_S = 20.0
PRUNED_KEY = "detol_pruned"  # a pruned own loop's widths in each rank's checkpoint state


def pick_device(comm: MPI.Comm) -> torch.device:
    """CUDA when present (one device per local rank, round robin), else CPU."""
    if torch.cuda.is_available():
        local = comm.Split_type(MPI.COMM_TYPE_SHARED)
        index = local.rank % torch.cuda.device_count()
        local.Free()
        return torch.device("cuda", index)
    return torch.device("cpu")


def describe_device(device: torch.device) -> str:
    """What a trial records as its ``device``: ``"cpu"``, or ``"cuda:0 (NVIDIA H200)"``."""
    if device.type != "cuda":
        return str(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"


class Session:
    """One trial of a user's own loop, on every rank of its MPI job.

    Attributes: ``params`` (the trial's searched parameters), ``epochs`` (``[training]
    epochs``, the last epoch the pruner expects), ``rank``, ``size``, ``device`` (CUDA when
    present, one per local rank, else CPU) and ``comm`` (the mpi4py communicator of the
    trial's ranks, for collectives of your own). Made by detol, not by the user: by
    ``training.jobs.worker`` for every trial, own loop or built-in trainer.
    """

    def __init__(
        self,
        *,
        comm: MPI.Comm,
        params: Mapping[str, Any] | None = None,
        reporter: Reporter | None = None,
        checkpointer: Any = None,
        resume_from: str | None = None,
        identity: dict[str, Any] | None = None,
        objectives: list[str] | None = None,
        agree_timeout_s: float = DEFAULT_AGREE_TIMEOUT_S,
        epochs: int = 10,
        control: MPI.Comm | None = None,
        prune: Any = None,
    ) -> None:
        if not agree_timeout_s > 0:
            raise ValueError(f"agree_timeout_s must be > 0, got {agree_timeout_s!r}")
        self.comm = comm
        self.params: dict[str, Any] = dict(params or {})
        self.rank: int = comm.rank
        self.size: int = comm.size
        self.device: torch.device = pick_device(comm)
        self.epochs = epochs  # [training] epochs: what the study's pruner takes as the last
        self.agree_timeout_s = agree_timeout_s
        self._ctrl = control if control is not None else comm.Dup()  # only session calls
        self._reporter: Reporter = reporter if reporter is not None else NullReporter()
        self._checkpointer = checkpointer
        self._identity = identity if identity is not None else {"params": self.params}
        self._objectives = list(objectives or [])
        self._started = time.perf_counter()
        self._spent_before = 0.0  # training seconds of the segments before a resume
        self.history: list[dict[str, float]] = []
        self.reports = 0
        self.last_epoch = 0
        self.start_epoch: int | None = None
        self.decision: Decision = CONTINUE
        self.saved_after: int | None = None  # the report count at the newest checkpoint
        self.checkpoint: dict[str, Any] | None = None  # rank 0: {"id", "epoch"} of the newest
        self._optimizers: list[DistributedOptimizer] = []
        # [training] prune (a PruneConfig) for the first wrapped model: see prune_units
        self._prune_config = prune
        self._pruned: DistributedOptimizer | None = None
        self._broken: str | None = None
        self._resumed: tuple[dict[str, Any], dict[str, Any]] | None = None
        self.resumed_header: dict[str, Any] | None = None  # the checkpoint's epoch, curve, ...
        if resume_from is not None:
            if checkpointer is None:
                raise ValueError("resume_from is set but the trial has no checkpoint store")
            self._resumed = checkpointer.load(resume_from, self._identity)  # waits for rank 0
            header = self.resumed_header = self._resumed[0]
            self.history = list(header["history"])
            self._spent_before = float(header["train_time_s"])
            self.last_epoch = int(header["epoch"])
            self.start_epoch = self.last_epoch + 1

    # -- data ---------------------------------------------------------------------------
    def sampler(
        self, dataset: Any, batch_size: int, *, shuffle: bool = True, seed: int = 0
    ) -> GlobalBatchSlices:
        """This rank's local batches of every epoch, for ``DataLoader(dataset,
        batch_sampler=...)``. ``batch_size`` is the global batch, split across ranks; every
        sample is read exactly once per epoch across ranks; the epoch advances at each pass."""
        n = dataset if isinstance(dataset, int) else len(dataset)
        return GlobalBatchSlices(n, batch_size=batch_size, rank=self.rank, size=self.size,
                            shuffle=shuffle, seed=seed, epoch=self.last_epoch + 1)

    def shard(
        self,
        dataset: Any,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        **loader: Any,
    ) -> torch.utils.data.DataLoader:
        """A ``DataLoader`` over this rank's share of ``dataset`` (see :meth:`sampler`).
        ``loader`` goes to the DataLoader (``num_workers`` defaults to 0: forked loader
        workers under MPI crash or hang on some MPIs; ``pin_memory`` is on for CUDA)."""
        loader.setdefault("pin_memory", self.device.type == "cuda")
        return torch.utils.data.DataLoader(
            dataset, batch_sampler=self.sampler(dataset, batch_size, shuffle=shuffle, seed=seed),
            **loader,
        )

    # -- model and optimizer ----------------------------------------------------------------
    def wrap(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        algorithm: str = "sync",
        *,
        example: Any = None,
        **options: Any,
    ) -> tuple[torch.nn.Module, DistributedOptimizer]:
        """``model`` with rank 0's weights on every rank and ``optimizer`` wrapped with one of
        our algorithms ("sync", "asgd", "localsgd", "simuparallel"); ``options``:
        ``send_every`` (asgd), ``local_steps`` (localsgd), ``bucket_kb`` (sync), ``seed``.
        Collective: call it on every rank. Wrap before restoring a checkpoint.

        With ``[training] prune`` in the study (or ``prune_<key>`` searched), the first model
        wrapped is the one :meth:`prune_units` prunes: ``example`` is then the model's inputs
        for a small batch (a tensor, or a tuple or dict of them, as ``model(x)``,
        ``model(*x)`` or ``model(**x)`` takes them), which its dependency graph is traced on
        (a model it cannot prune is refused here); a resumed trial's model is shrunk here to
        its checkpoint's widths, so that its saved ``state_dict()`` loads."""
        pruning = None
        if self._prune_config is not None and self._pruned is None:
            if example is None:
                raise ValueError("session.wrap: [training] prune traces the model's graph on "
                                 "example inputs: pass example= (the model's inputs for a "
                                 "small batch, e.g. the first batch's)")
            pruning = UnitPruning(self._prune_config, model, self.comm, example)  # refuses
            saved = None if self._resumed is None else self._resumed[1].get(PRUNED_KEY)
            if saved is not None:  # the pruned shapes first, then the user's load_state_dict
                pruning.resize(list(saved["widths"]), optimizer)
                pruning.load_state_dict(saved["pruning"])
        model, opt = wrap(model, optimizer, self.comm, algorithm, **options)
        self._optimizers.append(opt)
        if pruning is not None:
            opt.pruning = (pruning, model)
            self._pruned = opt
        return model, opt

    def prune_units(self, epoch: int) -> bool:
        """At the start of every epoch, on every rank: the study's ``[training] prune``
        schedule on the wrapped model, the built-in trainer's own path
        (training.pruning._rebuild.step_at): in an epoch with a step, the agreed least important
        neurons and channels are removed from the model (it shrinks in place), the optimizer's
        state is sliced with them and the algorithm rebuilt (collective: waits for all ranks).
        Returns whether units were removed now (the model's parameters are new tensors then:
        anything else holding the old ones must take the new). False without a prune table."""
        opt = self._pruned
        if opt is None:
            return False
        pruning, model = opt.pruning  # type: ignore[misc]
        assert opt.make is not None
        new = step_at(pruning, int(epoch), model, opt.optimizer, opt.algorithm, opt.make)
        if new is None:
            return False
        opt.renew(new)
        return True

    def reduce(self, sums: Mapping[str, tuple[float, float]]) -> dict[str, float]:
        """Each metric's mean over every rank's samples: ``sums`` maps a name to this rank's
        ``(sum, count)`` (``{"val_accuracy": (correct, seen), "val_loss": (loss_sum, seen)}``)
        and the result is total sum / total count per name (total sum where no rank counted
        any). Sums and counts are added over the ranks in float64, correct predictions as
        whole numbers exactly, so P ranks report what one rank reports on the same samples;
        a mean of the ranks' means would not (the built-in trainer's validation uses this).
        Collective: call it on every rank, with the same names (a rank without samples passes
        ``(0, 0)``)."""
        names = sorted(sums)
        buf = np.empty(2 * len(names), dtype=np.float64)
        for i, name in enumerate(names):
            pair = sums[name]
            try:
                total, count = pair
                buf[2 * i], buf[2 * i + 1] = float(total), float(count)
            except (TypeError, ValueError):
                raise TypeError(f"reduce: {name!r} must be a (sum, count) pair of numbers, got "
                                f"{pair!r}") from None
        if self.size > 1:
            self.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)  # waits for all ranks
        return {name: float(buf[2 * i] / (buf[2 * i + 1] or 1.0)) for i, name in enumerate(names)}

    def mean(self, metrics: Mapping[str, float], weight: float = 1.0) -> dict[str, float]:
        """Each metric's mean over the ranks of this rank's value, weighted by ``weight`` (e.g.
        this rank's sample count). A mean of means rounds differently on P ranks than on one:
        for validation metrics prefer :meth:`reduce` of sums. Collective, like :meth:`reduce`."""
        w = float(weight)
        return self.reduce({k: (float(v) * w, w) for k, v in metrics.items()})

    # -- control calls (every rank, same order) ---------------------------------------------
    def _check(self) -> None:
        if self._broken is not None:
            raise RankDisagreement(self._broken)

    def _agree(self, call: int, number: int, epoch: int) -> None:
        self._check()
        try:
            agree(self._ctrl, call, number, epoch, self.agree_timeout_s)
        except RankDisagreement as exc:
            self._broken = str(exc)  # swallowed by the loop or not, the trial fails
            raise

    def report(self, epoch: int, metrics: Mapping[str, float]) -> Decision:
        """Record ``metrics`` for ``epoch`` (rank 0's count); returns the pruner's decision,
        the same on every rank: "continue", "stop" (pruned: return) or "pause" (save a
        checkpoint, then return; the trial may be resumed from it). Every rank calls it."""
        if isinstance(epoch, bool) or not isinstance(epoch, int | np.integer):
            raise TypeError(f"report: epoch must be an int, got {epoch!r}")
        epoch = int(epoch)
        if self._resumed is not None and epoch <= int(self._resumed[0]["epoch"]):
            raise ValueError(
                f"report(epoch={epoch}): this trial resumed from the checkpoint of epoch "
                f"{self._resumed[0]['epoch']}; continue from session.load_checkpoint() and "
                "report the epochs after it"
            )
        self._agree(REPORT, self.reports + 1, epoch)  # waits for all ranks (bounded)
        self.reports += 1
        self.last_epoch = epoch
        if self.start_epoch is None:
            self.start_epoch = epoch
        payload: Any = None
        error: Exception | None = None
        if self.rank == 0:
            try:
                row = self._row(epoch, metrics)
                self.history.append(row)
                payload = self._reporter.decide(epoch, row)
            except Exception as exc:  # noqa: BLE001 - every rank fails with rank 0's error
                error, payload = exc, ("error", f"{type(exc).__name__}: {exc}")
        payload = self._ctrl.bcast(payload, root=0)  # waits for rank 0's storage round trip
        if error is not None:
            raise error
        if isinstance(payload, tuple):
            raise RuntimeError(f"report(epoch={epoch}) failed on rank 0: {payload[1]}")
        self.decision = payload
        if payload == PAUSE and self._checkpointer is None:
            self.decision = STOP  # nothing to resume from: a pause is a stop
        return self.decision

    def _row(self, epoch: int, metrics: Mapping[str, float]) -> dict[str, float]:
        if not isinstance(metrics, Mapping):
            raise TypeError(f"report(epoch={epoch}, metrics): metrics must be a dict of "
                            f"numbers, got {type(metrics).__name__}")
        missing = [m for m in self._objectives if m not in metrics]
        if missing:
            raise ValueError(
                f"report(epoch={epoch}) has no {', '.join(map(repr, missing))}, the study's "
                f"metric (reported: {sorted(metrics) or 'nothing'})"
            )
        row: dict[str, float] = {"epoch": epoch}  # an int, as in the built-in trainer's curve
        for key, value in metrics.items():
            try:
                row[str(key)] = float(value)
            except (TypeError, ValueError):
                raise TypeError(f"report(epoch={epoch}): metric {key!r} is {value!r}, "
                                "not a number") from None
        row.setdefault("train_time_s", self._spent_before + time.perf_counter() - self._started)
        return row

    @property
    def checkpointer(self) -> Any:
        """The trial's checkpoint store (training.state._checkpoint.Checkpointer), None without
        one."""
        return self._checkpointer

    def checkpoint_due(self) -> bool:
        """Whether to save a checkpoint now, after the last report: the pruner paused the
        trial, or ``[checkpoints] every`` falls on this epoch (an own loop's study has no
        ``every``: its saves are the pauses). False without a checkpoint store. The same on
        every rank."""
        if self._checkpointer is None or not self.reports:
            return False
        return self.decision == PAUSE or bool(self._checkpointer.plan.due(self.last_epoch))

    def save_checkpoint(self, state: Mapping[str, Any], *, reshard: bool = False,
                        cursor: Mapping[str, Any] | None = None) -> None:
        """Save ``state`` (this rank's: tensors, numbers, strings, lists, dicts) as the trial's
        checkpoint of the last reported epoch, in the study's artifact store. Every rank calls
        it (each rank's state is kept, and restored on the same rank). ``reshard=True``: the
        checkpoint may restore on another number of ranks by training.state._reshard's rule (sync:
        rank 0's state on every rank; the other algorithms: the mean of the ranks merged,
        a copy for a new rank): for a state of floating-point tensors and numbers shaped the
        same on every rank; the algorithm is the one :meth:`wrap` was given. ``cursor``: a
        checkpoint within the next epoch, ``{"seed", "epoch", "consumed", ...}`` (the
        samples of that epoch's stream already trained on), kept in the header."""
        if self._checkpointer is None:
            raise RuntimeError("save_checkpoint: this trial has no checkpoint store (run it "
                               "through `search run`, which gives every own-loop trial one)")
        if not isinstance(state, Mapping):
            raise TypeError(f"save_checkpoint(state): state must be a dict, got "
                            f"{type(state).__name__}")
        self._agree(SAVE, self.reports, self.last_epoch)  # waits for all ranks (bounded)
        if self._pruned is not None:  # the pruned widths, for wrap to restore them first
            pruning, model = self._pruned.pruning  # type: ignore[misc]
            state = {**state, PRUNED_KEY: {"widths": pruning.widths(),
                                           "pruning": pruning.state_dict()}}
        header = {"epoch": self.last_epoch, "ranks": self.size, "config": self._identity,
                  "history": self.history, "train_time_s": self.train_time_s()}
        if reshard:
            header.update(reshard=True, algorithm=self._algorithm())
        if cursor is not None:
            header["cursor"] = dict(cursor)
        artifact = self._checkpointer.save(header, dict(state))  # waits for all ranks
        self.saved_after = self.reports
        if self.rank == 0:
            self.checkpoint = {"id": artifact, "epoch": self.last_epoch}

    def _algorithm(self) -> str:
        """The algorithm a resharded checkpoint's states are merged by."""
        if "algorithm" in self._identity:  # the built-in trainer's configuration
            return str(self._identity["algorithm"])
        names = {o.name for o in self._optimizers}
        if len(names) != 1:
            raise ValueError("save_checkpoint(reshard=True) needs exactly one algorithm: wrap "
                             f"the optimizer first (wrapped: {sorted(names) or 'none'})")
        return names.pop()

    def load_checkpoint(self) -> dict[str, Any] | None:
        """This rank's state of the checkpoint this trial resumes from (a pause promoted, a
        retry), else None. Read once when the session starts: calling it costs nothing."""
        if self._resumed is None:
            return None
        return {k: v for k, v in self._resumed[1].items() if k != PRUNED_KEY}

    # -- the end ----------------------------------------------------------------------------
    def start_clock(self) -> None:
        """Count training seconds (``train_time_s``) from now, e.g. after the set-up; without
        it they count from the session's start. A resumed trial's earlier seconds are kept."""
        self._started = time.perf_counter()

    def train_time_s(self) -> float:
        """Training seconds of this trial so far, earlier segments (before a resume) included."""
        return self._spent_before + time.perf_counter() - self._started

    def finish(self) -> None:
        """After ``train`` returned on this rank: agree that every rank is done, then end the
        algorithms (asgd, localsgd and simuparallel average the weights)."""
        self._agree(FINISH, self.reports, self.last_epoch)  # waits for all ranks (bounded)
        for opt in self._optimizers:
            opt.algorithm.finish()  # waits for all ranks (except sync)
        self._ctrl.Free()

    def outcome(self) -> tuple[str, str]:
        """(state, reason) of the trial from the decisions made."""
        if not self.reports:
            return "failed", "train() returned without calling session.report: no values"
        last = self.last_epoch
        if self.decision == STOP:
            return "pruned", f"pruned after epoch {last}"
        if self.decision == PAUSE:
            if self.saved_after == self.reports:
                return "paused", f"paused after epoch {last}"
            return "pruned", (f"pruned after epoch {last}: the pruner paused it but train() "
                              "returned without session.save_checkpoint")
        values = {k: v for k, v in self.history[-1].items() if k != "epoch"} if self.history else {}
        bad = sorted(k for k in self._objectives if not math.isfinite(values.get(k, 0.0)))
        if bad:
            return "failed", f"diverged: {', '.join(bad)} not finite at epoch {last}"
        return "complete", f"completed: {self.reports} report(s), last epoch {last}"
