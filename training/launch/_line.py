"""The launcher line of an MPI job: ``"mpiexec -n {ranks}"`` -> an argv, and the job's environment.

Shared by the cold path (:mod:`training.launch`) and the warm pools
(:mod:`training.launch._warm_pool`);
it imports neither, so neither imports the other through it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

DEFAULT_LAUNCHER = "mpiexec -n {ranks}"
# A job whose ranks all run on one machine: UCX (the mpich wheel's and Open MPI's fast path)
# over shared memory and loopback only, so the ranks open no port on the machine's network;
# DETOL_SINGLE_NODE also swaps Hydra for MPICH's gforker (see :func:`launcher_argv`).
SINGLE_NODE_ENV = {"UCX_TLS": "self,sm", "UCX_NET_DEVICES": "lo", "DETOL_SINGLE_NODE": "1"}
_HYDRA = ("mpiexec", "mpirun", "mpiexec.hydra")
_TAIL = 3000


class LauncherNotFound(ValueError):
    """The launcher program is not on this machine (or the launcher line is empty)."""


# A job that dies before all its ranks are through MPI_Init ran nothing of the trial (the mpich
# wheel's UCX once failed to unpack a peer's address here): it is launched again (a fresh job in
# training.launch, a fresh warm pool in training.launch._warm_pool), at most this many times in all.
LAUNCH_ATTEMPTS = 3
LAUNCH_RETRY_WAIT_S = 0.5

def resolve_program(name: str) -> str:
    """Absolute path of the launcher program, preferring the one installed beside this Python
    (the ``mpich`` wheel puts ``mpiexec`` there, matching the installed mpi4py)."""
    here = os.path.dirname(sys.executable)
    path = os.pathsep.join([here, os.environ.get("PATH", "")])
    found = shutil.which(name, path=path)
    if found is None:
        raise LauncherNotFound(
            f"launcher program {name!r} not found (install the MPICH wheel with "
            "'pip install mpich', or set [launcher] command to your MPI's launcher)"
        )
    return found


def launcher_argv(
    command: str | Sequence[str], ranks: int, env: Mapping[str, str] | None = None
) -> list[str]:
    """``"mpiexec -n {ranks}"`` -> ``["/venv/bin/mpiexec", "-n", "2"]``.

    For a single-node job (``env`` from :data:`SINGLE_NODE_ENV`) whose line is the mpich wheel's
    plain ``mpiexec -n N``: its ``mpiexec.gforker`` instead. Hydra's control port always listens
    on 0.0.0.0 (``-iface lo``, ``-localhost 127.0.0.1`` and ``HYDRA_IFACE`` change only the
    address it hands out); gforker forks the ranks and talks PMI over inherited pipes, so a
    local study opens no port beyond loopback (issue 27)."""
    parts = shlex.split(command) if isinstance(command, str) else list(command)
    if not parts:
        raise LauncherNotFound("launcher command is empty")
    argv = [p.replace("{ranks}", str(ranks)) for p in parts]
    argv[0] = resolve_program(argv[0])
    if (env or {}).get("DETOL_SINGLE_NODE") == "1":
        argv[0] = _forker(argv)
    return argv


def _forker(argv: list[str]) -> str:
    """The gforker beside the wheel's Hydra ``mpiexec`` when ``argv`` is just ``-n N``."""
    program = argv[0]
    gforker = os.path.join(os.path.dirname(program), "mpiexec.gforker")
    plain = len(argv) == 3 and argv[1] in ("-n", "-np") and argv[2].isdigit()
    hydra = os.path.basename(program) in _HYDRA and os.path.exists(
        os.path.join(os.path.dirname(program), "hydra_pmi_proxy"))
    return gforker if plain and hydra and os.access(gforker, os.X_OK) else program


# The cores a trial may use on its machine (set by the driver of a local cluster: the machine's
# cores over budget.concurrency); without it, the cores this process may run on.
TRIAL_CORES_ENV = "DETOL_TRIAL_CORES"


