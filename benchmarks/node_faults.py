"""Node faults (issue 44): a study whose trials span two nodes runs on the namespace cluster of
``.ci/nodes.sh`` while faults strike whole nodes at instants drawn from ``random.Random(seed)``;
afterwards its history is checked offline, Jepsen-style: recovery after each fault healed, not
only behaviour during it.

Faults (``--kinds``, taken in turn; the node is drawn among the nodes of the job running a trial,
else among all):

* ``crash``    -- every process in the node SIGKILLed (slurmd, the job's step, ranks, the Dask
  worker); slurmd started again after ``--crash-s`` (to 1.5x, drawn): a node that reboots, later
  than SLURM notices it gone;
* ``freeze``   -- every process in the node SIGSTOPped, SIGCONTed after ``--freeze-s`` (longer
  than the failure bound: the trial has been failed and re-queued when the node wakes up);
* ``link``     -- the node's link down (the host end of its veth), up after a drawn pause;
* ``cut``      -- a one-way partition: the node receives nothing from the login node (the driver,
  the Dask scheduler, slurmctld, PostgreSQL) but can still send; removed after a drawn pause;
* ``ctld``     -- slurmctld SIGKILLed, started again after a drawn pause;
* ``postgres`` -- the PostgreSQL server the study is stored in (listening on the login node's
  address on the nodes' network) stopped at once and started again (``--storage postgres``).

The study (``studies/two-nodes.toml`` with a longer trial: more epochs and ranks slowed down)
runs through the real ``search run``; whenever its driver has exited before the budget is met
it is resumed. Checked at the end: every trial once seen COMPLETE is still COMPLETE with the
same value and parameters; nothing RUNNING; the finished count is the budget exactly; no
configuration ran more often than ``max_retries`` allows, none completed twice; no late result
accepted (a journal: every operation written for a trial after the one that finished it is
counted, and none may show in the trial as read back; both storages: a finished trial's values
are the ones it was told); no process of the study left on any node, nor any batch job, within
``--orphan-bound`` seconds of the end; every node that was faulted ran a trial again after it
was healed. Per fault that hit a running trial: the seconds from the fault to the trial's
failure in the storage (its ``datetime_complete``).

    bash .ci/nodes.sh start
    python benchmarks/node_faults.py [--faults 100] [--kinds crash,freeze,link,cut,ctld]
        [--storage journal|postgres] [--seed S] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]

from _common import machine, now_iso, soak  # noqa: E402

NODES_SH = ROOT / ".ci" / "nodes.sh"
SLURM_CONF = "/etc/detol-nodes/slurm.conf"
LOGIN = "10.213.0.1"
KINDS = ("crash", "freeze", "link", "cut", "ctld", "postgres")
NAME = "node-faults"
MAX_RETRIES = 3


def env() -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": SLURM_CONF}


def nodes_sh(*args: str, timeout: float = 120) -> str:
    """``bash .ci/nodes.sh ARGS``; its output (RuntimeError when it fails)."""
    proc = subprocess.run(["bash", str(NODES_SH), *args], capture_output=True, text=True,
                          timeout=timeout, env=env())
    if proc.returncode != 0:
        raise RuntimeError(f"nodes.sh {' '.join(args)}: {proc.stderr.strip() or proc.stdout}")
    return proc.stdout.strip()


def all_nodes() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                         check=True).stdout
    return sorted(re.findall(r"^(detol-n\d+)", out, re.M), key=lambda n: int(n[7:]))


def on_node(name: str) -> list[str]:
    """The argv prefix that runs a command on node ``name`` (its network and UTS namespaces, as
    ``.ci/nodes.sh`` runs its slurmd)."""
    return ["nsenter", f"--net=/run/netns/{name}", f"--uts=/run/detol-nodes/uts/{name}", "--"]


def job_nodes() -> list[str]:
    """The nodes of the running batch jobs, in SLURM's order (the first runs the Dask worker)."""
    out = subprocess.run(["squeue", "-h", "-t", "R", "-o", "%N"], capture_output=True,
                         text=True, timeout=30, env=env()).stdout.split()
    names: list[str] = []
    for spec in out:
        expanded = subprocess.run(["scontrol", "show", "hostnames", spec], capture_output=True,
                                  text=True, timeout=30, env=env()).stdout.split()
        names += [n for n in expanded if n not in names]
    return names


def batch_jobs() -> list[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True,
                         timeout=30, env=env()).stdout
    return out.split()


