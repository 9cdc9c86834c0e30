"""Loaded into every batch worker (``dask worker --preload``) before it names its process.

Dask renames a worker process ``dask worker [ADDRESS]`` (through ``setproctitle`` where that
package is installed), which puts spaces into the command name of ``/proc/PID/stat``. SLURM's
``proctrack/linuxproc`` reads that file with ``%s`` and cannot parse such a line, so it never
finds the worker among the job's processes: ``scancel`` then ended the job but left the worker
running on its node (seen on the CI's SLURM, issue 44). Here the title keeps Dask's words with
``-`` for spaces (``dask-worker-[tcp://...]``), and leaves the process's environment as it
was (``SPT_NOENV``: setproctitle otherwise writes the title over it, and whatever finds a
job's processes by their environment, as the soaks do, no longer finds the worker)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import distributed.proctitle as _proctitle

os.environ.setdefault("SPT_NOENV", "1")  # read by setproctitle at its first call
_real = _proctitle.setproctitle_mod
if _real is not None:
    _proctitle.setproctitle_mod = SimpleNamespace(
        setproctitle=lambda title, real=_real: real.setproctitle(title.replace(" ", "-")))
