"""Syne Tune's single-objective schedulers driven ask/tell, as its Tuner drives them.

Syne Tune 0.16's baselines: ``REA`` (regularized evolution), ``BORE`` and ``TPE`` (its kernel
density estimator, "KDE"). Each evaluation is one trial: ``suggest`` -> ``on_trial_add`` ->
``on_trial_result`` -> ``on_trial_complete``, as ``syne_tune.Tuner`` calls them for a trial
that reports once.
"""

from __future__ import annotations

import datetime
from typing import Any

from spaces import NB201_OPS

from .nb201_protocol import EDGE_NAMES, NoisyCell, from_config

METRIC = "val_accuracy"
# our label -> the class in syne_tune.optimizer.baselines ("TPE" is Syne Tune's KDE searcher)
SCHEDULERS = {"re": "REA", "bore": "BORE", "kde": "TPE"}


def ask_tell_loop(
    searcher: str, problem: NoisyCell, seed: int, budget: int, options: dict[str, Any]
) -> None:
    from syne_tune.backend.trial_status import Trial
    from syne_tune.config_space import choice
    from syne_tune.optimizer import baselines

    config_space = {n: choice(list(NB201_OPS)) for n in EDGE_NAMES}
    scheduler = getattr(baselines, SCHEDULERS[searcher])(
        config_space, metric=METRIC, do_minimize=False, random_seed=seed, **options
    )
    for trial_id in range(budget):
        suggestion = scheduler.suggest()
        if suggestion is None:  # the searcher has nothing left to propose
            return
        trial = Trial(
            trial_id=trial_id,
            config=suggestion.config,
            creation_time=datetime.datetime.now(datetime.UTC),
        )
        scheduler.on_trial_add(trial)
        result = {METRIC: problem(from_config(suggestion.config))}
        scheduler.on_trial_result(trial, result)
        scheduler.on_trial_complete(trial, result)
