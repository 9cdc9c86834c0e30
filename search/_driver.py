"""The driver loop: ask Optuna for a trial, run it on Dask as an MPI job, tell the outcome.

The driver owns each trial's life. Liveness comes from the Dask future: whatever happens to the
job (exception, non-zero exit, timeout, lost worker), the trial is told FAIL with the reason.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna
from distributed import Client, Future, wait
from optuna.trial import TrialState

from search._backend import run_trial_on_worker
from search._cluster import MPI
from search._registry import pruner_spec
from search._study import DRIVER_ATTR, driver_id
from search._study_file import StudyFile
from training.launch import TrialSpec

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# User attributes copied from an MPI job's result onto its trial.
RESULT_ATTRS = (
    "ranks",
    "algorithm",
    "wall_time_s",
    "rank_seconds",
    "train_time_s",
    "epochs_run",
    "samples_per_s",
    "exit_reason",
    "n_params",
    "flops",
    "test_accuracy",
    "launch_overhead_s",
    "command",
    "history",
    "counters",
)


@dataclass
class RunCounts:
    """What one ``search run`` did, and what the study holds now."""

    complete: int = 0
    pruned: int = 0
    failed: int = 0
    running: int = 0
    finished_before: int = 0
    target: int = 0
    stopped_because: str = ""
    best: str = ""
    failures: list[str] = field(default_factory=list)

    @property
    def finished(self) -> int:
        return self.finished_before + self.complete + self.pruned


@dataclass
class _Running:
    trial: optuna.Trial
    ranks: int


Event = Callable[[str, optuna.Trial | None, RunCounts, dict[str, Any] | None], None]


def _values(result: dict[str, Any], objectives: list[str]) -> list[float] | None:
    values = result.get("values") or {}
    out = [float(values[m]) for m in objectives if m in values]
    return out if len(out) == len(objectives) and all(map(math.isfinite, out)) else None


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
    ) -> None:
        self.sf = sf
        self.study = study
        self.client = client
        self.storage_url = storage_url
        self.on_event = on_event or (lambda *a: None)
        self.space = sf.search_space
        self.pruner = pruner_spec(
            sf.pruner.name, sf.pruner.spec_options(sf.training.epochs)
        ).to_json()
        self.owner = driver_id()

    def _finished_count(self) -> int:
        return len(self.study.get_trials(deepcopy=False, states=FINISHED))

    def _submit(self, counts: RunCounts) -> tuple[Future, _Running] | None:
        trial = self.study.ask()
        trial.set_user_attr(DRIVER_ATTR, self.owner)
        ask_time = time.time()
        try:
            params = self.space.suggest(trial)
            genome = params.pop("genome", None)
            config = self.sf.training.with_params(params)
            if genome is not None:
                config = config.model_validate({**config.model_dump(), "genome": genome.to_dict()})
                trial.set_user_attr("genome", genome.canonical_json)
                trial.set_user_attr("genome_key", genome.key)
                trial.set_user_attr("genome_summary", genome.summary())
        except Exception as exc:  # a sampler or space problem fails this trial, not the study
            self._fail(trial, counts, {"exit_reason": f"could not build the trial: {exc}"})
            return None
        spec = TrialSpec(
            config=config.model_dump(),
            objectives=self.sf.objectives,
            study_name=self.study.study_name,
            storage_url=self.storage_url,
            trial_id=trial._trial_id,  # noqa: SLF001 - rank 0 reopens this very trial
            trial_number=trial.number,
            pruner=self.pruner,
            report=len(self.sf.objectives) == 1,
            launcher=self.sf.launcher.command,
            env=self.sf.launcher.env,
            timeout_s=self.sf.budget.trial_timeout,
            ask_time=ask_time,
        )
        future = self.client.submit(
            run_trial_on_worker,
            spec.to_json(),
            key=f"trial-{self.study.study_name}-{trial.number}-{self.owner}",
            resources={MPI: config.ranks},
            pure=False,
            retries=0,  # the driver decides about retries, never Dask
        )
        self.on_event("started", trial, counts, None)
        return future, _Running(trial, config.ranks)

    def _fail(self, trial: optuna.Trial, counts: RunCounts, result: dict[str, Any]) -> None:
        reason = str(result.get("exit_reason") or "unknown error")
        trial.set_user_attr("exit_reason", reason)
        self.study.tell(trial, state=TrialState.FAIL)
        counts.failed += 1
        counts.failures.append(f"trial {trial.number}: {reason.splitlines()[0]}")
        self.on_event("failed", trial, counts, result)

    def _finish(self, run: _Running, result: dict[str, Any], counts: RunCounts) -> None:
        trial = run.trial
        for key in RESULT_ATTRS:
            if result.get(key) is not None:
                trial.set_user_attr(key, result[key])
        state = result.get("state")
        values = _values(result, self.sf.objectives)
        if state == "complete" and values is not None:
            self.study.tell(trial, values if len(values) > 1 else values[0])
            counts.complete += 1
            self.on_event("complete", trial, counts, result)
        elif state == "pruned":
            self.study.tell(trial, state=TrialState.PRUNED)
            counts.pruned += 1
            self.on_event("pruned", trial, counts, result)
        else:
            if state == "complete":
                result = {**result, "exit_reason": f"no finite value for {self.sf.objectives}"}
            self._fail(trial, counts, result)

    def run(self, *, trials: int, concurrency: int, timeout: float | None) -> RunCounts:
        counts = RunCounts(finished_before=self._finished_count(), target=trials)
        running: dict[Future, _Running] = {}
        start = time.monotonic()
        try:
            while True:
                out_of_time = timeout is not None and time.monotonic() - start > timeout
                too_many_failures = counts.failed >= self.sf.budget.max_failures
                while (
                    not out_of_time
                    and not too_many_failures
                    and len(running) < concurrency
                    and counts.finished + len(running) < trials
                ):
                    submitted = self._submit(counts)
                    if submitted is not None:
                        running[submitted[0]] = submitted[1]
                    too_many_failures = counts.failed >= self.sf.budget.max_failures
                counts.running = len(running)
                if not running:
                    if too_many_failures:
                        counts.stopped_because = (
                            f"stopped after {counts.failed} failed trials (budget.max_failures)"
                        )
                    elif out_of_time:
                        counts.stopped_because = f"budget.timeout of {timeout:g} s reached"
                    break
                try:
                    done, _ = wait(list(running), timeout=0.5, return_when="FIRST_COMPLETED")
                except TimeoutError:
                    done = set()
                for future in done:
                    run = running.pop(future)
                    try:
                        result = future.result()
                    except Exception as exc:  # lost worker, cancelled task, ...
                        result = {"state": "failed", "exit_reason": f"{type(exc).__name__}: {exc}"}
                    self._finish(run, result, counts)
                counts.running = len(running)
                self.on_event("tick", None, counts, None)
        except BaseException:
            # Ctrl-C or a driver error: no trial is left RUNNING behind us.
            for future, run in running.items():
                future.cancel()
                run.trial.set_user_attr("exit_reason", "driver interrupted")
                self.study.tell(run.trial, state=TrialState.FAIL)
            raise
        return counts
