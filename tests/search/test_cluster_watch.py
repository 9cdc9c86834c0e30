"""search.clusters._watch's rules in-process (issue 33): which key a batch system's refusal
names, when waiting trials become ClusterFailed, what the message says was waited for.

The batch commands here are small scripts on PATH that print what squeue/qstat/sbatch print;
the real SLURM and Grid Engine cells run the same code in tests/search/test_slurm.py and
test_sge.py (marked slurm/sge)."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import search.clusters._watch as watch
from search import StudyError
from search.clusters._watch import ClusterFailed, ClusterHandle, _submit_error


def _command(bin_dir: Path, name: str, script: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _short_timeouts(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every command the watch runs gets 0.5 s instead of its own timeout; the returned dict
    fills with the keyword arguments the watch passed (its own timeout among them)."""
    seen: dict[str, Any] = {}
    run = watch.subprocess.run

    def spy(argv: list[str], **kw: Any) -> Any:
        seen.update(kw)
        return run(argv, **{**kw, "timeout": 0.5})

    monkeypatch.setattr(watch.subprocess, "run", spy)
    return seen


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH holding only the commands a test writes (their scripts name /bin/cat...)."""
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", str(d))
    return d


@pytest.mark.unit
@pytest.mark.parametrize(("words", "key"), [
    ("Unable to run job: parallel environment \"mpi\" does not exist.", "cluster.parallel_environment"),
    ("job requests 64 slots, queue only offers 4", "cluster.slots_per_worker"),
    ("unknown resource \"gpu\"", "cluster.resource_spec"),
    ("Unable to run job: unknown queue \"big\"", "cluster.queue"),
    ("invalid project \"x\"", "cluster.account"),
    ("sbatch: error: invalid partition specified: gpu", "cluster.queue"),
    ("Invalid account specified", "cluster.account"),
    ("Requested time limit is invalid", "cluster.walltime"),
    ("Memory specification can not be satisfied", "cluster.memory"),
    ("Node count specification invalid", "cluster.nodes"),
    ("More processors requested than permitted: cpu", "cluster.cpus_per_slot"),
    ("task count invalid", "cluster.slots_per_worker"),
    ("something else went wrong", "cluster"),
])
def test_a_refusal_names_the_likely_key(words: str, key: str) -> None:
    assert _submit_error("slurm", "sbatch", words).where == key


@pytest.mark.unit
def test_a_refusal_is_one_line_of_its_last_three_lines_exit_2() -> None:
    err = _submit_error("sge", "qsub", "\n  one \n\ntwo\nthree\n four  \n")
    assert err.exit_code == 2 and isinstance(err, StudyError)
    assert str(err) == (
        "cluster: qsub rejected the 'sge' worker job: 'two / three / four' (check the [cluster] "
        "options queue, account, walltime, resource_spec, parallel_environment, "
        "slots_per_worker, job_extra_directives)")
    assert _submit_error("pbs", "qsub", " \n").message == (
        "qsub rejected the 'pbs' worker job: 'no message' (check the [cluster] options queue, "
        "account, walltime, memory, nodes, job_extra_directives)")
    # the key is looked up in the words shown, lower-cased
    assert _submit_error("slurm", "sbatch", "PARTITION\nx\ny\nz").where == "cluster"
    assert _submit_error("slurm", "sbatch", "x\nPARTITION\ny\nz").where == "cluster.queue"
    assert ClusterFailed("a", "b").exit_code == 1


@pytest.mark.unit
def test_a_failed_submission_is_recorded_and_marked_failed() -> None:
    from distributed.core import Status

    class Job:
        submit_command = "sbatch"

        async def start(self) -> None:
            raise RuntimeError("Command exited with non-zero exit code.\nstderr:\nno partition")

    class Fine(Job):
        async def start(self) -> None:
            self.started = True

    errors: list[str] = []
    cls = watch.recording_job_class(Job, errors)
    assert cls.__name__ == cls.__qualname__ == "Job" and issubclass(cls, Job)
    job = cls()
    with pytest.raises(RuntimeError):
        asyncio.run(job.start())
    assert errors == ["\nno partition"] and job.status == Status.failed
    fine = watch.recording_job_class(Fine, errors)()
    asyncio.run(fine.start())
    assert fine.started and errors == ["\nno partition"] and not hasattr(fine, "status")
    assert watch._stderr_of(RuntimeError("plain")) == "plain"
    assert watch._stderr_of(RuntimeError("a stderr: b stderr: c")) == " b stderr: c"


class Client:
    def __init__(self, workers: int = 0) -> None:
        self.workers, self.calls = workers, 0
        self.scheduler = SimpleNamespace(address="tcp://10.0.0.1:8786")

    def scheduler_info(self, n_workers: int = 5) -> dict[str, Any]:
        assert n_workers == -1  # all of them, not the first five
        self.calls += 1
        return {"workers": {f"w{i}": {} for i in range(self.workers)}}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [100.0]
    monkeypatch.setattr(watch.time, "monotonic", lambda: now[0])
    return now


@pytest.mark.unit
def test_waiting_trials_with_no_worker_fail_after_the_timeout(clock: list[float]) -> None:
    client = Client()
    handle = ClusterHandle(client, "address", worker_timeout=10)  # type: ignore[arg-type]
    handle.check(waiting=True)  # the clock starts
    clock[0] += 0.5
    handle.check(waiting=True)
    assert client.calls == 1  # one look a second at most
    clock[0] += 9.5
    handle.check(waiting=True)  # 10 s: not more than the timeout
    clock[0] += 0.5
    handle.check(waiting=True)  # 10.5 s, but the last look was 0.5 s ago
    assert client.calls == 2
    clock[0] += 0.5  # 11 s
    with pytest.raises(ClusterFailed) as e:
        handle.check(waiting=True)
    assert e.value.where == "cluster.worker_timeout" and e.value.exit_code == 1
    assert e.value.message == (
        "trials waited 10 s and no Dask worker connected (the scheduler at tcp://10.0.0.1:8786 "
        "has no workers); if the queue is merely busy, raise cluster.worker_timeout")


@pytest.mark.unit
def test_exactly_the_timeout_is_not_yet_past_it(clock: list[float]) -> None:
    handle = ClusterHandle(Client(), "address", worker_timeout=2)  # type: ignore[arg-type]
    handle.check(waiting=True)
    clock[0] += 2.0
    handle.check(waiting=True)
    clock[0] += 1.0
    with pytest.raises(ClusterFailed):
        handle.check(waiting=True)


@pytest.mark.unit
def test_a_worker_or_nothing_to_wait_for_restarts_the_clock(clock: list[float]) -> None:
    client = Client()
    handle = ClusterHandle(client, "address", worker_timeout=5)  # type: ignore[arg-type]
    handle.check(waiting=True)
    clock[0] += 4.0
    handle.check(waiting=False)  # nothing waits: no look at the scheduler, the clock resets
    assert client.calls == 1 and handle._waiting_since is None
    clock[0] += 4.0
    handle.check(waiting=True)  # 8 s after the first start: the clock restarted
    assert handle._waiting_since == clock[0]
    client.workers = 1
    clock[0] += 4.0
    handle.check(waiting=True)
    assert handle._waiting_since is None  # a connected worker resets it too
    client.workers = 0
    for _ in range(2):
        clock[0] += 4.0
        handle.check(waiting=True)  # 4 s since the clock restarted: within 5 s
    assert handle._waiting_since == clock[0] - 4.0


@pytest.mark.unit
def test_a_recorded_refusal_stops_the_run_naming_the_submit_command() -> None:
    job_cls = SimpleNamespace(submit_command="sbatch --parsable")
    handle = ClusterHandle(Client(), "slurm", 60, SimpleNamespace(job_cls=job_cls),  # type: ignore[arg-type]
                           ["invalid partition specified"])
    with pytest.raises(ClusterFailed) as e:
        handle.check(waiting=False)
    assert e.value.where == "cluster.queue" and e.value.exit_code == 2
    assert e.value.message.startswith("sbatch rejected the 'slurm' worker job: ")
    handle.cluster = SimpleNamespace(job_cls=SimpleNamespace(submit_command=None))
    with pytest.raises(ClusterFailed, match="^cluster.queue: the rejected"):
        handle.check(waiting=False)
    handle.cluster, handle.submit_errors = None, ["x", "memory"]
    with pytest.raises(ClusterFailed, match=r"^cluster: the rejected .*'x'"):
        handle.check(waiting=False)  # the first refusal is the one named


def _started(*ids: Any) -> SimpleNamespace:
    return SimpleNamespace(workers={i: SimpleNamespace(job_id=j) for i, j in enumerate(ids)})


def test_the_message_says_which_jobs_were_waited_for(bin_dir: Path) -> None:
    handle = ClusterHandle(Client(), "slurm", 1, SimpleNamespace())  # type: ignore[arg-type]
    assert handle._what_was_waited_for() == "the 'slurm' cluster started no worker"
    handle.cluster = _started(None, "")
    assert handle._what_was_waited_for() == "the 'slurm' cluster started no worker"
    handle.cluster = _started(11, None, 12)
    assert handle._what_was_waited_for() == "slurm jobs 11, 12 submitted"  # no squeue on PATH
    _command(bin_dir, "squeue", 'echo "$*" > "$0.args"\nprintf " 11 PENDING (Resources)\\n\\n'
             ' 12 PENDING (Priority) \\n"\n')
    assert handle._what_was_waited_for() == (
        "slurm jobs 11, 12 submitted: 11 PENDING (Resources); 12 PENDING (Priority)")
    assert (bin_dir / "squeue.args").read_text() == "-h -j 11,12 -o %i %T (%r)\n"


def test_grid_engine_states_come_from_qstat_for_our_jobs_only(bin_dir: Path) -> None:
    assert watch._queue_states("sge", ["7"]) == ""  # no qstat
    _command(bin_dir, "qstat", 'echo "$*" > "$0.args"\n/bin/cat <<EOF\n'
             "job-ID prior name user state submit/start at queue slots\n"
             "-----------------------------------------------------------\n"
             "7 0.5 dask root qw 11/26/2026 1\n8 0.5 other root r 11/26/2026 1\n"
             "9 0.5 short root\nEOF\n")
    assert watch._queue_states("sge", ["7", "9"]) == "7 qw"
    assert watch._queue_states("sge", ["8", "7"]) == "7 qw; 8 r"  # qstat's order, one each
    assert (bin_dir / "qstat.args").read_text() == "-u *\n"
    assert watch._queue_states("pbs", ["7"]) == ""
    _command(bin_dir, "squeue", "exit 1\n")
    assert watch._queue_states("sge", ["8"]) == "8 r"  # each backend asks its own command


def test_a_command_that_cannot_run_or_hangs_says_nothing(
    bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert watch._output([str(bin_dir / "missing")]) == ""
    _command(bin_dir, "fails", "echo out\necho err >&2\nexit 3\n")
    assert watch._output([str(bin_dir / "fails")]) == "out\n"
    _command(bin_dir, "slow", "echo partial\nexec /bin/sleep 30\n")
    seen = _short_timeouts(monkeypatch)
    assert watch._output([str(bin_dir / "slow")]) == ""
    assert seen == {"capture_output": True, "text": True, "timeout": 5, "check": False}


class Cluster:
    def job_script(self) -> str:
        return "#!/bin/sh\n#SBATCH -p debug\n"


def test_preflight_hands_the_job_script_to_the_batch_system(bin_dir: Path) -> None:
    with pytest.raises(StudyError) as e:
        watch.preflight_slurm(Cluster())
    assert (e.value.where, e.value.message) == (
        "cluster.backend", "the 'slurm' backend needs sbatch on PATH (not found)")
    _command(bin_dir, "sbatch", 'echo "$*" > "$0.args"\n/bin/cat "$2" > "$0.script"\n'
             'case "$2" in */detol-job-*.sh) exit 0;; esac\nexit 9\n')
    watch.preflight_slurm(Cluster())
    assert (bin_dir / "sbatch.args").read_text().startswith("--test-only ")
    assert (bin_dir / "sbatch.script").read_text() == Cluster().job_script()
    _command(bin_dir, "qsub", 'echo "$1 $2" > "$0.args"\necho "unknown queue \\"big\\"" >&2\n'
             "exit 1\n")
    with pytest.raises(ClusterFailed) as e:
        watch.PREFLIGHTS["sge"](Cluster())
    assert (bin_dir / "qsub.args").read_text() == "-w v\n"
    assert e.value.where == "cluster.queue" and e.value.exit_code == 2
    assert e.value.message.startswith("qsub rejected the 'sge' worker job: 'unknown queue")
    _command(bin_dir, "qsub", "echo 'no suitable queues: memory'\nexit 1\n")
    with pytest.raises(ClusterFailed, match="'no suitable queues: memory'"):
        watch.preflight_sge(Cluster())  # stdout when stderr is empty
    assert watch.PREFLIGHTS["slurm"] is watch.preflight_slurm


def test_a_controller_that_does_not_answer_is_not_a_refusal(
    bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _command(bin_dir, "sbatch", "exec /bin/sleep 30\n")
    seen = _short_timeouts(monkeypatch)
    watch.preflight_slurm(Cluster())  # no error: the run's own watch takes over
    assert seen == {"capture_output": True, "text": True, "timeout": 60, "check": False}
    assert os.environ["PATH"].startswith(str(bin_dir))
