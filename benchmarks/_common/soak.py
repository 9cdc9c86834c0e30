"""The crash soak's hands (``crash_soak.py``): finding a study's processes in ``/proc``, the five
faults, the small filesystem that fills up, and the invariants read back from the storage.

Every process a driver starts inherits ``DETOL_SOAK_TAG=<tag>`` from it (Dask workers, ``mpiexec``,
ranks, warm pools), so what a killed driver left behind is found by that tag alone, however it
was started, and nothing of another user's is ever touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TAG_VAR = "DETOL_SOAK_TAG"
RANK_MODULES = ("training.jobs.warm_worker", "training.jobs.worker")


# --- processes -------------------------------------------------------------------------------


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def tagged(tag: str) -> list[int]:
    """PIDs whose environment holds exactly ``DETOL_SOAK_TAG=tag`` (zombies have none)."""
    needle = f"{TAG_VAR}={tag}\0".encode()
    return [int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and needle in _read(f"/proc/{p.name}/environ")]


def cmdline(pid: int) -> str:
    return _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace").strip()


def parent(pid: int) -> int:
    stat = _read(f"/proc/{pid}/stat").decode(errors="replace")
    return int(stat.rsplit(")", 1)[1].split()[1]) if ")" in stat else -1


def dask_workers(tag: str, driver: int) -> list[int]:
    """The driver's Dask worker processes (LocalCluster: spawned children of the driver)."""
    return [p for p in tagged(tag) if parent(p) == driver and "spawn_main" in cmdline(p)]


def ranks(tag: str) -> list[int]:
    """The MPI ranks of the driver's trials (cold jobs and warm pools)."""
    found = []
    for p in tagged(tag):
        line = cmdline(p) + " "
        launcher = os.path.basename(line.split(" ", 1)[0]).startswith(("mpiexec", "hydra"))
        if not launcher and any(f"-m {m} " in line for m in RANK_MODULES):
            found.append(p)
    return found


def kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


# --- the small filesystem --------------------------------------------------------------------


