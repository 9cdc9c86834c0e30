"""``search export``: a study's trials as one table file (CSV or Parquet), one row per trial.

The columns are :func:`search._frame.trials_frame`'s: objective values named by metric,
``params_NAME``, genome summary and key, and what applies to the objective (epochs, ranks,
algorithm, rank-seconds for MPI training; the simulated training time for a benchmark table;
steps and wall time for a function), ...
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import optuna
import pandas as pd

from search._errors import StudyError
from search._frame import trials_frame


def _csv(df: pd.DataFrame, path: str) -> None:
    df.to_csv(path, index=False)


def _parquet(df: pd.DataFrame, path: str) -> None:
    try:
        import pyarrow  # noqa: F401 - pandas needs it for Parquet
    except ImportError:
        raise StudyError("format", "parquet needs pyarrow (pip install pyarrow)") from None
    df = df.copy()
    for col in df.select_dtypes(include=["object", "str"]).columns:
        kinds = {type(v) for v in df[col] if v is not None and v == v}  # v == v: not NaN
        if len(kinds) > 1:  # e.g. a categorical choice of 1 and "a": one type per column
            df[col] = df[col].map(lambda v: None if v is None or v != v else str(v))
    df.to_parquet(path, index=False)


FORMATS: dict[str, Callable[[pd.DataFrame, str], None]] = {"csv": _csv, "parquet": _parquet}
_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


def export_format(fmt: str | None, output: str | None) -> str:
    """``fmt`` checked against :data:`FORMATS`, else guessed from ``output``'s suffix, else csv."""
    if fmt is None:
        return _SUFFIXES.get(Path(output).suffix.lower(), "csv") if output else "csv"
    if fmt.lower() not in FORMATS:
        raise StudyError("format", f"unknown format {fmt!r} (known: {sorted(FORMATS)})")
    return fmt.lower()


def export_study(study: optuna.Study, output: str, fmt: str) -> int:
    """Write the table to ``output`` (``-`` is standard output, CSV only); return the row count.

    The file is written beside its final path and renamed, so a failed export leaves no half file.
    """
    df = trials_frame(study)
    if output == "-":
        if fmt != "csv":
            raise StudyError("output", f"{fmt} cannot be written to standard output; use -o FILE")
        df.to_csv(sys.stdout, index=False)
        return len(df)
    target = Path(output)
    if not target.parent.is_dir():
        raise StudyError("output", f"cannot write {output}: directory {str(target.parent)!r} "
                         "does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        os.close(fd)
    except OSError as exc:
        raise StudyError("output", f"cannot write {output}: {exc.strerror}") from None
    try:
        FORMATS[fmt](df, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as exc:
        raise StudyError("output", f"cannot write {output}: {exc.strerror or exc}") from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return len(df)
