"""The one-epoch rule of Egele et al. 2024 ("The unreasonable effectiveness of early discarding
after one epoch in neural network hyperparameter optimization"), as published.

After epoch 1 a trial is stopped when its epoch-1 value is worse than the median of the epoch-1
values of every trial that has one (complete, pruned or running, itself included), once
``startup_trials`` others have one; it is never looked at again. About half of the
configurations go on.

Optuna's ``MedianPruner`` is not this rule: it takes the median over COMPLETE trials only, the
survivors, so the bar rises as the study goes on and keeps about a quarter to a third of the
configurations (``benchmarks/pruning_replay.py`` measured 0.31 to 0.41 of the epochs for it on
recorded curves, 0.58 to 0.60 for this rule).
"""

from __future__ import annotations

import math
import statistics

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

COUNTED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)


class TopHalfPruner(optuna.pruners.BasePruner):
    """Stop a trial after epoch 1 when it is below the median epoch-1 value of all trials."""

    def __init__(self, startup_trials: int = 5) -> None:
        if startup_trials < 0:
            raise ValueError(f"startup_trials: must be >= 0, got {startup_trials}")
        self.startup_trials = startup_trials

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        if trial.last_step != 1 or 1 not in trial.intermediate_values:
            return False
        own = trial.intermediate_values[1]
        if not math.isfinite(own):
            return True
        others = [
            t.intermediate_values[1]
            for t in study.get_trials(deepcopy=False, states=COUNTED)
            if t.number != trial.number and 1 in t.intermediate_values
            and math.isfinite(t.intermediate_values[1])
        ]
        if len(others) < self.startup_trials:
            return False
        median = statistics.median([*others, own])
        if study.direction == StudyDirection.MAXIMIZE:
            return own < median
        return own > median
