"""A study as a pandas table: one row per trial (``search export``, the notebooks), and anytime
curves of several studies (best value so far against compute spent).

Only the columns that are true of the study's objective are there (see
:mod:`search.analysis._columns`): an MPI training study has epochs, ranks, algorithm and
rank-seconds; a NAS-Bench-201 table study has the table's simulated training time instead; a
function study has its steps and wall time.

>>> import optuna
>>> study = optuna.create_study()
>>> study.optimize(lambda t: t.suggest_float("x", -1, 1) ** 2, n_trials=3)
>>> trials_frame(study)[["number", "state", "value", "params_x"]].shape
(3, 4)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
import pandas as pd
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from search.analysis._columns import objective_kind, study_config

# Columns of an MPI training trial; a study that search run did not make ("other") keeps those
# its trials have values for.
TRAINING_COLUMNS = ("epochs", "ranks", "algorithm", "wall_time_s", "rank_seconds",
                    "test_accuracy", "n_params", "flops", "samples_per_s")


def objective_names(study: optuna.Study) -> list[str]:
    """The study's metric names; for other studies ``value`` (``value0``, ... for several)."""
    if study.metric_names:
        return list(study.metric_names)
    n = len(study.directions)
    return ["value"] if n == 1 else [f"value{i}" for i in range(n)]


def strategy_of(study: optuna.Study) -> str:
    """The strategy's name from the stored study file, else the sampler attribute, else '?'."""
    strategy = study_config(study).get("strategy")
    if isinstance(strategy, dict) and strategy.get("name"):
        return str(strategy["name"])
    return str(study.user_attrs.get("strategy", "?"))


def _ranks(trial: FrozenTrial, default: Any) -> Any:
    return trial.user_attrs.get("ranks", trial.params.get("ranks", default))


def _product(a: Any, b: Any) -> float:
    try:
        return float(a) * float(b)
    except (TypeError, ValueError):
        return float("nan")


def _training_columns(t: FrozenTrial, training: dict[str, Any]) -> dict[str, Any]:
    a = t.user_attrs
    ranks = _ranks(t, training.get("ranks", np.nan))
    wall = a.get("wall_time_s", np.nan)
    row = {
        "epochs": a.get("epochs_run", len(t.intermediate_values) or np.nan),
        "ranks": ranks,
        "algorithm": a.get("algorithm", t.params.get("algorithm", training.get("algorithm"))),
        "wall_time_s": wall,
        "rank_seconds": a.get("rank_seconds", _product(wall, ranks)),
        "test_accuracy": a.get("test_accuracy", np.nan),
        "n_params": a.get("n_params", np.nan),
        "flops": a.get("flops", np.nan),
        "samples_per_s": a.get("samples_per_s", np.nan),
    }
    if a.get("hosts"):  # where the ranks ran, in rank order (several: a multi-node trial)
        row["hosts"] = ",".join(map(str, a["hosts"]))
    for key in ("start_epoch", "detol:paused_at", "detol:resume_of", "detol:lineage",
                "detol:lineage_epochs", "detol:lineage_rank_seconds",
                "detol:lineage_wall_time_s"):
        if key in a:  # a paused, promoted or resumed trial: its segment of the lineage
            row[key.removeprefix("detol:")] = a[key]
    counters = a.get("counters")
    if isinstance(counters, dict):
        row.update({f"counters.{k}": v for k, v in counters.items()})
    return row


def _table_columns(t: FrozenTrial, prefix: str) -> dict[str, Any]:
    a = t.user_attrs
    row = {"sim_time_s": a.get("sim_time_s", np.nan), "sim_clock_s": a.get("sim_clock_s", np.nan),
           "n_params": a.get("n_params", np.nan)}
    # The table's own answers (nb201_mean_val_accuracy, nb201_seed); the arch is the genome.
    row.update({k: v for k, v in a.items() if k.startswith(prefix) and k != f"{prefix}arch"})
    return row


