"""Multi-objective pruning: stop a trial whose vector of epoch metrics most of the others dominate.

Optuna refuses ``trial.report`` and ``should_prune`` in multi-objective studies and has no pruner
for them (optuna#3450). Here rank 0 records each epoch's metrics, one entry per objective in
``metric`` order, as the trial user attribute ``detol:vector:EPOCH``
(``training.session._reporting``),
and :class:`DominatedPruner` reads them back from every trial of the study.

**The rule.** At epoch ``e``, once ``n_startup_trials`` trials have completed and ``e >=
n_warmup_steps``, a trial is stopped when its vector at ``e`` is dominated by at least
``fraction`` of the other trials' vectors at ``e`` (the trials that reported epoch ``e``:
running, complete or pruned; failed ones do not count). ``u`` dominates ``v`` when ``u`` is at
least as good in every objective and better in one, each objective oriented by the study's
direction (Optuna's own ``_dominates``); a missing or non-finite entry is the worst value.

Why this rule:

* With one objective, "dominated by ``u``" is "worse than ``u``", so the trial stops when at
  least ``fraction`` of the others are better: when it lies below the others' ``1 - fraction``
  quantile. That is Optuna's ``PercentilePruner(percentile=100 * fraction)``
  (``fraction = 0.5``: the median pruner), except that it judges the value at ``e`` (not the
  trial's best so far) against every trial that reached ``e`` (not only completed ones).
* It never stops a trial on the Pareto front of the vectors at ``e``: nothing dominates it.
* A stopped trial is below the others' ``1 - fraction`` quantile in *every* objective at once,
  and the same trials beat it in all of them. So a trial better than more than ``1 - fraction``
  of the others in any one objective (the smallest network, the most accurate one) goes on.

``fraction = 0.5`` by default: a trial goes on unless at least half of the trials that reached
its epoch dominate it, the median rule of a single objective (this project's default pruner).
Lower stops more; ``1`` stops only a trial every other one dominates. A pruned trial counts only
at the epochs it reached, so later epochs compare survivors and the bar rises.

>>> import optuna
>>> study = optuna.create_study(directions=["maximize", "minimize"])
>>> pruner = DominatedPruner(fraction=0.5, n_startup_trials=0, n_warmup_steps=1)
>>> for vector in ([0.9, 100.0], [0.8, 50.0], [0.95, 80.0]):
...     study.add_trial(optuna.trial.create_trial(
...         values=vector, user_attrs={"detol:vector:1": vector}))
>>> weak = study.ask()
>>> weak.set_user_attr("detol:vector:1", [0.7, 120.0])  # dominated by all three
>>> pruner.prune(study, study.trials[-1])
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import optuna
from optuna.study import StudyDirection
from optuna.study._multi_objective import _dominates  # optuna pinned to 5.0.x in pyproject
from optuna.trial import FrozenTrial, TrialState, create_trial

from training.contract import VECTOR_ATTR

# A trial's vector at an epoch counts while the trial is in one of these states.
COUNTED = (TrialState.RUNNING, TrialState.COMPLETE, TrialState.PRUNED)


def epochs_of(trial: FrozenTrial, n_objectives: int) -> list[int]:
    """The epochs ``trial`` has a vector for, in order."""
    if n_objectives == 1:
        return sorted(trial.intermediate_values)
    return sorted(
        int(key[len(VECTOR_ATTR):])
        for key in trial.user_attrs
        if key.startswith(VECTOR_ATTR) and key[len(VECTOR_ATTR):].isdigit()
    )


def vector_at(trial: FrozenTrial, epoch: int, n_objectives: int) -> list[float | None] | None:
    """``trial``'s metrics at ``epoch`` (one per objective), None when it did not report it.

    One objective: Optuna's intermediate value. Several: the ``detol:vector:EPOCH`` attribute.
    """
    if n_objectives == 1:
        value = trial.intermediate_values.get(epoch)
        return None if value is None else [value]
    vector = trial.user_attrs.get(f"{VECTOR_ATTR}{epoch}")
    if not isinstance(vector, list) or len(vector) != n_objectives:
        return None
    return vector


def _point(vector: Sequence[float | None], directions: Sequence[StudyDirection]) -> FrozenTrial:
    """``vector`` as a completed trial, the form Optuna's ``_dominates`` compares; a missing or
    non-finite entry becomes the worst value of its direction."""
    worst = {StudyDirection.MAXIMIZE: -math.inf, StudyDirection.MINIMIZE: math.inf}
    values = [
        float(v) if v is not None and math.isfinite(v) else worst[d]
        for v, d in zip(vector, directions, strict=True)
    ]
    return create_trial(state=TrialState.COMPLETE, values=values)


class DominatedPruner(optuna.pruners.BasePruner):
    """Stop a trial whose epoch vector at least ``fraction`` of the others' dominate (module
    docstring). Works for one objective too, as a percentile pruner."""

    def __init__(
        self, *, fraction: float = 0.5, n_startup_trials: int = 5, n_warmup_steps: int = 1
    ) -> None:
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction: must be in (0, 1], got {fraction!r}")
        if n_startup_trials < 0:
            raise ValueError(f"n_startup_trials: must be >= 0, got {n_startup_trials!r}")
        if n_warmup_steps < 0:
            raise ValueError(f"n_warmup_steps: must be >= 0, got {n_warmup_steps!r}")
        self.fraction = fraction
        self.n_startup_trials = n_startup_trials
        self.n_warmup_steps = n_warmup_steps

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        """True: stop ``trial`` at its latest epoch."""
        directions = study.directions
        epochs = epochs_of(trial, len(directions))
        if not epochs or epochs[-1] < self.n_warmup_steps:
            return False
        epoch = epochs[-1]
        mine = vector_at(trial, epoch, len(directions))
        if mine is None:
            return False
        trials = study.get_trials(deepcopy=False)
        completed = sum(t.state == TrialState.COMPLETE for t in trials)
        if completed < self.n_startup_trials:
            return False
        others = [
            v
            for t in trials
            if t.number != trial.number and t.state in COUNTED
            if (v := vector_at(t, epoch, len(directions))) is not None
        ]
        if not others:
            return False
        me = _point(mine, directions)
        dominated_by = sum(_dominates(_point(v, directions), me, directions) for v in others)
        return dominated_by >= self.fraction * len(others) - 1e-9