def leftovers(tag: str) -> dict[str, list[str]]:
    """The study's processes still alive anywhere (found by its environment tag): per node's
    network namespace (``login`` for this machine's own), their command names."""
    found: dict[str, list[str]] = {}
    mine = os.readlink("/proc/self/ns/net")
    inode: dict[int, str] = {}
    for n in all_nodes():
        try:
            pids = subprocess.run(["ip", "netns", "pids", n], capture_output=True, text=True,
                                  timeout=10).stdout.split()
        except subprocess.SubprocessError:
            pids = []
        inode.update({int(p): n for p in pids})
    for pid in soak.tagged(tag):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            where = inode.get(pid) or ("login" if os.readlink(f"/proc/{pid}/ns/net") == mine
                                       else "?")
        except OSError:
            continue
        found.setdefault(where, []).append(comm)
    return found


def study_file(directory: Path, *, trials: int) -> Path:
    """studies/two-nodes.toml as a user copies it, with a trial of ~8 s (60 epochs, ranks slowed
    down) so that faults find trials running; many failures allowed (the faults cause them)."""
    text = (ROOT / "studies" / "two-nodes.toml").read_text()
    text = text.replace('name = "two-nodes"', f'name = "{NAME}"')
    # A trial whose MPI job hangs after a fault (MPICH over UCX does not notice a peer lost in a
    # link fault and waits on it) ends at trial_timeout, as docs/clusters.md tells users to set.
    text = re.sub(r"(?m)^trials = \d+",
                  f"trials = {trials}\nmax_failures = {trials * 4}\ntrial_timeout = 90", text)
    text = re.sub(r"(?m)^max_retries = \d+", f"max_retries = {MAX_RETRIES}", text)
    text = re.sub(r"(?m)^epochs = \d+", "epochs = 60\nslowdown = [8, 8, 8, 8]", text)
    path = directory / "study.toml"
    path.write_text(text)
    return path