def trials_frame(study: optuna.Study) -> pd.DataFrame:
    """One row per trial: state, objective values (columns named by metric), ``params_NAME``,
    genome summary and key (topology studies), what applies to the objective, exit reason and
    times.

    MPI training: ``epochs``, ``ranks``, ``algorithm``, ``wall_time_s``, ``rank_seconds``
    (``wall_time_s * ranks``), test accuracy, size, throughput, the algorithm's counters. A
    benchmark table: ``sim_time_s`` (the table's training time), ``sim_clock_s`` (the simulated
    clock when the trial ended), ``n_params`` and the table's own answers (``nb201_*``). A
    function: ``steps`` it reported (if any) and ``wall_time_s``.

    >>> import optuna
    >>> s = optuna.create_study(direction="maximize")
    >>> s.optimize(lambda t: t.suggest_int("hidden", 8, 64), n_trials=2)
    >>> list(trials_frame(s).columns[:5])
    ['study', 'number', 'state', 'value', 'params_hidden']
    """
    names = objective_names(study)
    kind = objective_kind(study)
    config = study_config(study)
    training = config.get("training", {}) if kind == "training" else {}
    prefix = str(config.get("objective", "")).partition(":")[0] + "_"
    rows = []
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        row: dict[str, Any] = {"study": study.study_name, "number": t.number, "state": t.state.name}
        values = t.values if t.values is not None else [None] * len(names)
        row.update({n: (np.nan if v is None else float(v)) for n, v in zip(names, values,
                                                                            strict=True)})
        row.update({f"params_{k}": v for k, v in t.params.items()})
        row.update(genome_summary=a.get("genome_summary"), genome_key=a.get("genome_key"))
        if kind in ("training", "other"):
            row.update(_training_columns(t, training))
        elif kind == "table":
            row.update(_table_columns(t, prefix))
        else:
            row.update(steps=len(t.intermediate_values) or np.nan,
                       wall_time_s=a.get("wall_time_s", np.nan))
        row.update(exit_reason=a.get("exit_reason"), datetime_start=t.datetime_start,
                   datetime_complete=t.datetime_complete)
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=["study", "number", "state", *names])
    # Columns no trial has a value for say nothing true about this study.
    optional = ["genome_summary", "genome_key", "steps",
                *(TRAINING_COLUMNS if kind == "other" else ())]
    df = df.drop(columns=[c for c in optional if c in df and df[c].isna().all()])
    for col in ("datetime_start", "datetime_complete"):
        df[col] = pd.to_datetime(df[col])
    df["duration_s"] = (df["datetime_complete"] - df["datetime_start"]).dt.total_seconds()
    return df


def trial_cost(trial: FrozenTrial, kind: str, default_ranks: Any = 1) -> float:
    """What a finished trial cost, in the unit of :data:`search.analysis._columns.COST_LABEL`: its
    rank-seconds (training), the table's simulated training time (table), its wall time
    (function). NaN when the trial did not record it."""
    a = trial.user_attrs
    if kind == "table":
        return float(a.get("sim_time_s", np.nan))
    if kind == "function":
        return float(a.get("wall_time_s", np.nan))
    return float(a.get("rank_seconds", _product(a.get("wall_time_s", np.nan),
                                                _ranks(trial, default_ranks))))


def anytime_frame(studies: Sequence[optuna.Study]) -> pd.DataFrame:
    """Anytime curves: per study and finished trial (in order of completion), the cumulative
    compute spent (``compute_s``: rank-seconds of MPI training, the table's simulated training
    time for a benchmark table, wall time for a function; complete, pruned and failed trials
    all cost), the best first objective so far, and the test accuracy of that incumbent."""
    rows = []
    for study in studies:
        sign = -1.0 if study.directions[0] == StudyDirection.MAXIMIZE else 1.0
        kind = objective_kind(study)
        default = study_config(study).get("training", {}).get("ranks", 1)
        done = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
        done.sort(key=lambda t: (t.datetime_complete is None, t.datetime_complete, t.number))
        spent, best, incumbent = 0.0, math.inf, None
        for n, t in enumerate(done, start=1):
            cost = trial_cost(t, kind, default)
            spent += 0.0 if math.isnan(cost) else cost
            if t.state == TrialState.COMPLETE and sign * float(t.values[0]) < best:
                best, incumbent = sign * float(t.values[0]), t
            rows.append({
                "study": study.study_name, "strategy": strategy_of(study), "kind": kind,
                "trials": n, "number": t.number, "compute_s": spent,
                "best": sign * best if incumbent is not None else np.nan,
                "incumbent_test_accuracy": (incumbent.user_attrs.get("test_accuracy", np.nan)
                                            if incumbent is not None else np.nan),
            })
    return pd.DataFrame(rows, columns=["study", "strategy", "kind", "trials", "number",
                                       "compute_s", "best", "incumbent_test_accuracy"])


def anytime_bands(frame: pd.DataFrame, x: str = "compute_s", points: int = 100) -> pd.DataFrame:
    """Anytime curves of several seeds per strategy on one grid of ``x`` (from 0 to the budget
    every study reached): mean, min and max of the best value so far, per strategy.

    ``frame`` is :func:`anytime_frame`'s. A study counts at a grid point once it has a complete
    trial there.
    """
    budget = frame.groupby("study")[x].max().min()
    grid = np.linspace(0.0, float(budget), points)
    rows = []
    for (strategy, study), part in frame.groupby(["strategy", "study"], sort=False):
        xs, best = part[x].to_numpy(), part["best"].to_numpy()
        at = np.searchsorted(xs, grid, side="right") - 1  # last finished trial at each point
        values = np.where(at >= 0, best[np.clip(at, 0, None)], np.nan)
        rows += [{"strategy": strategy, "study": study, x: g, "best": v}
                 for g, v in zip(grid, values, strict=True)]
    per_study = pd.DataFrame(rows)
    return (per_study.groupby(["strategy", x], sort=False)["best"]
            .agg(["mean", "min", "max", "count"]).reset_index())