def rank_threads(threads_per_rank: int | None, ranks: int,
                 extra: Mapping[str, str] | None = None) -> int:
    """Torch threads per rank: ``threads_per_rank`` if set, else the trial's cores
    (:data:`TRIAL_CORES_ENV`, else this process's CPU affinity: a batch job's allotted cores) over
    its ranks, at least 1.

    >>> rank_threads(3, 2), rank_threads(None, 2, {TRIAL_CORES_ENV: "8"})
    (3, 4)
    """
    if threads_per_rank is not None:
        return threads_per_rank
    given = (extra or {}).get(TRIAL_CORES_ENV) or os.environ.get(TRIAL_CORES_ENV)
    cores = int(given) if given else len(os.sched_getaffinity(0))
    return max(1, cores // max(1, ranks))


def threads_here(threads_per_rank: int | None) -> int:
    """On a rank: ``threads_per_rank``, else what the launch gave it (``OMP_NUM_THREADS``, set
    by :func:`job_env` from :func:`rank_threads`)."""
    return threads_per_rank or int(os.environ.get("OMP_NUM_THREADS") or 1)


def job_env(
    threads_per_rank: int, async_progress: bool, extra: Mapping[str, str]
) -> dict[str, str]:
    """The MPI job's environment: this process's, one torch thread count, ``[launcher] env``.

    MPI is initialised at thread level ``funneled`` (only the main thread calls MPI, which is
    all the trainer does): mpi4py's default ``multiple`` makes every MPI call take a lock, and
    with the mpich wheel an RMA ``Flush`` then took ~700 us of wall time on a loaded machine
    against ~6 us. An MPICH progress thread (``async_progress``) needs ``multiple``.
    ``[launcher] env`` may set ``MPI4PY_RC_THREAD_LEVEL`` itself.
    """
    env = {**os.environ, "OMP_NUM_THREADS": str(threads_per_rank), **extra}
    env.setdefault("PYTHONUNBUFFERED", "1")
    # srun --kill-on-bad-exit: a rank that dies ends the whole step. SLURM's default keeps the
    # others running, and an MPI job's others then wait on the dead one forever (seen on the
    # namespace cluster: two ranks of four spinning in MPI_Init for 14 minutes).
    env.setdefault("SLURM_KILL_BAD_EXIT", "1")
    if async_progress:
        env.setdefault("MPIR_CVAR_ASYNC_PROGRESS", "1")
    if "MPI4PY_RC_THREAD_LEVEL" not in extra:
        env["MPI4PY_RC_THREAD_LEVEL"] = "multiple" if async_progress else "funneled"
    return env


SRUN_TERM_WAIT_S = 15.0  # srun forwards SIGTERM, waits KillWait (30 s default; 7 s seen here)
QUEUE_WAIT_S = float(os.environ.get("DETOL_QUEUE_WAIT_S", "60"))
_QUEUED = re.compile(r"srun: job (\d+) queued and waiting for resources")
# Inside an allocation: a step that still holds the nodes (its node lost and back before SLURM
# noticed, so slurmctld never ended it) keeps every new step waiting, forever.
_STEP_WAIT = re.compile(r"srun: Job (\d+) step creation temporarily disabled, retrying")


SHM_DIR = "/dev/shm"
SHM_PREFIX = "mpich_shm_"  # MPICH's shared-memory segments of the ranks of one node
SHM_ORPHAN_AGE_S = 10.0


def sweep_shm(directory: str = SHM_DIR, *, min_age_s: float = SHM_ORPHAN_AGE_S) -> list[str]:
    """Remove MPICH's shared-memory segments that no process maps any more, older than
    ``min_age_s`` (one being set up is left alone); the names removed.

    Ranks that are killed (a trial's timeout, a pool retired with SIGKILL, a lost node) never
    unlink theirs. Besides filling ``/dev/shm``, a stale segment breaks a later job whose
    segment gets the same name (MPICH derives it from the job's PMI name: after SLURM's job ids
    start again, or a launcher's pid is reused): its ranks fail in ``MPI_Init`` with
    ``MPIDI_POSIX_comm_bootstrap: Out of memory``. Called before every launch and after every
    job this machine's launchers end; only this machine's segments (on other nodes of a
    multi-node job, SLURM's own clean-up or the node's reboot removes them)."""
    return _sweep_unused(directory, SHM_PREFIX, min_age_s, _mapped)


HWLOC_DIR = "/tmp"  # hydra_pmi_proxy's path is fixed: neither TMPDIR nor MP_TMPDIR moves it
HWLOC_PREFIX = "hydra_hwloc_xmlfile_"  # the node's topology, which each proxy writes for its ranks


def sweep_hwloc_files(directory: str = HWLOC_DIR, *,
                      min_age_s: float = SHM_ORPHAN_AGE_S) -> list[str]:
    """Remove the hwloc topology files of MPICH's proxies that were killed, older than
    ``min_age_s``; the names removed. A live proxy keeps its file open until it exits and
    removes it then; a proxy ended with its job (a trial's timeout, a retired pool, a killed
    worker) leaves it behind: 42 in ``/tmp`` after a day of test runs here. Only files that
    no process has open are removed, and only this user's (called where :func:`sweep_shm` is)."""
    return _sweep_unused(directory, HWLOC_PREFIX, min_age_s, _opened)


def _sweep_unused(directory: str, prefix: str, min_age_s: float,
                  in_use: Callable[[str], set[str]]) -> list[str]:
    """Remove this user's files ``directory/prefix*`` older than ``min_age_s`` whose names
    ``in_use(prefix)`` (read from /proc, only when there is a candidate) does not hold."""
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix)]
    except OSError:
        return []
    now, uid = time.time(), os.getuid()
    stale = []
    for name in names:
        with contextlib.suppress(OSError):
            st = os.stat(os.path.join(directory, name))
            if st.st_uid == uid and now - st.st_mtime > min_age_s:
                stale.append(name)
    if not stale:
        return []
    used = in_use(prefix)
    removed = []
    for name in stale:
        if name not in used:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))
                removed.append(name)
    return removed


