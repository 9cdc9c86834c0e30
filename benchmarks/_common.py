"""What every benchmark's JSON says about the machine and the moment it ran."""

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
