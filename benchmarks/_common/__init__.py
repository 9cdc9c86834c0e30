"""The benchmarks' shared code, one package beside the scripts (``from _common import ...``).

Here: what every benchmark's JSON says about the machine and the moment it ran (:func:`machine`,
:func:`now_iso`). Beside it: :mod:`.curves` (learning curves recorded for
``pruning_replay.py``), :mod:`.nb201_protocol` (the NB201 protocol every optimizer of
``peers.py`` shares), :mod:`.peers` (the peer optimizers) and :mod:`.syne_tune_loop` (Syne Tune
driven ask/tell). Imports point one way: peers -> syne_tune_loop -> nb201_protocol.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
from typing import Any


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def machine(*packages: str, **extra: Any) -> dict[str, Any]:
    """Cores, Python, platform, the versions of ``packages`` (None if absent), plus ``extra``."""
    info: dict[str, Any] = {"cores": os.cpu_count(), "python": platform.python_version()}
    for name in packages:
        try:
            info[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            info[name] = None
    info["platform"] = platform.platform()
    return {**info, **extra}
