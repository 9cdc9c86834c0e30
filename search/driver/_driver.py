"""The driver loop: ask Optuna for a trial, run it on Dask as an MPI job, tell the outcome.

The driver owns each trial's life. Liveness comes from the Dask future: whatever happens to the
job (exception, non-zero exit, timeout, lost worker), the trial is told FAIL with the reason. A
trial lost with its worker is re-queued with the same parameters (``budget.max_retries``).

A trial is an MPI training job, or (``objective`` in the study file) a Python function or a
benchmark table on a Dask worker. Benchmark answers carry ``sim_time_s``: the driver then keeps a
simulated clock and tells trials in the order they would finish on ``concurrency`` workers, so a
table benchmark runs the same loop as a real sweep. The clock is one injected object
(``clock=``, search.simulated._clock): it says what the driver's own work costs in simulated time
(nothing, a constant per trial, or its measured wall time) and plays the trials' epoch reports
and faults in order.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from distributed import Client, Future
from optuna.trial import FrozenTrial, TrialState

from search.backends._dask import run_trial_on_worker
from search.backends._objectives import is_benchmark, run_function_trial
from search.clusters._base import MPI
from search.driver._budget import budget_lock, live_configurations
from search.driver._outcomes import (
    RESULT_ATTRS,
    RunCounts,
    Running,
    fetch_result,
    interruption,
    log_directory,
    lost_result,
    outcome,
    record_genome,
    result_values,
    weights_directory,
)
from search.driver._resize import SEGMENTS_ATTR, WIDTH_ATTR, WidenOnPromotion, segments_after
from search.driver._segments import continue_curve, next_start, widen_idle
from search.driver._study import (
    DRIVER_ATTR,
    HEARTBEAT_S,
    RESUME_FROM_ATTR,
    driver_beat_key,
    driver_id,
    finished_configurations,
    paused_when_lost,
    requeue,
    tell_paused,
)
from search.driver._warm_start import duplicate_of
from search.pruners._promotion import (
    LINEAGE_EPOCHS_ATTR,
    LINEAGE_RANK_SECONDS_ATTR,
    LINEAGE_TOTALS,
    LINEAGE_WALL_ATTR,
    PAUSED_ATTR,
    RESUME_OF_ATTR,
)
from search.simulated._clock import EventQueue, SimClock, default_clock
from search.storage._checkpoint_store import fix_store
from search.strategies._registry import pruner_spec
from search.studyfile._study_file import StudyFile
from training.contract import (
    CHECKPOINT_ATTR,
    SINGLE_NODE_ENV,
    TrialSpec,
    build_pruner,
)
from training.launch import TRIAL_CORES_ENV

Event = Callable[[str, optuna.Trial | None, RunCounts, dict[str, Any] | None], None]
# Called on every turn of the loop with whether trials are running (or waiting for a worker);
# raises (search.clusters._watch.ClusterFailed) when the cluster cannot deliver.
Watch = Callable[..., None]


def untold_configurations(done: list[tuple[Future, Running, dict[str, Any] | None]]) -> int:
    """How many of the ended, not yet told trials are configurations of the budget (a
    promoted continuation is not one: counting it would end the study a configuration short)."""
    return sum(not run.continuation for _future, run, _result in done)


class Driver:
    """Runs a study's remaining budget on ``client``. ``on_event`` feeds the progress display."""

    def __init__(
        self,
        sf: StudyFile,
        study: optuna.Study,
        client: Client,
        *,
        storage_url: str,
        on_event: Event | None = None,
        watch: Watch | None = None,
        single_node: bool = False,
        clock: SimClock | None = None,
    ) -> None:
        self.sf = sf
        self.study = study
        self.client = client
        self.storage_url = storage_url
        self.on_event = on_event or (lambda *a: None)
        self.watch = watch
        # Trials of a local cluster run on this machine: their MPI traffic stays on it.
        self.job_env = {**(SINGLE_NODE_ENV if single_node else {}), **sf.launcher.env}
        self.single_node = single_node
        self.space = sf.search_space
        self.pruner = pruner_spec(
            sf.pruner.name, sf.pruner.spec_options(sf.training.epochs)
        ).to_json()
        built = build_pruner(self.pruner)
        # A pruner that pauses (search.pruners._promotion) also says which paused trials to resume.
        self.promoter: Any = built if getattr(built, "pauses", False) else None
        # How wide a promoted trial's next segment runs (search.driver._resize); None: as asked.
        self.resize = (WidenOnPromotion(**sf.resize.to_json())
                       if sf.resize is not None and self.promoter is not None else None)
        if self.resize is not None:  # a promoted trial pauses to be widened (its rank 0 asks)
            self.pruner["kwargs"]["widen_until"] = self.resize.max_ranks
        self.checkpoints = None
        if sf.checkpointing:
            # Fixed when the study first checkpointed, read back from the study (any host,
            # any directory): search.storage._checkpoint_store.
            store = fix_store(study, sf, storage_url)
            self.checkpoints = {"store": store, "every": sf.checkpoints.every,
                                "every_steps": sf.checkpoints.every_steps,
                                "keep": sf.checkpoints.keep}
        self.owner = driver_id()
        # Dask keys name this driver object, not only its process: a key still held from an
        # earlier driver in the same process (a notebook, a test) would hand back that trial's
        # result (Dask reuses a key's future).
        self.task_prefix = f"{self.owner}-{uuid.uuid4().hex[:8]}"
        seed = sf.strategy.seed
        self.noise_seed = random.getrandbits(32) if seed is None else seed * 1_000_003
        self.simulated = is_benchmark(sf.objective)
        # Futures that have ended, put here by Dask as each ends (real trials): the loop takes
        # them in O(1) instead of waiting on every running future at each turn.
        self._ended: queue.SimpleQueue[Future] = queue.SimpleQueue()
        # A benchmark's simulated clock (search.simulated._clock): what the driver's own work costs
        # on it, and the running trials' events in the order they happen.
        self.clock = clock if clock is not None else default_clock(sf.objective)
        self.events = EventQueue(
            study=study, clock=self.clock, fetch=fetch_result, lost=lost_result,
            checkpoint_attr=CHECKPOINT_ATTR,
        )

    @property
    def sim_clock(self) -> float:
        """The driver's simulated time (a benchmark objective)."""
        return self.clock.now()

    def _finished_count(self) -> int:
        return finished_configurations(self.study)

    def _submit(self, counts: RunCounts) -> tuple[Future, Running] | None:
        trial = self.study.ask()
        trial.set_user_attr(DRIVER_ATTR, self.owner)  # claimed at once: see recover_orphans
        attrs = trial.user_attrs  # an enqueued continuation or retry carries its resume point
        duplicate = duplicate_of(self.study, trial.number, attrs)
        if duplicate is not None:  # not a failure, and not a configuration of the budget
            trial.set_user_attr("exit_reason", duplicate)
            self.study.tell(trial, state=TrialState.FAIL)
            return None
        if not self.sf.trains_on_mpi:
            return self._submit_function(trial, counts)
        resume = attrs.get(RESUME_FROM_ATTR) if self.checkpoints is not None else None
        ask_time = time.time()
        own_loop = None
        try:
            params = self.space.suggest(trial)
            genome = params.pop("genome", None)
            if self.sf.own_loop is not None:  # the user's params are theirs; ranks is ours
                config = self.sf.training.with_params(  # too, and prune_<key> (prune_units)
                    {k: v for k, v in params.items() if k == "ranks" or k.startswith("prune_")})
                if genome is not None:
                    record_genome(trial, genome)
                    params["genome"] = genome.to_dict()
                own_loop = {"function": self.sf.own_loop, "params": params,
                            "sys_path": [os.getcwd()]}
            else:
                config = self.sf.training.with_params(params)
            if genome is not None and own_loop is None:
                config = config.model_validate({**config.model_dump(), "genome": genome.to_dict()})
                record_genome(trial, genome)
            if resume is not None:
                continue_curve(self.study, trial, resume, len(self.sf.objectives) > 1)
                if self.resize is not None and WIDTH_ATTR in attrs:  # the policy's width
                    config = config.model_validate(
                        {**config.model_dump(), "ranks": int(attrs[WIDTH_ATTR])})
            trial.set_user_attr(WIDTH_ATTR, config.ranks)  # this segment's width, recorded
        except Exception as exc:  # a sampler or space problem fails this trial, not the study
            self._fail(trial, counts, {"exit_reason": f"could not build the trial: {exc}"})
            return None
        weights = None
        if config.keep_weights and own_loop is None:  # rank 0 writes them at the trial's end
            weights = self._weights_path(trial.number)
            if weights is not None:  # beside them, what build(params, data) gets: to load them
                with contextlib.suppress(OSError):
                    Path(weights).with_suffix(".json").write_text(json.dumps(
                        {"params": config.plugin_params(), "config": config.model_dump()},
                        default=str))
        spec = TrialSpec(
            config=config,
            weights_path=weights,
            objectives=self.sf.objectives,
            study_name=self.study.study_name,
            storage_url=self.storage_url,
            trial_id=trial._trial_id,  # noqa: SLF001 - rank 0 reopens this very trial
            trial_number=trial.number,
            pruner=self.pruner,
            report=True,  # a value per epoch, or a vector (several objectives)
            launcher=self.sf.launcher.command,
            env=self.job_env,
            timeout_s=self.sf.budget.trial_timeout,
            ask_time=ask_time,
            warm=self.sf.launcher.warm,
            # [resize] on a warm pool: one pool of max_ranks serves every width of a trial, a
            # continuation it paused restores from the pool's memory (training.jobs._regroup).
            pool_ranks=self.resize.max_ranks if self.resize is not None else None,
            checkpoints=self.checkpoints,
            resume_from=str(resume["id"]) if resume is not None else None,
            own_loop=own_loop,
        )
        future = self.client.submit(
            run_trial_on_worker,
            spec,
            key=self._task_key(trial),
            resources={MPI: config.ranks},
            pure=False,
            retries=0,  # the driver decides about retries, never Dask
            **self._affinity(attrs, spec),
        )
        self._watch(future)
        self.on_event("started", trial, counts, None)
        carried = {key: float(attrs.get(key, 0)) for key in LINEAGE_TOTALS}
        return future, Running(
            trial,
            config.ranks,
            sim_start=self.sim_clock,
            continuation=RESUME_OF_ATTR in attrs,
            resumed_epoch=int(resume["epoch"]) if resume is not None else 0,
            carried=carried,
        )

    def _submit_function(
        self, trial: optuna.Trial, counts: RunCounts
    ) -> tuple[Future, Running] | None:
        try:
            params = self.space.suggest(trial)
        except Exception as exc:  # a sampler or space problem fails this trial, not the study
            self._fail(trial, counts, {"exit_reason": f"could not build the trial: {exc}"})
            return None
        if params.get("genome") is not None:
            record_genome(trial, params["genome"])
        attrs = trial.user_attrs
        # On the simulated clock a promoted paused trial goes on from its stand-in checkpoint
        # (search.simulated._clock): its curve so far is its parent's, as for a real trial.
        resume = attrs.get(RESUME_FROM_ATTR) if self.simulated else None
        if resume is not None:
            continue_curve(self.study, trial, resume, len(self.sf.objectives) > 1)
        task = {
            "objective": self.sf.objective,
            "params": params,
            "trial_params": dict(trial.params),  # Optuna's flat form (a genome's too)
            "objectives": self.sf.objectives,
            "study_name": self.study.study_name,
            "storage_url": self.storage_url,
            "trial_id": trial._trial_id,  # noqa: SLF001 - the report callback reopens this trial
            "pruner": self.pruner,
            "report": True,
            "noise_seed": self.noise_seed + trial.number,
            "sys_path": [os.getcwd()],  # "pkg.module:function" imports as it does here
        }
        future = self.client.submit(
            run_function_trial,
            task,
            key=self._task_key(trial),
            pure=False,
            retries=0,
        )
        self._watch(future)
        self.on_event("started", trial, counts, None)
        start = self.clock.serve() if self.simulated else 0.0  # the driver's work is charged
        return future, Running(
            trial, 1, sim_start=start, continuation=RESUME_OF_ATTR in attrs,
            resumed_epoch=int(resume["epoch"]) if resume is not None else 0,
            carried={key: float(attrs.get(key, 0)) for key in LINEAGE_TOTALS})

    def _affinity(self, attrs: dict[str, Any], spec: TrialSpec) -> dict[str, Any]:
        """A continuation on warm pools goes back to the Dask worker that ran its parent when
        that worker is idle (else anywhere, not to wait for it): its pool holds the paused
        state in memory (training.jobs._regroup)."""
        if not (spec.warm and spec.pool_ranks and RESUME_OF_ATTR in attrs) or self.simulated:
            return {}
        parent = self.study._storage.get_trial(  # noqa: SLF001 - one trial by number
            self.study._storage.get_trial_id_from_study_id_trial_number(  # noqa: SLF001
                self.study._study_id, int(attrs[RESUME_OF_ATTR])))  # noqa: SLF001
        address = parent.user_attrs.get("dask_worker")
        try:
            idle = address is not None and not self.client.processing().get(address, True)
        except Exception:  # noqa: BLE001 - only a preference: never fail a trial for it
            idle = False
        return {"workers": [address], "allow_other_workers": True} if idle else {}

    def _watch(self, future: Future) -> None:
        """A real trial's future reports its end to ``_collect`` (the simulated clock waits on
        every answer instead)."""
        if not self.simulated:
            future.add_done_callback(self._ended.put)

    def _fail(
        self,
        trial: optuna.Trial,
        counts: RunCounts,
        result: dict[str, Any],
        *,
        lost: bool = False,
    ) -> None:
        reason = str(result.get("exit_reason") or "unknown error")
        if result.get("log"):  # a failed MPI job's whole output, kept beside the storage
            path = self._write_log(trial.number, str(result["log"]))
            if path:
                trial.set_user_attr("log_path", path)
                result = {**result, "log_path": path}
        if lost and (paused := paused_when_lost(self.study, trial, self.promoter)) is not None:
            tell_paused(self.study, trial, paused, reason.splitlines()[0])  # a rung: ask again
            counts.paused += 1
            counts.pruned += 1
            counts.continuations += RESUME_OF_ATTR in trial.user_attrs  # not a configuration
            self.on_event("pruned", trial, counts, result)
            return
        if lost:  # the worker or its connection died: the parameters deserve another run
            reason = requeue(self.study, trial, reason, self.sf.budget.max_retries)
        trial.set_user_attr("exit_reason", reason)
        self.study.tell(trial, state=TrialState.FAIL)
        counts.failed += 1
        counts.failures.append(f"trial {trial.number}: {reason.splitlines()[0]}")
        self.on_event("failed", trial, counts, result)

    def _weights_path(self, number: int) -> str | None:
        """``detol-weights/STUDY/trial-N.pt``; None when the directory cannot be made."""
        path = self._weights_file(number)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        return str(path)

    def _weights_file(self, number: int) -> Path:
        return weights_directory(self.storage_url, self.study.study_name).resolve() / (
            f"trial-{number}.pt")

    def _write_log(self, number: int, text: str) -> str | None:
        """``detol-logs/STUDY/trial-N.log`` beside the storage file (else in the working
        directory); its path, or None when it cannot be written (the trial still fails)."""
        directory = log_directory(self.storage_url, self.study.study_name)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"trial-{number}.log"
            path.write_text(text)
        except OSError:
            return None
        return str(path)

    def _task_key(self, trial: optuna.Trial) -> str:
        # search.clusters._base reads the prefix "trial-STUDY" (dask.utils.key_split)
        return f"trial-{self.study.study_name}-{trial.number}-{self.task_prefix}"

    def _finished_elsewhere(self, trial: optuna.Trial) -> FrozenTrial | None:
        """The trial as stored, if something else already finished it: another driver's orphan
        recovery (search.driver._study.recover_orphans) that took this driver for dead while it
        was frozen or cut off, or a user. Its result is then a late one: never told."""
        stored = self.study._storage.get_trial(trial._trial_id)  # noqa: SLF001 - one read
        return stored if stored.state.is_finished() else None

    def _refuse(self, trial: optuna.Trial, stored: FrozenTrial, counts: RunCounts,
                result: dict[str, Any]) -> None:
        why = str(stored.user_attrs.get("exit_reason") or "no reason stored").splitlines()[0]
        counts.refused += 1
        self.on_event("refused", trial, counts, {
            **result, "exit_reason": f"result refused: the trial was already {stored.state.name} "
                                     f"in the storage ({why}); its parameters ran again there"})

    def _finish(self, run: Running, result: dict[str, Any], counts: RunCounts) -> None:
        trial = run.trial
        stored = self._finished_elsewhere(trial)
        if stored is not None:
            self._refuse(trial, stored, counts, result)
            return
        for key in RESULT_ATTRS:
            if result.get(key) is not None:
                trial.set_user_attr(key, result[key])
        for key, value in (result.get("user_attrs") or {}).items():
            trial.set_user_attr(key, value)
        if self.simulated:
            trial.set_user_attr("sim_clock_s", self.sim_clock)
            trial.set_user_attr("sim_start_s", run.sim_start)
        if result.get("epochs_run") is not None:
            # The work of the whole lineage (earlier segments + this one), beside this
            # segment's own epochs_run and rank_seconds.
            own = {LINEAGE_EPOCHS_ATTR: result["epochs_run"],
                   LINEAGE_RANK_SECONDS_ATTR: result.get("rank_seconds"),
                   LINEAGE_WALL_ATTR: result.get("wall_time_s")}
            for key, value in own.items():
                total = run.carried.get(key, 0.0) + float(value or 0.0)
                trial.set_user_attr(key, int(total) if key == LINEAGE_EPOCHS_ATTR else total)
            if self.resize is not None:  # each width change a recorded segment
                trial.set_user_attr(SEGMENTS_ATTR, segments_after(
                    trial.user_attrs.get(SEGMENTS_ATTR), trial.number,
                    int(result.get("ranks") or run.ranks), int(result["epochs_run"]),
                    float(result.get("rank_seconds") or 0.0)))
        state = result.get("state")
        values = result_values(result, self.sf.objectives)
        if state in ("complete", "pruned", "paused") and run.continuation:
            counts.continuations += 1
        if state == "complete" and values is not None:
            if self.sf.training.keep_weights and self.sf.own_loop is None:
                kept = self._weights_file(trial.number)
                if kept.exists():  # rank 0 wrote them
                    trial.set_user_attr("weights_path", str(kept))
            self.study.tell(trial, values if len(values) > 1 else values[0])
            counts.complete += 1
            self.on_event("complete", trial, counts, result)
        elif state in ("pruned", "paused"):
            if state == "paused":
                epoch = int(result.get("start_epoch") or 1) + int(result["epochs_run"]) - 1
                trial.set_user_attr(PAUSED_ATTR, epoch)
                counts.paused += 1
            self.study.tell(trial, state=TrialState.PRUNED)
            counts.pruned += 1
            self.on_event("pruned", trial, counts, result)
        else:
            if state == "complete":
                result = {**result, "exit_reason": f"no finite value for {self.sf.objectives}"}
            self._fail(trial, counts, result, lost=bool(result.get("lost")))

    def _collect(
        self, running: dict[Future, Running]
    ) -> list[tuple[Future, Running, dict[str, Any] | None]]:
        """The trials to tell now, each with its result, taken out of ``running``. A real
        trial's result is None here: fetched (``outcome``) once its successor is submitted."""
        if self.simulated:
            return self._collect_simulated(running)  # type: ignore[return-value]
        out: list[tuple[Future, Running, dict[str, Any] | None]] = [
            (f, running.pop(f), None) for f in self._ended_now() if f in running]
        limit = self.sf.budget.trial_timeout
        if limit is not None:
            # MPI jobs stop themselves at trial_timeout; this catches function objectives and
            # a worker that stopped answering.
            grace = 30.0 if self.sf.trains_on_mpi else 0.0
            now = time.monotonic()
            for f in [f for f, r in running.items() if now - r.started > limit + grace]:
                f.cancel()
                reason = f"trial_timeout of {limit:g} s reached"
                out.append((f, running.pop(f), {"state": "failed", "exit_reason": reason}))
        return out

    def _ended_now(self, timeout: float = 0.5) -> list[Future]:
        """The futures that ended since the last call, waiting up to ``timeout`` for one (a
        future cancelled at its timeout may come again here: not running, it is skipped)."""
        try:
            ended = [self._ended.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                ended.append(self._ended.get_nowait())
            except queue.Empty:
                return ended

    def _collect_simulated(
        self, running: dict[Future, Running]
    ) -> list[tuple[Future, Running, dict[str, Any]]]:
        """Discrete-event simulation: the answers are instant; play the running trials' events
        (epoch reports the pruner judges, faults) until one ends, and tell that one."""
        self.clock.idle()  # waiting for the next event is not the driver's work
        future, run, result = self.events.next_end(running)
        self.clock.busy()
        return [(future, run, result)]

    def _fill(
        self,
        running: dict[Future, Running],
        counts: RunCounts,
        *,
        concurrency: int,
        trials: int,
        untold: int = 0,
    ) -> None:
        """Start trials until ``concurrency`` run or the budget is covered. ``untold`` trials
        configurations have ended but are not told yet: they may still complete, so they count
        as running (an untold continuation is no configuration of the budget)."""
        def spent() -> bool:
            configurations = sum(not r.continuation for r in running.values())
            return counts.finished + configurations + untold >= trials

        while counts.failed < self.sf.budget.max_failures and len(running) < concurrency:
            # The rule of pause-and-promote (search.driver._segments.next_start, which the replay
            # runs too): promotions first, they are not new configurations.
            start = next_start(self.study, self.promoter, budget_spent=spent(),
                               resize=self.resize)
            if start is None:
                break
            counts.promoted += start == "continuation"
            with budget_lock(self.study, self.storage_url):  # other drivers: search.driver._budget
                if start == "configuration" and live_configurations(self.study) >= trials:
                    break
                submitted = self._submit(counts)
            if submitted is not None:
                running[submitted[0]] = submitted[1]
        if self.resize is not None and self.resize.idle:
            # The study's end: slots still idle go to the running trials (the replay's rule too).
            # Each worker offers max_ranks slots (search.driver._open_cluster); a trial uses its
            # width of them.
            slots = self.sf.max_ranks
            idle = (concurrency - len(running)) * slots + sum(
                max(0, slots - r.ranks) for r in running.values())
            widen_idle(self.study, self.promoter, budget_spent=spent(), resize=self.resize,
                       idle=idle)
        counts.running = len(running)

    def run(self, *, trials: int, concurrency: int, timeout: float | None) -> RunCounts:
        counts = RunCounts(finished_before=self._finished_count(), target=trials)
        if self.single_node and TRIAL_CORES_ENV not in self.job_env:
            # threads_per_rank left out: a trial's ranks share this machine's cores with the
            # other trials running beside it (training.launch.rank_threads).
            cores = max(1, len(os.sched_getaffinity(0)) // max(1, concurrency))
            self.job_env = {**self.job_env, TRIAL_CORES_ENV: str(cores)}
        running: dict[Future, Running] = {}
        done: list[tuple[Future, Running, dict[str, Any] | None]] = []
        # With several trials running the study is asynchronous anyway, so a freed slot gets its
        # next trial before the finished one is told: workers never wait for the bookkeeping.
        # One at a time (and on a simulated clock), the tell comes first, so the strategy sees
        # every result before it proposes again.
        pipeline = concurrency > 1 and not self.simulated
        start = last_beat = time.monotonic()
        try:
            while True:
                # On a benchmark's simulated clock the budget is simulated seconds.
                elapsed = self.sim_clock if self.simulated else time.monotonic() - start
                out_of_time = timeout is not None and elapsed > timeout
                if not out_of_time:
                    self._fill(running, counts, concurrency=concurrency, trials=trials)
                if not running:
                    if counts.failed >= self.sf.budget.max_failures:
                        counts.stopped_because = (
                            f"stopped after {counts.failed} failed trials (budget.max_failures)"
                        )
                    elif out_of_time:
                        counts.stopped_because = f"budget.timeout of {timeout:g} s reached"
                    break
                done = self._collect(running)
                if self.watch is not None:
                    self.watch(waiting=bool(running))
                if done and pipeline and not out_of_time:
                    untold = untold_configurations(done)
                    self._fill(
                        running, counts, concurrency=concurrency, trials=trials, untold=untold
                    )
                while done:
                    future, run, result = done.pop(0)
                    self._finish(run, outcome(future, result), counts)
                if time.monotonic() - last_beat > HEARTBEAT_S:
                    # Lets drivers on other hosts tell our running trials from orphans: one
                    # write for all of them (one per trial: 1,024 writes every HEARTBEAT_S).
                    last_beat = time.monotonic()
                    self.study.set_user_attr(driver_beat_key(self.owner), time.time())
                counts.running = len(running)
                self.on_event("tick", None, counts, None)
        except BaseException as exc:
            # Ctrl-C, a cluster that cannot deliver, or a driver error: no trial is left RUNNING.
            for _future, run, result in done:  # ended before the interrupt: tell what happened
                try:
                    self._finish(run, outcome(_future, result), counts)
                except Exception:  # noqa: BLE001 - still fail it below rather than leave it
                    running[_future] = run
            why = interruption(exc)
            for future in running:
                future.cancel()  # the worker kills the trial's MPI job within half a second
            for run in running.values():
                if self._finished_elsewhere(run.trial) is not None:
                    continue  # failed and re-queued by another driver already
                # Not the trial's fault: its parameters run again when the study resumes.
                reason = requeue(self.study, run.trial, why, self.sf.budget.max_retries)
                run.trial.set_user_attr("exit_reason", reason)
                self.study.tell(run.trial, state=TrialState.FAIL)
            raise
        return counts
