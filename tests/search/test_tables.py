"""What `search best` prints fits 80 columns without cutting a header."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from rich.console import Console

from search.analysis._tables import best_table

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def test_best_table_fits_80_columns_with_whole_headers() -> None:
    study = optuna.create_study(direction="maximize")
    study.set_metric_names(["val_accuracy"])
    dists = {"activation": CategoricalDistribution(["relu", "tanh"]),
             "hidden": IntDistribution(16, 256, log=True),
             "lr": FloatDistribution(1e-3, 0.5, log=True)}
    for i in range(5):
        trial = optuna.trial.create_trial(
            params={"activation": "tanh", "hidden": 200 + i, "lr": 0.034 + i / 100},
            distributions=dists, value=0.97 - i / 100,
            user_attrs={"test_accuracy": 0.961, "epochs_run": 6, "wall_time_s": 2.83,
                        "ranks": 2})
        study.add_trial(trial)
    console = Console(width=80, record=True, force_terminal=False)
    console.print(best_table(study))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    header = next(line for line in text.splitlines() if "trial" in line and "lr" in line)
    for name in ("val_accuracy", "activation", "hidden", "test_acc", "epochs"):
        assert name in header, text
    assert "…" not in text
