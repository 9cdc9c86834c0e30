"""Learning-curve tables: what every configuration of a study's space did, epoch by epoch, read
back by the anytime benchmark and by ``objective = "curves:PATH"``.

**Format** (``detol-curves/1``; written by ``benchmarks/record_curves.py``): gzip-compressed JSON
lines, made of gzip members appended one after another (``gzip`` and ``zcat`` read them as one
stream; pandas: ``pd.read_json(path, lines=True)`` after skipping the first line). Line 1 is the
table's header::

    {"format": "detol-curves/1", "name": ..., "metric": "val_accuracy",
     "direction": "maximize", "epochs": 20, "study": "<the recording study file, TOML>"}

Every recording session (a *chunk* of trials of one seeded random search) then appends one line
that says how it was made, followed by one line per trial::

    {"chunk": 3, "seed": 3, "trials": 50, "started": "...", "finished": "...",
     "load_average": [before, after], "cpus": 2, "command": "...", "detol": "<commit>",
     "torch": "2.13.0", "distributions": {param: Optuna's JSON form}}
    {"chunk": 3, "trial": 7, "params": {...Optuna's params...}, "state": "complete",
     "curve": [metric after epoch 1, 2, ...], "epoch_s": [seconds of epoch 1, 2, ...],
     "start_s": seconds from submission to the first step, "cold": true when a warm pool (or
     a cold MPI job) was started for it, "exit_reason": "..."}

``curve`` is shorter than ``epochs`` for a trial that failed (a run that diverged: its last
value is the last epoch it reported). ``epoch_s[k]`` is the measured wall time of epoch ``k + 1``
on the recording's ranks, validation included. A replay charges a trial the start of a warm
pool's trial: a ``cold`` row's ``start_s`` (a pool's start: imports, ``MPI_Init``) is read as the
median ``start_s`` of the warm rows.

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "t.jsonl.gz")
>>> write_header(path, name="t", metric="val_loss", direction="minimize", epochs=2, study="")
>>> append_chunk(path, {"chunk": 0, "distributions": {}}, [
...     {"trial": 0, "params": {"x": 1.0}, "state": "complete", "curve": [0.5, 0.4],
...      "epoch_s": [1.0, 1.1], "start_s": 0.2}])
>>> t = load_table(path)
>>> t.name, t.configs, t.curves[0], t.maximize
('t', 1, [0.5, 0.4], False)
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

FORMAT = "detol-curves/1"


@dataclass
class CurveTable:
    """One table, read whole: row ``i`` is configuration ``i`` (trials in recorded order)."""

    path: str
    name: str
    metric: str
    direction: str
    epochs: int
    study: str
    chunks: list[dict[str, Any]]
    params: list[dict[str, Any]]
    curves: list[list[float]]
    epoch_s: list[list[float]]
    start_s: list[float]
    states: list[str]
    distributions: dict[str, Any] = field(default_factory=dict)

    @property
    def configs(self) -> int:
        return len(self.params)

    @property
    def maximize(self) -> bool:
        return self.direction == "maximize"


def write_header(path: str, *, name: str, metric: str, direction: str, epochs: int,
                 study: str) -> None:
    """Start a table at ``path`` (refused if there is one already)."""
    if direction not in ("minimize", "maximize"):
        raise ValueError(f"direction: expected 'minimize' or 'maximize', got {direction!r}")
    header = {"format": FORMAT, "name": name, "metric": metric, "direction": direction,
              "epochs": int(epochs), "study": study}
    with open(path, "xb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write((json.dumps(header) + "\n").encode())


def append_chunk(path: str, chunk: Mapping[str, Any], rows: Iterable[Mapping[str, Any]]) -> None:
    """Append one recording session's line and its trials as one gzip member, written whole
    then flushed to disk (a crash leaves the table as it was, or a torn last member that
    :func:`load_table` names)."""
    lines = [json.dumps(dict(chunk))]
    lines += [json.dumps({"chunk": chunk["chunk"], **row}) for row in rows]
    data = gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0)
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def read_lines(path: str) -> list[dict[str, Any]]:
    """Every line of the table as a dict; ValueError naming the file for a damaged one."""
    try:
        with gzip.open(path, "rt") as f:
            text = f.read()
    except (OSError, EOFError) as exc:
        raise ValueError(f"{path}: not a readable {FORMAT} table ({exc})") from None
    try:
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: line {exc.lineno}: not JSON ({exc.msg})") from None
    if not lines or lines[0].get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} table (its first line has no "
                         f"'format': {FORMAT!r})")
    return lines


@functools.cache
def load_table(path: str) -> CurveTable:
    """The table at ``path``, read once per process."""
    lines = read_lines(path)
    head = lines[0]
    table = CurveTable(path=path, name=head["name"], metric=head["metric"],
                       direction=head["direction"], epochs=int(head["epochs"]),
                       study=head.get("study", ""), chunks=[], params=[], curves=[], epoch_s=[],
                       start_s=[], states=[])
    cold: list[bool] = []
    for line in lines[1:]:
        if "trial" not in line:  # a chunk's line: how it was recorded
            table.chunks.append(line)
            table.distributions.update(line.get("distributions", {}))
            continue
        if len(line["curve"]) != len(line["epoch_s"]) or len(line["curve"]) > table.epochs:
            raise ValueError(f"{path}: chunk {line['chunk']} trial {line['trial']}: curve and "
                             f"epoch_s must have the same length <= epochs ({table.epochs})")
        table.params.append(line["params"])
        table.curves.append([float(v) for v in line["curve"]])
        table.epoch_s.append([float(v) for v in line["epoch_s"]])
        table.start_s.append(float(line.get("start_s") or 0.0))
        table.states.append(line["state"])
        cold.append(bool(line.get("cold", False)))
    warm = sorted(s for s, c in zip(table.start_s, cold, strict=True) if not c)
    if warm:
        table.start_s = [warm[len(warm) // 2] if c else s
                         for s, c in zip(table.start_s, cold, strict=True)]
    return table


# --- objective = "curves:PATH": a trial answered by the table's nearest configuration --------


class DivergedRun(RuntimeError):
    """A recorded configuration whose run failed (diverged) before its last epoch; ``partial``
    is what it did until then (time, curve), as a real trial's failure reports it."""

    def __init__(self, message: str, partial: dict[str, Any]) -> None:
        super().__init__(message)
        self.partial = partial