def _processes() -> list[str]:
    return [pid for pid in os.listdir("/proc") if pid.isdigit()]


def _mapped(prefix: str) -> set[str]:
    """The names of ``prefix*`` files that some process maps (shared memory)."""
    mapped: set[str] = set()
    for pid in _processes():
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as maps:
            mapped.update(line.rsplit("/", 1)[-1].strip() for line in maps if prefix in line)
    return mapped


def _opened(prefix: str) -> set[str]:
    """The names of ``prefix*`` files that some process has open."""
    held: set[str] = set()
    for pid in _processes():
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if prefix in target:
                        held.add(os.path.basename(target))
    return held


def sweep_mpich_leftovers() -> None:
    """What killed MPICH jobs leave on this machine: shared memory and topology files."""
    sweep_shm()
    sweep_hwloc_files()


def owned_dir_prefix(kind: str) -> str:
    """``detol-KIND-HOST-``: a folder this host's process makes in the temp dir goes on with its
    pid and ``-``, so that :func:`sweep_dead_dirs` can tell when its owner is gone."""
    return f"detol-{kind}-{socket.gethostname()}-"


def owned_dir(kind: str) -> str:
    """A new folder in the temp dir, named for this host and this process (see above)."""
    return tempfile.mkdtemp(prefix=f"{owned_dir_prefix(kind)}{os.getpid()}-")