class Study:
    """``search run`` of the soak's study, resumed whenever it exits before its budget."""

    def __init__(self, path: Path, url: str, cwd: Path, tag: str) -> None:
        self.path, self.url, self.cwd, self.tag = path, url, cwd, tag
        self.proc: subprocess.Popen[str] | None = None
        self.runs = 0
        self.exits: list[int] = []
        self.refused = 0
        self.log = cwd / "search.log"

    def ensure(self, target: int) -> None:
        """``search run --trials TARGET`` unless it is running: started or resumed."""
        if self.proc is not None and self.proc.poll() is None:
            return
        if self.proc is not None:
            self.exits.append(self.proc.returncode)
        self.runs += 1
        with open(self.log, "a") as log:
            log.write(f"\n--- search run #{self.runs} at {time.time():.1f}\n")
        with open(self.log, "a") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "search.cli", "run", str(self.path), "--storage", self.url,
                 "--trials", str(target), "--no-progress"], cwd=self.cwd,
                env={**env(), "DETOL_SOAK_TAG": self.tag}, stdout=log, stderr=subprocess.STDOUT,
                text=True)

    def finished(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.proc is not None and self.proc.returncode is not None:
            self.exits.append(self.proc.returncode)


def running_trial(url: str) -> int | None:
    trials = soak.read_trials(url, NAME) or []
    running = [t.number for t in trials if t.state.name == "RUNNING" and t.intermediate_values]
    return running[0] if running else None


def strike(kind: str, node: str, rng: random.Random, args: argparse.Namespace,
           pg: Any) -> dict[str, Any]:
    """One fault, held, then undone and the node healed; what was done and when."""
    pause = rng.uniform(2.0, 8.0)
    at = time.time()
    try:
        if kind == "crash":  # down longer than SLURM takes to notice (as a reboot is, at a site)
            nodes_sh("crash", node)
            pause = rng.uniform(args.crash_s, 1.5 * args.crash_s)
            time.sleep(pause)
        elif kind == "freeze":
            nodes_sh("freeze", node)
            pause = args.freeze_s
            time.sleep(pause)
        elif kind == "link":
            pause = rng.uniform(5.0, 30.0)
            nodes_sh("link", node, "down")
            time.sleep(pause)
        elif kind == "cut":
            pause = rng.uniform(5.0, 30.0)
            nodes_sh("cut", node)
            time.sleep(pause)
        elif kind == "ctld":
            node = "login"
            nodes_sh("ctld-crash")
            time.sleep(pause)
        elif kind == "postgres":
            node = "login"
            pg.stop()  # pg_ctl -m immediate: as a crash leaves it
            time.sleep(pause)
    finally:  # undone even when the soak is stopped in the middle (every fault kind at once)
        if kind == "postgres" and not pg.running():
            pg.start()
        if kind == "ctld":
            nodes_sh("ctld-start")
        if kind in ("freeze", "link", "cut"):
            nodes_sh("heal", node)  # thaw, link up, partition removed
    healed = time.time()
    for n in all_nodes():  # every fault undone: slurmd back where it was killed, nodes resumed
        nodes_sh("heal", n)
    return {"kind": kind, "node": node, "at": at, "undone_at": healed, "held_s": round(pause, 1),
            "healed_s": round(time.time() - healed, 1)}


def detection(faults: list[dict[str, Any]], trials: list[Any]) -> None:
    """Per fault that hit a running trial: seconds from the fault to that trial's failure."""
    by_number = {t.number: t for t in trials}
    for f in faults:
        t = by_number.get(f["trial"]) if f["hit"] and f["trial"] is not None else None
        if t is None or t.state.name != "FAIL" or t.datetime_complete is None:
            continue
        f["failed_after_s"] = round(t.datetime_complete.timestamp() - f["at"], 1)
        f["trial_reason"] = str(t.user_attrs.get("exit_reason", ""))[:160]


def late_writes(journal: Path) -> tuple[int, int]:
    """(operations written for a trial after the one that finished it, of those the ones that
    show in the trial as read back): late results attempted, and accepted."""
    from optuna.storages.journal._storage import JournalOperation

    finished_at: dict[int, int] = {}
    late: list[dict[str, Any]] = []
    ops = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    for i, op in enumerate(ops):
        tid = op.get("trial_id")
        if tid is None:
            continue
        if tid in finished_at:
            late.append(op)
        elif op["op_code"] == JournalOperation.SET_TRIAL_STATE_VALUES and op["state"] in (1, 2, 3):
            finished_at[tid] = i
    accepted = 0
    if late:
        storage = soak.plain_storage(str(journal))
        for op in late:
            t = storage.get_trial(op["trial_id"])
            if op["op_code"] == JournalOperation.SET_TRIAL_INTERMEDIATE_VALUE:
                accepted += t.intermediate_values.get(op["step"]) == op["intermediate_value"]
            elif op["op_code"] == JournalOperation.SET_TRIAL_STATE_VALUES:
                accepted += t.state.value == op["state"]
    return len(late), accepted


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--faults", type=int, default=100)
    ap.add_argument("--kinds", default="crash,freeze,link,cut,ctld")
    ap.add_argument("--storage", choices=("journal", "postgres"), default="journal")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--freeze-s", type=float, default=60.0,
                    help="how long a frozen node stays frozen (longer than the failure bound)")
    ap.add_argument("--crash-s", type=float, default=30.0,
                    help="a crashed node stays down this long at least (1.5x at most): longer "
                         "than SLURM's detection (SlurmdTimeout 10 s and its ping cycle)")
    ap.add_argument("--gap", type=float, nargs=2, default=(3.0, 12.0),
                    help="seconds between a fault's healing and the next fault (drawn)")
    ap.add_argument("--orphan-bound", type=float, default=60.0)
    ap.add_argument("--minutes", type=float, default=None,
                    help="strike no new fault after this many minutes (then heal and finish)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    kinds = args.kinds.split(",")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        ap.error(f"--kinds: unknown {unknown}; expected some of {list(KINDS)}")
    if "postgres" in kinds and args.storage != "postgres":
        ap.error("--kinds postgres needs --storage postgres")
    signal.signal(signal.SIGTERM, _interrupt)  # kill: the study is stopped and checked as well
    rng = random.Random(args.seed)
    tag = f"node-faults-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    load0 = os.getloadavg()
    print(nodes_sh("start", timeout=300))
    for n in all_nodes():  # whatever an earlier run cut short left
        nodes_sh("heal", n)
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="detol-nf-")))
        pg = None
        if args.storage == "postgres":
            from tests.pg_server import throwaway_postgres

            pg = stack.enter_context(throwaway_postgres(host=LOGIN))
            url = pg.url
        else:
            url = str(work / "study.journal")
        # The study gets 4 more trials whenever it met its budget before every fault struck
        # (as --trials gives them); its final budget is the last target.
        target = 4
        study = Study(study_file(work, trials=target), url, work, tag)
        ledger = soak.Ledger()
        faults: list[dict[str, Any]] = []

        def finished() -> int:
            trials = soak.read_trials(url, NAME) or []
            return sum(t.state.name in ("COMPLETE", "PRUNED") for t in trials)

        try:
            study.ensure(target)
            for i in range(args.faults):
                if args.minutes and time.monotonic() - started > 60 * args.minutes:
                    print(f"--minutes {args.minutes:g} reached after {i} faults", flush=True)
                    break
                kind = kinds[i % len(kinds)]
                while not soak.wait_until(
                        lambda: running_trial(url) is not None or study.finished(), 120):
                    print("no trial running for 120 s; waiting on", flush=True)
                if study.finished():
                    target = max(target, finished()) + 4
                    study.ensure(target)
                    soak.wait_until(lambda: running_trial(url) is not None, 120)
                time.sleep(rng.uniform(0.0, 3.0))  # an instant within the trial
                busy = job_nodes()
                node = rng.choice(busy or all_nodes())
                trial = running_trial(url)
                ledger.see(soak.read_trials(url, NAME) or [])
                fault = strike(kind, node, rng, args, pg)
                fault["trial"] = trial
                fault["hit"] = fault["node"] in busy or kind in ("ctld", "postgres")
                fault["job_nodes"] = busy
                faults.append(fault)
                print(f"fault {i + 1}/{args.faults} at {time.strftime('%H:%M:%S')}: {kind} "
                      f"{fault['node']} (trial {trial} on {busy}, held {fault['held_s']} s)",
                      flush=True)
                if study.finished():  # the fault (or the budget) ended it: resumed
                    target = max(target, finished()) + (4 if i + 1 < args.faults else 0)
                    study.ensure(max(target, 1))
                time.sleep(rng.uniform(*args.gap))
            # After the last fault, the healed nodes run trials again: 4 more.
            target = max(target, finished()) + 4
            if study.finished():
                study.ensure(target)
            deadline = time.monotonic() + 60 * 20
            while time.monotonic() < deadline:
                if study.finished():
                    if finished() >= target:
                        break
                    study.ensure(target)
                time.sleep(2)
        finally:
            study.stop()
            if args.json:
                args.json.with_suffix(".log").write_text(study.log.read_text())
        budget = target
        ended = time.monotonic()
        clean = soak.wait_until(lambda: not leftovers(tag) and not batch_jobs(),
                                args.orphan_bound, step=1.0)
        left = leftovers(tag)
        jobs = batch_jobs()
        trials = soak.read_trials(url, NAME) or []
        problems = soak.final_problems(trials, budget=budget, max_retries=MAX_RETRIES)
        lost = ledger.lost(trials)
        if lost:
            problems.append(f"trials once COMPLETE lost or changed: {lost}")
        if not clean:
            problems.append(f"left after {args.orphan_bound:g} s: processes {left}, jobs {jobs}")
        late, accepted = late_writes(Path(url)) if args.storage == "journal" else (0, 0)
        if accepted:
            problems.append(f"{accepted} late results accepted")
        detection(faults, trials)
        # Every faulted node ran a trial again after its first fault was undone.
        first_undone: dict[str, float] = {}
        for f in faults:
            if f["node"] != "login":
                first_undone.setdefault(f["node"], f["undone_at"])
        unused = sorted(n for n, since in first_undone.items() if not any(
            n in (t.user_attrs.get("hosts") or ()) for t in trials
            if t.datetime_start is not None and t.datetime_start.timestamp() > since))
        if unused:
            problems.append(f"nodes never used again after their fault: {unused}")
        with open(study.log) as log:
            refused = sum(" refused " in line for line in log)
    per_kind: dict[str, dict[str, Any]] = {}
    for f in faults:
        row = per_kind.setdefault(f["kind"], {"faults": 0, "hit_a_trial": 0, "trial_failed": 0,
                                              "failed_after_s": []})
        row["faults"] += 1
        row["hit_a_trial"] += bool(f["hit"] and f["trial"] is not None)
        if "failed_after_s" in f:
            row["trial_failed"] += 1
            row["failed_after_s"].append(f["failed_after_s"])
    for row in per_kind.values():
        times = row.pop("failed_after_s")
        row["median_s"] = statistics.median(times) if times else None
        row["max_s"] = max(times) if times else None
    result = {
        "date": now_iso(), "machine": machine(), "seed": args.seed, "storage": args.storage,
        "faults": len(faults), "kinds": kinds, "wall_s": round(ended - started, 1),
        "load_start": load0, "load_end": os.getloadavg(), "budget": budget,
        "trials": len(trials), "complete": sum(t.state.name == "COMPLETE" for t in trials),
        "failed": sum(t.state.name == "FAIL" for t in trials),
        "requeued": sum(bool(t.user_attrs.get("detol:requeued")) for t in trials),
        "search_runs": study.runs, "search_exits": study.exits,
        "late_writes": late, "late_accepted": accepted, "refused_by_driver": refused,
        "orphans": left, "jobs_left": jobs, "per_kind": per_kind, "problems": problems,
        "fault_log": faults,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "fault_log"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
