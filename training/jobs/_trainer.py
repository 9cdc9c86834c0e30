"""One candidate's training loop. Plain model, data and loop; MPI only at the marked edges.

The built-in trainer is one user of :class:`training.Session`, the front that own loops get too:
its rank, size and device, the epoch's report to rank 0's trial and the pruner's decision on
every rank, the bounded agreement on those calls, the checkpoints in the trial's artifact store
(saved when ``checkpoint_due``, restored from ``load_checkpoint``), the training clock and the
exact reduction of validation sums all come from the session. What is its own: the model, data
and algorithm built from the configuration, pruning during training, the epoch's loop.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from mpi4py import MPI

from training._config import TrainConfig
from training.algorithms import Pace, make_algorithm
from training.data import (
    BatchClaims,
    ClaimedBatches,
    Dataset,
    GlobalBatchSlices,
    InMemory,
    Shard,
    TrainData,
    from_arrays,
    load_train_data,
    make_loader,
)
from training.data._batches import BatchShape, rows, to_device
from training.data._loaders import rows_batch
from training.jobs._optim import Precision, Schedule, make_optimizer
from training.launch import threads_here
from training.models import count_flops
from training.plugins import build_model, make_batch_sums, make_loss
from training.pruning import UnitPruning, rebuild, step_at
from training.session import PAUSE, STOP, Reporter, Session, pick_device
from training.state import Checkpointer

__all__ = ["Trainer", "TrainResult", "pick_device"]


@dataclass
class TrainResult:
    state: str  # "complete" | "pruned" | "paused" | "failed"
    exit_reason: str
    values: dict[str, float]
    epochs_run: int
    history: list[dict[str, float]] = field(default_factory=list)
    train_time_s: float = 0.0
    samples_per_s: float = 0.0
    first_step_time: float | None = None
    n_params: int = 0
    flops: int | None = None  # per sample; None: not countable for this model (never 0)
    test_accuracy: float | None = None
    counters: dict[str, int] = field(default_factory=dict)
    slowdown_sleep_s: float = 0.0  # seconds all ranks slept to honour [training] slowdown
    steps_per_rank: list[int] = field(default_factory=list)  # optimizer steps each rank took
    start_epoch: int = 1  # > 1: resumed from a checkpoint of epoch start_epoch - 1
    checkpoint: dict[str, Any] | None = None  # the newest one this run wrote: {"id", "epoch"}
    checkpoint_s: float = 0.0  # wall seconds rank 0 spent writing checkpoints
    checkpoint_bytes: int = 0
    # [training] repeats > 1: each seed's final values, and their standard deviation by name
    repeats: dict[str, Any] | None = None
    # [training] prune: each group's dense and final width, the groups left alone
    pruned_units: dict[str, Any] | None = None


def _sum_over_ranks(comm: MPI.Comm, values: list[float]) -> list[float]:
    buf = np.asarray(values, dtype=np.float64)
    if comm.size > 1:
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)  # waits for all ranks
    return buf.tolist()


class Trainer:
    """Trains ``config`` on the ranks of ``comm``: a :class:`training.Session` (what
    ``training.jobs.worker`` passes), or a communicator on which the trainer opens its session with
    ``reporter`` (rank 0 reports to it after every epoch), ``checkpointer`` and
    ``resume_from``. :meth:`train` ends the session."""

    def __init__(
        self,
        config: TrainConfig,
        comm: MPI.Comm | Session,
        *,
        reporter: Reporter | None = None,
        objective: str = "val_accuracy",
        data: Dataset | None = None,
        checkpointer: Checkpointer | None = None,
        resume_from: str | None = None,
    ) -> None:
        self.config = config
        if isinstance(comm, Session):
            if reporter is not None or checkpointer is not None or resume_from is not None:
                raise ValueError("Trainer(config, session): the session holds the reporter, "
                                 "checkpointer and resume_from")
            self.session = comm
        else:
            self.session = Session(comm=comm, reporter=reporter, checkpointer=checkpointer,
                                   resume_from=resume_from, identity=config.model_dump(),
                                   agree_timeout_s=config.agree_timeout_s, epochs=config.epochs)
        comm = self.comm = self.session.comm
        self.objective = objective
        self.checkpointer = self.session.checkpointer
        self.device = self.session.device
        torch.set_num_threads(threads_here(config.threads_per_rank))
        self.data = _as_train_data(data, config)
        torch.manual_seed(config.seed)  # same initial weights on every rank ...
        self.model = build_model(config, self.data.info).to(self.device)
        self.shape = BatchShape.of(config)
        self.precision = Precision(config.precision, self.device)
        # One real training sample (the user's dtype: token ids count too) for the FLOPs.
        first = rows_batch(self.data.train, [0])
        self.sample = to_device(self.shape.split(first)[0], self.device)
        self.flops = count_flops(self.model, self.sample)
        # Pruning during training (training/pruning/_units.py): the model's graph traced on two
        # training samples; refuses a model it cannot prune (a genome draw without a prunable
        # layer trains dense).
        self.pruning = UnitPruning(
            config.prune, self.model, comm, self._example(), self.shape.forward,
            allow_empty=config.genome is not None) if config.prune else None
        torch.manual_seed(config.seed * 1000 + comm.rank + 1)  # ... different dropout per rank
        self.algorithm = self.make_algorithm()
        self.algorithm.broadcast_parameters(root=0)  # ... and rank 0's are the ones that count
        self.optimizer = make_optimizer(config, self.model)
        self.schedule = Schedule(config)
        self.schedule.attach(self.optimizer)
        self.sum_loss = make_loss(config, summed=True)  # the batch's summed training loss
        self.batch_sums = make_batch_sums(config)  # validation: sums that add up exactly
        if self.data.in_memory and self.device.type != "cpu":  # small: kept on the device
            self.data.train = self.data.train.to(self.device)
        self.n_train = len(self.data.train)
        self.first_step_time: float | None = None
        self.pace = Pace(config.slowdown, comm.rank)  # a straggler on purpose, if asked
        # Ranks that never wait for each other claim an epoch's batches (training/data/_claims.py).
        asynchronous = self.algorithm.sync_period() is None and comm.size > 1
        self.claims = BatchClaims(comm) if asynchronous else None
        self.sampler: GlobalBatchSlices | ClaimedBatches
        arrays = self.data.whole_batches  # index arrays for sets read whole, lists otherwise
        # Record shards have an epoch order of their own (windows of shards); the one order of
        # an epoch, whatever the rank count (training/data/_shards.py).
        order = self.data.epoch_order(config.shuffle_window)
        if self.claims is not None:
            self.sampler = ClaimedBatches(self.n_train, batch_size=config.batch_size,
                                          seed=config.seed, claims=self.claims, arrays=arrays,
                                          order=order)
        else:
            self.sampler = GlobalBatchSlices(self.n_train, batch_size=config.batch_size,
                                             seed=config.seed, rank=comm.rank, size=comm.size,
                                             arrays=arrays, order=order)
        self.epoch_steps = len(self.sampler)  # sync: global batches of a whole epoch
        self.loader = make_loader(self.data.train, self.sampler, workers=config.loader_workers,
                                  device=self.device)
        self.steps = 0
        self.rows_read = 0  # training samples this rank read, over all epochs
        # [training] repeats: the same configuration with the next seeds, on the same data and
        # ranks, trained epoch by epoch beside this one (their own quiet sessions: no reports).
        own_rng = torch.get_rng_state()
        self.replicas = [
            Trainer(config.model_copy(update={"seed": config.seed + i, "repeats": 1}), comm,
                    objective=objective, data=self.data)
            for i in range(1, config.repeats)
        ]
        torch.set_rng_state(own_rng)  # each replica keeps its own stream (dropout)
        self._rng = own_rng

    def _example(self) -> Any:
        """The model's inputs for two training samples (one if there is one): what pruning
        traces the model's graph on."""
        first = rows_batch(self.data.train, list(range(min(2, len(self.data.train)))))
        return to_device(self.shape.split(first)[0], self.device)

    def make_algorithm(self) -> Any:
        """The configured algorithm on the model's current parameters (again after a prune)."""
        c = self.config
        return make_algorithm(c.algorithm, self.model, self.comm, lr=c.lr,
                              send_every=c.send_every, local_steps=c.local_steps,
                              bucket_bytes=c.bucket_kb * 1024, seed=c.seed)

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def _step(self, batch: Any, global_batch: int, last_in_epoch: bool) -> float:
        """One step of this rank on its ``batch`` (None: no rows, sync still steps; the
        samplers no longer give such a batch); returns its summed loss."""
        inputs, y = (None, None) if batch is None else self.shape.split(batch)
        n = 0 if y is None else rows(y)
        self.algorithm.zero_grad()
        divisor = self.algorithm.loss_divisor(
            local_batch=n, global_batch=global_batch, epoch_size=self.n_train
        )
        self.pace.start()
        if n:
            inputs, y = to_device(inputs, self.device), to_device(y, self.device)
            with self.precision.autocast():
                loss_sum = self.sum_loss(self.shape.forward(self.model, inputs), y)
            self.precision.scale(loss_sum / divisor).backward()
            local_loss = float(loss_sum.detach())
            self.rows_read += n
        else:
            local_loss = 0.0
        self.pace.stop()
        if self.algorithm.before_step(last_in_epoch):  # sync: waits for all ranks
            if self.pruning is not None:
                self.pruning.after_backward(self.model)  # taylor's sums, the sparsity penalty
            if self.config.grad_clip is not None:  # sync: the reduced gradient, every rank alike
                self.precision.unscale(self.optimizer)
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
            self.precision.step(self.optimizer)
            self.algorithm.after_step()
            self.steps += 1
        return local_loss

    def _segments(self, start: int) -> list[tuple[int, int]]:
        """The parts of an epoch from sample ``start`` on, cut where a checkpoint is due within
        the epoch (``[checkpoints] every_steps`` global batches; never inside the last one)."""
        n, b = self.n_train, self.config.batch_size
        plan = self.checkpointer.plan if self.checkpointer is not None else None
        every = plan.every_steps * b if plan is not None else 0
        cuts = [] if not every or self.config.algorithm == "batch" else [
            c for c in range(every, ((n - 1) // b) * b, every) if c > start]
        edges = [start, *cuts, n]
        return list(zip(edges[:-1], edges[1:], strict=True))

    def _run_epoch(self, epoch: int, start: int = 0, done: float = 0.0) -> float:
        """Returns the mean training loss over the epoch (all ranks). ``start``: samples of the
        epoch's stream trained on before a resume, whose summed loss was ``done``."""
        self.model.train()
        if self.first_step_time is None:
            self.first_step_time = time.time()
        total, steps = done, round(start / self.config.batch_size)
        for first, stop in self._segments(start):
            self.sampler.set_epoch(epoch)
            self.sampler.set_range(first, stop)
            loss, steps = self._run_part(epoch, steps)
            (part,) = _sum_over_ranks(self.comm, [loss])  # waits for all ranks
            if self.claims is not None:
                self.claims.end_epoch(self.sampler.batches)  # type: ignore[union-attr]
            total += part
            if stop < self.n_train:  # a checkpoint within the epoch: its cursor
                cursor = {"seed": self.config.seed, "epoch": epoch, "consumed": stop,
                          "train_loss_sum": total}
                self.session.save_checkpoint(self.checkpoint_state(), reshard=True,
                                             cursor=cursor)  # waits for all ranks
        return total / self.n_train

    def _run_part(self, epoch: int, steps: int) -> tuple[float, int]:
        """This rank's summed loss over the sampler's range, and the epoch's steps after it."""
        loss = 0.0
        if isinstance(self.sampler, ClaimedBatches):  # a fast rank takes more batches
            global_batch = self.sampler.local * self.comm.size
            # the schedule's clock: the epoch's claimed batches, shared by all ranks
            share = max(1, -(-self.n_train // self.sampler.local) // self.comm.size)
            for batch in self.loader:
                self.schedule.apply(self.optimizer, epoch, steps, share)
                loss += self._step(batch, global_batch, last_in_epoch=False)
                steps += 1
        else:
            first, last = self.sampler.first_batch, self.epoch_steps - 1
            for i, batch in enumerate(self.loader):
                self.schedule.apply(self.optimizer, epoch, first + i, last + 1)
                loss += self._step(batch, self.sampler.global_batch(i),
                                   last_in_epoch=first + i == last)
            steps = first + len(self.sampler)
        return loss, steps

    @torch.no_grad()
    def evaluate(self, dataset: Any) -> dict[str, float]:
        """Mean loss and metrics over all of ``dataset``: each rank scores a strided shard;
        per-batch sums (counts of correct predictions, float64 sums of per-sample losses) are
        added over ranks by ``session.reduce``, so P ranks report what one would."""
        self.model.eval()
        whole = isinstance(dataset, InMemory)  # one batch: as fast as before the loaders
        size = -(-len(dataset) // self.comm.size) if whole else self.config.batch_size
        shard = Shard(len(dataset), batch_size=size, rank=self.comm.rank, size=self.comm.size)
        sums: dict[str, float] = {}
        count = 0
        for batch in make_loader(dataset, shard, workers=0, device=self.device):
            if batch is None:
                continue
            inputs, y = self.shape.split(batch)
            if not rows(y):
                continue
            inputs, y = to_device(inputs, self.device), to_device(y, self.device)
            with self.precision.autocast():
                output = self.shape.forward(self.model, inputs)
            for name, value in self.batch_sums(_as_float(output), y).items():
                sums[name] = sums.get(name, 0.0) + value
            count += rows(y)
        names = self._metric_names(sums)
        return self.session.reduce({m: (sums.get(m, 0.0), count) for m in names})

    def _metric_names(self, sums: dict[str, float]) -> list[str]:
        """The same names in the same order on every rank (a rank with no rows has none)."""
        if self.config.metrics is None:
            return ["loss", "accuracy" if self.config.task == "classification" else "mae"]
        found = self.comm.allgather(sorted(sums))  # waits for all ranks
        return sorted(set().union(*found))

    def checkpoint_state(self) -> dict[str, Any]:
        """This rank's part of a checkpoint: everything its next epoch depends on."""
        return {
            "model": self.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.precision.state_dict(),
            "algorithm": self.algorithm.state_dict(),
            "torch_rng": torch.get_rng_state(),
            # dropout on a GPU draws from the device's generator, not the CPU's
            "cuda_rng": (torch.cuda.get_rng_state(self.device)
                         if self.device.type == "cuda" else None),
            "steps": self.steps,
            "slept_s": self.pace.slept_s,
            "widths": self.pruning.widths() if self.pruning is not None else None,
            "pruning": self.pruning.state_dict() if self.pruning is not None else None,
        }

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        if self.pruning is not None:
            self._restore_widths(state.get("widths"))  # the pruned shapes first (collective)
            self.pruning.load_state_dict(state.get("pruning"))
        self.model.load_state_dict(state["model"])  # copies in place: ASGD's flat views hold
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.attach(self.optimizer)
        self.precision.load_state_dict(state.get("scaler"))
        self.algorithm.load_state_dict(state["algorithm"])
        torch.set_rng_state(state["torch_rng"])
        if state.get("cuda_rng") is not None and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda_rng"], self.device)
        self.steps = int(state["steps"])
        self.pace.slept_s = float(state["slept_s"])

    def _prune_step(self, epoch: int) -> None:
        """Pruning at the start of ``epoch`` (collective when a step is due)."""
        assert self.pruning is not None
        new = step_at(self.pruning, epoch, self.model, self.optimizer, self.algorithm,
                      self.make_algorithm)
        if new is not None:
            self.algorithm = new
            self.flops = count_flops(self.model, self.sample)

    def _restore_widths(self, sizes: list[int] | None) -> None:
        """Before a checkpoint's state is loaded: shrink the dense model to its widths."""
        if sizes is None or self.pruning is None or self.pruning.widths() == list(sizes):
            return
        self.pruning.resize(list(sizes), self.optimizer)
        self.algorithm = rebuild(self.algorithm, self.model, self.optimizer, self.make_algorithm)
        self.flops = count_flops(self.model, self.sample)

    def _resume(self) -> tuple[int, list[dict[str, float]], dict[str, Any] | None]:
        """(first epoch to run, the curve so far, the cursor within that epoch if the
        checkpoint was taken in it), from the checkpoint the session resumed from (read when it
        opened), its state loaded."""
        header, mine = self.session.resumed_header, self.session.load_checkpoint()
        if header is None or mine is None:
            return 1, [], None
        self.load_checkpoint_state(mine)
        first, cursor = int(header["epoch"]) + 1, header.get("cursor")
        if cursor is not None and (cursor["epoch"], cursor["seed"]) != (first, self.config.seed):
            raise ValueError(f"the checkpoint's cursor {cursor} is not within epoch {first} of "
                             f"seed {self.config.seed}")
        return first, list(header["history"]), cursor

    def train(self) -> TrainResult:
        session = self.session
        first, history, cursor = self._resume()
        segment_start = time.perf_counter()
        session.start_clock()  # the curve's train_time_s: from here, earlier segments too
        state, reason = "complete", "completed all epochs"
        epochs_run = 0
        per_seed: list[list[tuple[float, dict[str, float]]]] = []
        for epoch in range(first, self.config.epochs + 1):
            start, done = 0, 0.0
            if cursor is not None and epoch == first:  # resumed within the epoch
                start, done = int(cursor["consumed"]), float(cursor["train_loss_sum"])
            if self.pruning is not None and not start:  # (a resumed epoch was pruned already)
                self._prune_step(epoch)  # a step due: waits for all ranks
            train_loss = self._run_epoch(epoch, start, done)
            epochs_run += 1
            with self.algorithm.consensus():  # waits for all ranks (except sync)
                val = self.evaluate(self.data.val)
            if self.replicas:  # the epoch of every seed; the report is their mean
                seeds = [(train_loss, val), *(r.epoch_and_evaluate(epoch) for r in self.replicas)]
                per_seed.append(seeds)
                train_loss = sum(t for t, _ in seeds) / len(seeds)
                val = {k: sum(v[k] for _, v in seeds) / len(seeds) for k in val}
            row = {
                "epoch": epoch,
                "train_loss": train_loss,
                **{f"val_{name}": value for name, value in val.items()},
                "n_params": float(self.n_params),
                **({} if self.flops is None else {"flops": float(self.flops)}),
                # wall seconds of training so far, consensus evaluations included: with
                # val_accuracy, what decides "which algorithm wins on this allocation"
                "train_time_s": session.train_time_s(),
            }
            history.append(row)
            if not math.isfinite(train_loss):  # every rank sees the same summed loss
                state, reason = (
                    "failed",
                    f"diverged: training loss is {train_loss} at epoch {epoch}",
                )
                break
            # Rank 0 records the row in its trial; every rank gets the pruner's decision (a
            # pause without a checkpointer is a stop: nothing to resume from).
            metrics = {k: v for k, v in row.items() if k != "epoch"}
            decision = session.report(epoch, metrics)  # waits for all ranks (bounded), rank 0
            # After the last epoch there is nothing left to save: the trial completes (its
            # value reported, so the pruner still learns from it) rather than being discarded.
            if epoch == self.config.epochs:
                break
            if decision == STOP:
                state, reason = "pruned", f"pruned after epoch {epoch}"
                break
            if session.checkpoint_due():  # a pause, or [checkpoints] every
                # restores on another width: training.state._reshard
                session.save_checkpoint(self.checkpoint_state(), reshard=True)  # all ranks
            if decision == PAUSE:
                state, reason = "paused", f"paused after epoch {epoch}"
                break
        self.algorithm.finish()
        if self.claims is not None:
            self.claims.close()
        for replica in self.replicas:
            replica.end_replica()
        train_time = time.perf_counter() - segment_start  # this run's own seconds
        (slept,) = _sum_over_ranks(self.comm, [self.pace.slept_s])
        steps_per_rank = [int(s) for s in self.comm.allgather(self.steps)]  # waits for all
        test = self.evaluate(self.data.test) if self.data.test is not None else {}
        session.finish()  # waits for all ranks (bounded): the same reports everywhere
        last = history[-1]
        return TrainResult(
            state=state,
            exit_reason=reason,
            values={k: float(v) for k, v in last.items() if k != "epoch"},
            epochs_run=epochs_run,
            history=history,
            train_time_s=train_time,
            samples_per_s=epochs_run * self.n_train / train_time if train_time else 0.0,
            first_step_time=self.first_step_time,
            n_params=self.n_params,
            flops=self.flops,
            test_accuracy=test.get("accuracy"),
            counters=self.algorithm.counters(),
            slowdown_sleep_s=slept,
            steps_per_rank=steps_per_rank,
            start_epoch=first,
            checkpoint=session.checkpoint,  # rank 0: the newest this run wrote
            checkpoint_s=self.checkpointer.seconds if self.checkpointer is not None else 0.0,
            checkpoint_bytes=self.checkpointer.bytes if self.checkpointer is not None else 0,
            repeats=_spread(per_seed[-1], self.config.seed) if per_seed else None,
            pruned_units=self.pruning.report() if self.pruning is not None else None,
        )

    def epoch_and_evaluate(self, epoch: int) -> tuple[float, dict[str, float]]:
        """A replica's epoch (``[training] repeats``): its training loss and validation."""
        caller = torch.get_rng_state()
        torch.set_rng_state(self._rng)  # as if it trained alone
        try:
            loss = self._run_epoch(epoch)
            with self.algorithm.consensus():  # waits for all ranks (except sync)
                return loss, self.evaluate(self.data.val)
        finally:
            self._rng = torch.get_rng_state()
            torch.set_rng_state(caller)

    def end_replica(self) -> None:
        """A replica's end of training: its algorithm finished, its session's communicator
        freed."""
        self.algorithm.finish()
        if self.claims is not None:
            self.claims.close()
        self.session.finish()

    def state_dict(self) -> dict[str, Any]:
        return {k: v.detach().cpu() for k, v in self.model.state_dict().items()}


def _spread(seeds: list[tuple[float, dict[str, float]]], first: int) -> dict[str, Any]:
    """Each seed's final values and their standard deviation (n - 1) by name."""
    rows = [{"train_loss": t, **{f"val_{k}": v for k, v in val.items()}} for t, val in seeds]
    std = {k: float(np.std([r[k] for r in rows], ddof=1)) for k in rows[0]}
    return {"seeds": list(range(first, first + len(rows))), "values": rows, "std": std}


def _as_float(output: Any) -> Any:
    """Autocast outputs (bf16, fp16) back in float32 for the exact validation sums."""
    if isinstance(output, torch.Tensor):
        return output.float() if output.is_floating_point() else output
    if isinstance(output, dict):  # a Hugging Face ModelOutput is a dict too
        return {k: _as_float(v) for k, v in output.items()}
    if isinstance(output, tuple | list):
        return type(output)(_as_float(v) for v in output)
    return output


def _as_train_data(data: TrainData | Dataset | None, config: TrainConfig) -> TrainData:
    """The trial's data: given (a warm pool loads it before the trial), or loaded here."""
    if data is None:
        return load_train_data(config)
    if isinstance(data, Dataset):  # arrays, as callers before the loaders passed them
        return from_arrays(data, config.task)
    return data