def sweep_dead_dirs(kind: str, root: str | None = None) -> list[str]:
    """Remove this host's ``detol-KIND-`` folders whose owning process is gone: a worker killed
    with its batch job (SIGTERM, then SIGKILL) cannot clean up after a trial or pool it was
    running. Another host's folders on a shared temp dir are left alone. The names removed."""
    prefix = owned_dir_prefix(kind)
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(root or tempfile.gettempdir()):
            pid = entry.name[len(prefix):].split("-", 1)[0]
            if (entry.name.startswith(prefix) and pid.isdigit() and entry.is_dir()
                    and not pid_alive(int(pid))):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.name)
    return removed


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (signal 0; another user's process counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _death_signal(sig: int) -> bool:
    """Ask the kernel for ``sig`` when this process's parent (strictly: the parent's thread that
    forked it) ends: ``prctl(PR_SET_PDEATHSIG)``. False where that cannot be had."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        return libc.prctl(1, sig) == 0  # PR_SET_PDEATHSIG
    return False


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """If the Dask worker dies, its mpiexec gets SIGTERM instead of training on as an orphan."""
    _death_signal(signal.SIGTERM)


def end_with_launcher() -> bool:
    """A rank, first thing: SIGKILL when the process that started it dies (issue 27).

    Hydra's ``mpiexec`` starts the ranks through ``hydra_pmi_proxy``, and both the proxy and each
    rank call ``setsid``: no process group holds them, and a SIGKILLed proxy left its ranks
    training (or waiting for a dead peer) past the trial's timeout, whose kill did not reach them.
    With this, the kernel ends them when their proxy (gforker's ``mpiexec``, a wrapper script)
    dies, and the job's ``mpiexec`` then exits. Only when that parent has one thread: the signal
    follows the *thread* that forked the rank, and a multi-threaded launcher (``slurmstepd``,
    Open MPI's daemons) may fork from a thread that ends while the job runs on. Returns whether
    it was asked for."""
    if sys.platform != "linux":
        return False
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/status") as f:
            threads = next(line.split()[1] for line in f if line.startswith("Threads:"))
    except (OSError, StopIteration):
        return False
    if threads != "1" or not _death_signal(signal.SIGKILL):
        return False
    if os.getppid() != parent:  # it died before the request took hold
        os.kill(os.getpid(), signal.SIGKILL)
    return True


def end_job(proc: subprocess.Popen[bytes], argv: Sequence[str]) -> None:
    """Kill a launched MPI job and everything it started (its process group).

    ``srun`` first gets SIGTERM and up to :data:`SRUN_TERM_WAIT_S` to forward it and release its
    allocation: an srun that is SIGKILLed cannot, and a task it leaves behind (a rank waiting for
    a peer) keeps the job RUNNING with nothing to end it (issue 27)."""
    if proc.poll() is None and argv and os.path.basename(argv[0]) == "srun":
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=SRUN_TERM_WAIT_S)
    members = _group_members(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and everything it started
    proc.wait()
    _wait_gone(members)  # what they hold open (a proxy's topology file) is closed when we return


# How long end_job waits for the killed group's processes to finish exiting (they are SIGKILLed:
# milliseconds, unless the machine is swamped).
GROUP_EXIT_WAIT_S = 5.0


def _stat(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat after ``pid (comm)``: state, ppid, pgrp, ... ([] if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()
    except OSError:
        return []


def started(pid: int | str) -> str | None:
    """Process ``pid``'s start time (clock ticks after boot) while it runs; ``None`` once it has
    exited (gone, or a zombie: its files are closed) or where there is no ``/proc``."""
    fields = _stat(pid)
    return None if fields[:1] in ([], ["Z"], ["X"]) or len(fields) < 20 else fields[19]


def _group_members(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` on this machine (from /proc)."""
    return [int(pid) for pid in _processes() if _stat(pid)[2:3] == [str(pgid)]]


def _wait_gone(pids: list[int], timeout_s: float = GROUP_EXIT_WAIT_S) -> None:
    """Wait until each of ``pids`` has exited (gone, or a zombie: its files are closed)."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while time.monotonic() < deadline and started(pid) is not None:
            time.sleep(0.01)


def _waiting(output: str) -> tuple[str, str] | None:
    """("step" or "queue", the job id) while ``srun`` waits for resources, else None."""
    step = _STEP_WAIT.search(output)
    if step is not None and "Step created" not in output[step.end():]:
        return "step", step.group(1)
    match = _QUEUED.search(output)
    if match is None or "has been allocated resources" in output[match.end():]:
        return None
    return "queue", match.group(1)


def still_queued(output: str, since: float, *, now: float | None = None) -> str:
    """The reason to give up on a job whose ``srun`` has waited for resources longer than
    :data:`QUEUE_WAIT_S` (``DETOL_QUEUE_WAIT_S``) since ``since``; empty while it may wait."""
    waited = (time.time() if now is None else now) - since
    waiting = _waiting(output)
    if waiting is None or waited <= QUEUE_WAIT_S:
        return ""
    kind, job = waiting
    if kind == "step":
        return (f"srun: Job {job} step creation still disabled after {waited:.0f} s "
                f"(DETOL_QUEUE_WAIT_S={QUEUE_WAIT_S:g}): an earlier step of the allocation "
                "holds its nodes (a node lost and back before SLURM noticed?); job cancelled")
    return (f"srun: job {job} still waiting for resources after {waited:.0f} s "
            f"(DETOL_QUEUE_WAIT_S={QUEUE_WAIT_S:g}): the allocation cannot hold this trial's "
            "ranks now (squeue shows why); job cancelled")


# A job whose ranks are not all through MPI_Init this long (at most a third of the trial's
# timeout) after its launcher got its
# resources is stuck there (a rank that waits for a peer that never came, or for a PMI answer
# that never comes; SLURM 22.05's pmi2 plugin cuts a PMI-1 line over 1024 bytes, which our ranks
# avoid, training/jobs/_mpi_start.py): it is killed and launched again, as one that died.
START_TIMEOUT_S = float(os.environ.get("DETOL_START_TIMEOUT_S", "60"))


class StartWatch:
    """Whether a launch is stuck before its ranks are all through MPI_Init: more than
    :data:`START_TIMEOUT_S` (``DETOL_START_TIMEOUT_S``), or a third of the trial's timeout when
    that is shorter, since ``since``; time that ``srun`` spends waiting for resources not
    counted (:func:`still_queued` judges that wait)."""

    def __init__(self, since: float, trial_timeout_s: float | None = None) -> None:
        self.since = since
        self.trial_timeout_s = trial_timeout_s

    def stuck(self, output: str, *, now: float | None = None) -> str:
        """The reason to kill and relaunch the job; empty while it may still start."""
        now = time.time() if now is None else now
        if _waiting(output) is not None:
            self.since = now
            return ""
        limit = START_TIMEOUT_S
        if self.trial_timeout_s:
            limit = min(limit, self.trial_timeout_s / 3)
        if now - self.since <= limit:
            return ""
        return (f"start timeout: the ranks were not all through MPI_Init after "
                f"{now - self.since:.0f} s (DETOL_START_TIMEOUT_S={START_TIMEOUT_S:g}, a third "
                "of trial_timeout if shorter), MPI job killed")


LOG_LIMIT = 1_000_000  # characters of a failed job's output kept for its log file
_ERROR_LINE = re.compile(
    r"^(?:\[rank (\d+)\] )?([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))\b(.*)$"
)


def first_error(output: str) -> str:
    """The first Python exception line in an MPI job's output, with the rank that raised it:
    ``"[rank 1] ModuleNotFoundError: No module named 'x'"`` (empty when there is none)."""
    rank = ""
    for line in output.splitlines():
        if line.startswith("[rank ") and "Traceback" in line:
            rank = line.split("]", 1)[0] + "] "
            continue
        match = _ERROR_LINE.match(line.strip())
        if match:
            where = f"[rank {match.group(1)}] " if match.group(1) else rank
            return f"{where}{match.group(2)}{match.group(3)}".strip()
    return ""


# What srun prints when the job's allocation lost a node (crashed, frozen or cut off, and set
# DOWN by slurmctld), or is gone for that reason: the trial's parameters are not to blame.
_NODE_LOST = re.compile(
    r"srun: error: Node failure on \S+|STEP \S+ ON \S+ CANCELLED AT \S+ DUE TO NODE FAILURE"
    r"|srun: error: Slurm job \d+ has expired|JOB \S+ ON \S+ CANCELLED AT \S+ DUE TO NODE FAILURE"
    r"|srun: Job \d+ step creation still disabled after \d+ s"
)


START_FAILED = "MPI job failed to start"  # the reason's start when no launch got through MPI_Init


def never_started(result: Mapping[str, Any]) -> bool:
    """Whether a failed trial's every launch ended or hung before all its ranks were through
    ``MPI_Init`` (:data:`LAUNCH_ATTEMPTS` of them): nothing of the trial ran."""
    return (result.get("state") == "failed"
            and str(result.get("exit_reason", "")).startswith(START_FAILED))


def node_lost(output: str) -> str:
    """The line of a failed job's output that says its batch allocation lost a node ('' when
    none): such a trial failed through no fault of its own, and the allocation is not to be used
    again."""
    match = _NODE_LOST.search(output)
    return match.group(0) if match else ""


def failed_job(code: int, output: str, error: str = "") -> dict[str, Any]:
    """The result of a job that ended without writing one: the real error first (``error``, else
    the first one in the output), then the tail of its output, and the whole output (capped) for
    the trial's log file."""
    error = error or first_error(output)
    head = f"MPI job exited with code {code}" + (f": {error}" if error else "")
    return {"state": "failed", "exit_reason": f"{head}\n{tail(output)}",
            "log": output[-LOG_LIMIT:]}


def tail(text: str) -> str:
    """The last few thousand characters of a job's output (for ``exit_reason``)."""
    text = text.strip()
    return text if len(text) <= _TAIL else "..." + text[-_TAIL:]