def check_name(path: str) -> None:
    """ValueError (one line) unless ``path`` is a readable table."""
    if not os.path.isfile(path):
        raise ValueError(f"no learning-curve table {path!r} (benchmarks/record_curves.py records "
                         "one; docs/anytime.md)")
    load_table(path)


def recorded_study(path: str) -> str:
    """The study file the table at ``path`` was recorded from: a study that replays it must
    search that space (checked by the study file, up front)."""
    return load_table(path).study


def check_family(family: object | None) -> None:
    """Any space: the table's recording study says which (see :func:`check_space`)."""


class _Index:
    """The table's configurations as arrays, for nearest-configuration lookups: a numeric
    parameter scaled to [0, 1] over its distribution (log-scaled where it is log), a categorical
    one as its choice's index; a parameter a configuration does not have (a conditional one) is
    NaN / -1."""

    def __init__(self, table: CurveTable) -> None:
        import numpy as np
        from optuna.distributions import CategoricalDistribution, json_to_distribution

        self.names = sorted(table.distributions)
        self.dists = {n: json_to_distribution(table.distributions[n]) for n in self.names}
        self._is_categorical = {n: isinstance(d, CategoricalDistribution)
                                for n, d in self.dists.items()}
        self.categorical = [self._is_categorical[n] for n in self.names]
        self.codes = np.array([[self.encode(n, p.get(n)) for n in self.names]
                               for p in table.params], dtype=float).reshape(
            len(table.params), len(self.names))

    def encode(self, name: str, value: Any) -> float:
        d = self.dists[name]
        if value is None:
            return math.nan
        if self._is_categorical[name]:
            return float(d.choices.index(value)) if value in d.choices else -2.0
        low, high, log = float(d.low), float(d.high), bool(getattr(d, "log", False))
        if high == low:
            return 0.0
        if log:
            return (math.log(float(value)) - math.log(low)) / (math.log(high) - math.log(low))
        return (float(value) - low) / (high - low)

    def nearest(self, params: Mapping[str, Any]) -> int:
        """The row closest to ``params`` (Optuna's flat parameters): summed over parameters,
        |difference| of scaled numbers, 1 for another choice, 1 where only one side has the
        parameter; ties go to the earliest recorded row."""
        import numpy as np

        query = np.array([self.encode(n, params.get(n)) for n in self.names], dtype=float)
        rows = self.codes
        missing_q, missing_r = np.isnan(query), np.isnan(rows)
        cat = np.array(self.categorical, dtype=bool)
        diff = np.abs(rows - query)
        diff = np.where(cat, (rows != query).astype(float), diff)
        diff = np.where(missing_q ^ missing_r, 1.0, diff)
        diff = np.where(missing_q & missing_r, 0.0, diff)
        return int(np.argmin(diff.sum(axis=1)))


@functools.cache
def _index(path: str) -> _Index:
    return _Index(load_table(path))


def evaluate(params: Mapping[str, Any], *, dataset: str, noise_seed: int,
             trial_params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One trial answered from the table at ``dataset`` (a path): the recorded run of the
    configuration nearest to the trial's parameters (``trial_params``, Optuna's flat form; the
    genome's too). ``noise_seed`` is unused: a table holds one training run per configuration.

    Returns ``{"values": {metric: last epoch's}, "sim_time_s": start + every epoch,
    "sim_start_s", "sim_epoch_s": [each epoch's seconds], "curve": [...], "user_attrs":
    {"curves_row": row}}``; a configuration whose run failed raises :class:`DivergedRun`."""
    del noise_seed
    table = load_table(dataset)
    row = _index(dataset).nearest(trial_params if trial_params is not None else params)
    curve, epoch_s = table.curves[row], table.epoch_s[row]
    answer = {"sim_time_s": table.start_s[row] + sum(epoch_s), "sim_start_s": table.start_s[row],
              "sim_epoch_s": list(epoch_s), "curve": list(curve),
              "user_attrs": {"curves_row": row}}
    if table.states[row] != "complete" or len(curve) < table.epochs or not curve:
        raise DivergedRun(f"the recorded run of row {row} failed after {len(curve)} of "
                          f"{table.epochs} epochs", answer)
    return {"values": {table.metric: curve[-1]}, **answer}
