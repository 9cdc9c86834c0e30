"""``search export``: a study's trials as one table file (CSV or Parquet), one row per trial.

The columns are :func:`search.analysis._frame.trials_frame`'s: objective values named by metric,
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
from search.analysis._frame import trials_frame


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


def _known() -> str:
    return ", ".join(f"{name} ({' '.join(s for s, f in _SUFFIXES.items() if f == name)})"
                     for name in sorted(FORMATS))


def export_format(fmt: str | None, output: str | None) -> str:
    """``fmt`` checked against :data:`FORMATS`, else taken from ``output``'s suffix (no suffix,
    or standard output: csv). A suffix that names no known format, or another format than
    ``fmt``, is an error: a file's name should not lie about what it holds.

    >>> export_format(None, "t.parquet"), export_format("csv", "t.txt")
    ('parquet', 'csv')
    >>> try:
    ...     export_format(None, "x.xlsx")
    ... except StudyError as exc:
    ...     print(exc.where, exc.message.split(";")[0])
    output unknown suffix '.xlsx' in x.xlsx (known formats: csv (.csv), parquet (.parquet .pq))
    """
    suffix = Path(output).suffix.lower() if output and output != "-" else ""
    if fmt is not None and fmt.lower() not in FORMATS:
        raise StudyError("format", f"unknown format {fmt!r} (known: {sorted(FORMATS)})")
    if fmt is None:
        if suffix and suffix not in _SUFFIXES:
            raise StudyError("output", f"unknown suffix {suffix!r} in {output} (known formats: "
                             f"{_known()}); name the file .csv or .parquet, or pass --format")
        return _SUFFIXES.get(suffix, "csv")
    if suffix in _SUFFIXES and _SUFFIXES[suffix] != fmt.lower():
        raise StudyError("output", f"{output} is named {_SUFFIXES[suffix]} but --format is "
                         f"{fmt.lower()}")
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
