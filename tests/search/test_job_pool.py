"""The benchmarks' process pool (benchmarks/_common/job_pool.py): a benchmark killed mid-run
leaves no pool process computing on as an orphan."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    """Running or sleeping (a zombie no one reaps counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _wait_for(predicate, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_pool_process_ends_when_the_benchmark_is_killed(tmp_path: Path) -> None:
    (tmp_path / "slow_job.py").write_text(textwrap.dedent("""\
        import os, time
        from pathlib import Path

        def run(path):
            Path(path + ".tmp").write_text(str(os.getpid()))
            os.replace(path + ".tmp", path)  # whole, or not there
            time.sleep(600)
            return {}
        """))
    pid_file = tmp_path / "worker.pid"
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""\
        import sys
        sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / "benchmarks")!r}, {str(tmp_path)!r}]
        from _common import job_pool
        import slow_job
        if __name__ == "__main__":
            job_pool.run_jobs([{str(pid_file)!r}], slow_job.run, workers=1, initializer=None,
                              runs_path=None, max_minutes=None, describe=str)
        """)], cwd=tmp_path)
    try:
        _wait_for(pid_file.exists, "the job never started")
        worker = int(pid_file.read_text())
        assert worker != parent.pid and _alive(worker)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        _wait_for(lambda: not _alive(worker), f"pool process {worker} outlived its benchmark")
    finally:
        parent.kill()
        if pid_file.exists() and _alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