@contextlib.contextmanager
def small_filesystem(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (root), unmounted on exit."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                   check=True, capture_output=True, text=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def mount_refused(probe: Path) -> str:
    """Why a tmpfs cannot be mounted here ('' when it can): the disk-full fault needs one."""
    if os.geteuid() != 0:
        return "disk-full needs root to mount a small tmpfs (not root here)"
    probe.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return f"disk-full needs a tmpfs mount, refused here: {done.stderr.strip()[:200]}"
    subprocess.run(["umount", str(probe)], capture_output=True)
    return ""


def fill(directory: Path) -> Path:
    """Take every free byte of ``directory``'s filesystem with one filler file."""
    filler = directory / "soak-filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        st = os.statvfs(directory)
        with contextlib.suppress(OSError):
            os.posix_fallocate(fd, 0, st.f_bavail * st.f_frsize)
        with contextlib.suppress(OSError):  # what fallocate's rounding left
            os.lseek(fd, 0, os.SEEK_END)
            while os.write(fd, b"\0" * 4096):
                pass
    finally:
        os.close(fd)
    return filler


def torn(journal: str) -> bool:
    """Whether the journal's last record lacks its newline (a write cut short)."""
    try:
        with open(journal, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except OSError:  # not there yet, or empty
        return False


# --- the storage, read the way plain Optuna reads it ----------------------------------------


def plain_storage(url: str) -> Any:
    """The storage through Optuna alone (no detol code): what the dashboard and notebooks see."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    if url.startswith("postgresql"):
        return optuna.storages.RDBStorage(url)
    return JournalStorage(JournalFileBackend(url))


def read_trials(url: str, name: str) -> list[Any] | None:
    """The study's trials through plain Optuna; None when the study is not made yet."""
    import optuna

    from training.storage import schema_race

    for attempt in range(6):
        try:
            storage = plain_storage(url)
            break
        except Exception as exc:
            # Optuna makes the tables of a new database when it opens it, as the driver does
            # at the same moment: the later one finds them made (not an unreadable storage).
            if not schema_race(exc) or attempt == 5:
                raise
            time.sleep(0.1 * 2**attempt)
    try:
        return optuna.load_study(study_name=name, storage=storage).get_trials()
    except KeyError:
        return None


@dataclass
class Ledger:
    """What the soak saw of one study: every trial ever seen COMPLETE, kept to compare."""

    complete: dict[int, tuple[float, str]] = field(default_factory=dict)

    def see(self, trials: list[Any]) -> None:
        for t in trials:
            if t.state.name == "COMPLETE" and t.number not in self.complete:
                self.complete[t.number] = (t.value, json.dumps(t.params, sort_keys=True))

    def lost(self, trials: list[Any]) -> list[int]:
        """Trials seen COMPLETE that are no longer COMPLETE with the same value and params."""
        now = {t.number: t for t in trials}
        return sorted(n for n, (value, params) in self.complete.items()
                      if n not in now or now[n].state.name != "COMPLETE"
                      or now[n].value != value
                      or json.dumps(now[n].params, sort_keys=True) != params)


def final_problems(trials: list[Any], *, budget: int, max_retries: int) -> list[str]:
    """What is wrong with a finished study: a RUNNING trial, a finished count that is not the
    budget, a configuration run more often than ``max_retries`` allows, one completed twice, a
    trial lost with its driver or worker whose parameters were not queued again."""
    problems = []
    running = [t.number for t in trials if t.state.name == "RUNNING"]
    if running:
        problems.append(f"trials left RUNNING: {running}")
    finished = sum(t.state.name in ("COMPLETE", "PRUNED") for t in trials)
    if finished != budget:
        problems.append(f"{finished} finished trials, budget {budget}")
    runs: dict[str, int] = {}
    for t in trials:
        if t.state.name in ("COMPLETE", "PRUNED", "FAIL", "RUNNING") and t.params:
            key = json.dumps(t.params, sort_keys=True)
            runs[key] = runs.get(key, 0) + 1
        attempt = int(t.user_attrs.get("detol:attempt", 1))
        if attempt > max_retries + 1:
            problems.append(f"trial {t.number} is attempt {attempt} (max_retries={max_retries})")
        reason = str(t.user_attrs.get("exit_reason", ""))
        lost = "died while the trial ran" in reason or "worker lost" in reason.lower()
        if t.state.name == "FAIL" and lost and not t.user_attrs.get("detol:requeued") \
                and "not re-queued (attempt" not in reason:
            problems.append(f"trial {t.number} was lost to a fault not its own and not "
                            f"re-queued: {reason[:200]}")
    over = {k: n for k, n in runs.items() if n > max_retries + 1}
    if over:
        problems.append(f"configurations run more than 1 + max_retries times: {over}")
    done = [json.dumps(t.params, sort_keys=True) for t in trials if t.state.name == "COMPLETE"]
    if len(done) != len(set(done)):
        problems.append("a configuration completed twice")
    return problems


def wait_until(condition: Any, timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


# --- results ----------------------------------------------------------------------------------


def table(kills: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Faults and faults survived per (storage, kind)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for k in kills:
        row = rows.setdefault((k["storage"], k["kind"]), {"storage": k["storage"],
                                                          "kind": k["kind"], "kills": 0,
                                                          "survived": 0})
        row["kills"] += 1
        row["survived"] += k["survived"]
    return list(rows.values())


SUMMED = ("kills", "kills_asked", "wall_s", "studies", "trials_lost", "unreadable_storages",
          "orphans", "torn_tails_repaired")


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several soak runs (other seeds, storages, days) as one result: the counts summed, one
    table over every fault, each run kept whole under ``runs``."""
    if any(run.get("quick") for run in runs):
        raise ValueError("--merge: a --quick run is CI's check, not part of the soak's count")
    merged: dict[str, Any] = {key: sum(run[key] for run in runs) for key in SUMMED}
    merged["wall_s"] = round(merged["wall_s"], 1)
    merged["seeds"] = [run["seed"] for run in runs]
    merged["problems"] = [p for run in runs for p in run["problems"]]
    merged["table"] = table([f for run in runs for f in run["faults"]])
    merged["runs"] = runs
    return merged
