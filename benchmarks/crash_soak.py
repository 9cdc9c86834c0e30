"""Crash soak (issue 27): a study runs while faults strike at random instants; it must lose nothing.

Faults, each at an instant drawn from ``random.Random(seed)``:

* ``driver`` -- SIGKILL of ``search run`` (its process alone, as a crash leaves it);
* ``worker`` -- SIGKILL of one Dask worker process of the driver's cluster;
* ``rank`` -- SIGKILL of one MPI rank (a cold job's or a warm pool's);
* ``postgres`` -- the PostgreSQL server stopped at once (``pg_ctl -m immediate``), started again
  after a drawn pause (PostgreSQL storage only);
* ``disk`` -- the storage's filesystem (a small tmpfs holding the journal, or the PostgreSQL data
  directory, and the study's working directory) filled by one file, freed after a drawn pause.

After every fault the study goes on, or, when its driver is gone, is resumed with ``search run``
until its budget is met (a study that finishes before a fault found its target gets 2, then 4,
8, 16 more trials, as ``--trials`` gives them, so every planned fault strikes). Before each
fault the trials are read with plain Optuna; at the end of
each study the soak checks: every trial once COMPLETE is still COMPLETE with the same value and
parameters, nothing is left RUNNING, the finished count is the budget, no configuration ran more
often than ``max_retries`` allows, plain Optuna reads the storage, a driver exits non-zero only
when a fault ended it, and no process a driver started (found by an environment tag) outlives
its driver by more than ``--orphan-bound`` seconds. A real study (digits MLP, 1-2 ranks,
2 epochs, a warm pool in every other study) runs through the real ``search run``.

    python benchmarks/crash_soak.py [--quick] [--kills N] [--seed S] [--json PATH]
        [--storages journal,postgresql] [--minutes M]
    python benchmarks/crash_soak.py --merge RUN.json... --json PATH   # several runs as one
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]

from _common import machine, now_iso, soak  # noqa: E402

KINDS = {"journal": ("driver", "worker", "rank", "disk"),
         "postgresql": ("driver", "worker", "rank", "postgres", "disk")}
RUN_TIMEOUT_S = 420.0  # a driver that neither finishes nor fails in this long has hung


def study_text(name: str, *, budget: int, max_retries: int, warm: bool) -> str:
    return textwrap.dedent(f"""\
        name = "{name}"
        metric = "val_accuracy"
        pruner = "none"
        [budget]
        trials = {budget}
        concurrency = 2
        max_retries = {max_retries}
        max_failures = 1000
        [strategy]
        name = "random"
        seed = 0
        [training]
        dataset = "digits"
        epochs = 2
        batch_size = 64
        [space]
        lr = {{ type = "float", low = 1e-3, high = 0.5, log = true }}
        hidden = {{ type = "int", low = 16, high = 64, log = true }}
        ranks = {{ type = "int", low = 1, high = 2 }}
        [launcher]
        warm = {str(warm).lower()}
        """)


class Study:
    """One study of the soak: its driver runs, the faults that struck it, what was found."""

    def __init__(self, soaker: Soaker, storage: str, index: int, kills: list[str]) -> None:
        self.s = soaker
        self.storage = storage
        self.name = f"soak-{storage[:4]}-{index}-{uuid.uuid4().hex[:6]}"
        self.dir = soaker.dirs[storage] / self.name
        self.dir.mkdir()
        self.url = (str(self.dir / "study.journal") if storage == "journal"
                    else soaker.server.url)  # type: ignore[union-attr]
        self.file = self.dir / "study.toml"
        self.file.write_text(study_text(self.name, budget=soaker.budget,
                                        max_retries=soaker.max_retries, warm=index % 2 == 0))
        self.pending = kills
        self.budget = soaker.budget  # raised when the study finishes before its faults struck
        self.extension = 2  # trials added then: 2, 4, 8, 16, 16, ... (a quiet machine is fast)
        self.ledger = soak.Ledger()
        self.problems: list[str] = []
        self.kills: list[dict[str, Any]] = []
        self.runs = 0
        self.exits: list[dict[str, Any]] = []
        self.driver: subprocess.Popen[bytes] | None = None
        self.tag = ""
        # Until when a non-zero exit of the current run is a fault's doing (a SIGKILL, a full
        # disk); past it, or after any other fault, a failing driver is a finding.
        self.faulted_until = 0.0
        self.disk_run = 0  # the driver run during which the disk was last filled

    # --- the driver --------------------------------------------------------------------------

    def start(self) -> None:
        self.runs += 1
        self.tag = f"{self.name}-{self.runs}"
        log = open(self.s.logs / f"{self.tag}.log", "wb")  # noqa: SIM115 - the driver holds it
        env = {k: v for k, v in os.environ.items() if k != "DETOL_STORAGE"}
        env[soak.TAG_VAR] = self.tag
        self.driver = subprocess.Popen(
            [sys.executable, "-m", "search.cli", "run", str(self.file), "--storage", self.url,
             "--no-progress", "--trials", str(self.budget)], cwd=self.dir, env=env, stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True)
        log.close()
        self.started = time.monotonic()
        self.faulted_until = 0.0

    def ended(self) -> bool:
        """Whether the driver has exited; its end is booked (exit code, orphans to look for)."""
        assert self.driver is not None
        rc = self.driver.poll()
        if rc is None:
            if time.monotonic() - self.started > RUN_TIMEOUT_S:
                self.problems.append(f"driver run {self.runs} hung > {RUN_TIMEOUT_S:g} s")
                soak.kill(self.driver.pid)
                self.driver.wait()
                self.s.ended_runs.append((self.tag, time.monotonic(), self))
                return True
            return False
        self.s.ended_runs.append((self.tag, time.monotonic(), self))
        tail = (self.s.logs / f"{self.tag}.log").read_text(errors="replace")[-1500:]
        # A driver stopped by the full disk says so (search.cli's one line), however long its
        # exit took under load after the space came back.
        faulted = time.monotonic() < self.faulted_until or (
            self.disk_run == self.runs and "No space left on device" in tail)
        self.exits.append({"run": self.runs, "rc": rc, "faulted": faulted,
                           "tail": tail[-300:]})
        if rc != 0 and not faulted:
            self.problems.append(f"driver run {self.runs} exited {rc} with no fault that ends "
                                 f"a driver: ...{tail}")
        return True

    def trials(self) -> list[Any] | None:
        try:
            found = soak.read_trials(self.url, self.name)
        except Exception as exc:  # noqa: BLE001 - what plain Optuna says is the finding
            self.problems.append(f"plain Optuna cannot read the storage: {exc!r}"[:400])
            self.s.unreadable += 1
            return None
        if found is not None:
            self.ledger.see(found)
        return found

    def finished(self) -> bool:
        trials = self.trials() or []
        return sum(t.state.name in ("COMPLETE", "PRUNED") for t in trials) >= self.budget

    # --- the faults --------------------------------------------------------------------------

    def strike(self, kind: str) -> dict[str, Any] | None:
        """Inflict ``kind`` now (or at the first moment it has a target); None if the driver
        ended before it could."""
        assert self.driver is not None
        target: list[int] = []

        def found() -> bool:
            if self.driver.poll() is not None:  # type: ignore[union-attr]
                return True
            if kind == "worker":
                target[:] = soak.dask_workers(self.tag, self.driver.pid)  # type: ignore[union-attr]
            elif kind == "rank" or (kind == "disk" and self.storage == "journal"):
                target[:] = soak.ranks(self.tag)  # a journal fills up while trials write
            else:
                target[:] = [0]
            return bool(target)

        soak.wait_until(found, 120)
        if self.driver.poll() is not None or not target:
            return None
        self.trials()  # what was COMPLETE before the fault
        # Looked up again: reading the storage takes a while, and on a fast machine the target
        # of a moment ago (a rank, the driver itself) may have ended meanwhile.
        if not found() or self.driver.poll() is not None:
            return None
        rng = self.s.rng
        hold = round(rng.uniform(0.5, 3.0), 2)
        record: dict[str, Any] = {"storage": self.storage, "kind": kind, "study": self.name,
                                  "run": self.runs, "load": os.getloadavg()[0]}
        if kind == "driver":
            soak.kill(self.driver.pid)
            if self.driver.wait() != -signal.SIGKILL:
                return None  # it had just finished on its own: nothing struck, strike again
            self.faulted_until = float("inf")
        elif kind in ("worker", "rank"):
            victim = rng.choice(sorted(target))
            record["victim"] = soak.cmdline(victim)[:120]
            if not record["victim"] or not soak.kill(victim):
                return None  # it ended on its own since the look-up: strike again
        elif kind == "postgres":
            self.s.server.stop()  # type: ignore[union-attr]
            time.sleep(hold)
            self.s.server.start()  # type: ignore[union-attr]
            record["down_s"] = hold
        elif kind == "disk":
            full_since = time.monotonic()
            filler = soak.fill(self.s.dirs[self.storage])
            self.disk_run = self.runs
            self.faulted_until = float("inf")  # a driver may stop on a full disk...
            time.sleep(hold)
            if self.storage == "journal":  # full until a write tears the journal (or 20 s)
                record["torn"] = soak.wait_until(lambda: soak.torn(self.url), 20 - hold)
            filler.unlink()
            self.faulted_until = time.monotonic() + 15  # ... soon; its resume must not fail
            record["full_s"] = round(time.monotonic() - full_since, 2)
            server = self.s.server
            if self.storage == "postgresql" and not server.running():
                record["server_restarted"] = True  # it stopped itself (PANIC on its WAL)
                server.start()
        self.kills.append(record)
        return record

    def run(self) -> None:
        """Faults and resumes until the budget is met and no fault is left for this study."""
        rng = self.s.rng
        while True:
            if self.driver is None or self.ended():
                if self.driver is not None and self.driver.returncode == 0 and self.finished():
                    if not self.pending or time.monotonic() >= self.s.deadline:
                        break
                    # The study outran a fault that had no target yet (a fast machine): more
                    # trials for it to strike, resumed as a user raises --trials; twice as many
                    # each time, so a fault's delay (up to 12 s) is soon covered.
                    self.budget += self.extension
                    self.extension = min(2 * self.extension, 16)
                if self.runs >= 3 * (len(self.kills) + len(self.pending)) + 3:
                    self.problems.append(f"gave up after {self.runs} driver runs")
                    break
                self.start()
            self.s.look_for_orphans()
            if self.pending and time.monotonic() < self.s.deadline:
                instant = time.monotonic() + rng.uniform(*self.s.delay)
                soak.wait_until(lambda instant=instant: time.monotonic() >= instant
                                or self.driver.poll() is not None, 600)  # type: ignore[union-attr]
                alive = self.driver.poll() is None  # type: ignore[union-attr]
                if alive and self.strike(self.pending[0]) is not None:
                    self.pending.pop(0)
            else:
                soak.wait_until(lambda: self.driver.poll() is not None  # type: ignore[union-attr]
                                or time.monotonic() - self.started > RUN_TIMEOUT_S, 600)
        # Torn tails that a writer cut off (training.storage._journal keeps each beside the
        # journal).
        self.repairs = len(list(self.dir.glob("*.torn-*")))
        trials = self.trials()
        if trials is not None:
            lost = self.ledger.lost(trials)
            self.s.lost += len(lost)
            if lost:
                self.problems.append(f"trials lost or changed: {lost}")
            self.problems += soak.final_problems(trials, budget=self.budget,
                                                 max_retries=self.s.max_retries)
        self.trial_states = {} if trials is None else {
            state: sum(t.state.name == state for t in trials)
            for state in ("COMPLETE", "PRUNED", "FAIL", "WAITING", "RUNNING")}


class Soaker:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.rng = random.Random(args.seed)
        self.budget = args.budget
        self.max_retries = 3
        self.delay = (0.2, 1.5) if args.quick else (1.0, 12.0)
        self.orphan_bound = args.orphan_bound
        self.deadline = time.monotonic() + args.minutes * 60
        self.logs = args.logs or work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.dirs: dict[str, Path] = {}
        self.server: Any = None
        self.ended_runs: list[tuple[str, float, Study]] = []
        self.orphans: list[dict[str, Any]] = []
        self.lost = 0
        self.unreadable = 0
        self.current: Study | None = None

    def clean_up(self) -> None:
        """End whatever our drivers started and is still running (an interrupted soak)."""
        if self.current is not None and self.current.driver is not None:
            soak.kill(self.current.driver.pid)
            self.current.driver.wait()
        for tag, _end, _study in self.ended_runs:
            for pid in soak.tagged(tag):
                soak.kill(pid)
        if self.current is not None:
            for pid in soak.tagged(self.current.tag):
                soak.kill(pid)

    def look_for_orphans(self, *, wait: bool = False) -> None:
        """Processes of an ended driver run still alive ``orphan_bound`` s after its end."""
        for entry in list(self.ended_runs):
            tag, end, study = entry
            left = end + self.orphan_bound - time.monotonic()
            if left > 0:
                if not wait:
                    continue
                soak.wait_until(lambda: not soak.tagged(tag), left)  # noqa: B023
            self.ended_runs.remove(entry)
            for pid in soak.tagged(tag):
                self.orphans.append({"run": tag, "pid": pid, "cmd": soak.cmdline(pid)[:200]})
                study.problems.append(f"orphan of {tag}: {soak.cmdline(pid)[:200]}")
                soak.kill(pid)  # ours (it carries our tag): do not let it pile up


def plan(args: argparse.Namespace, rng: random.Random, disk: bool) -> list[tuple[str, list[str]]]:
    """(storage, faults) per study: the kills spread evenly over the storages' fault kinds."""
    cells = [(s, k) for s in args.storages for k in KINDS[s] if disk or k != "disk"]
    bag = [cells[i % len(cells)] for i in range(args.kills)]
    rng.shuffle(bag)
    studies: list[tuple[str, list[str]]] = []
    queues = {s: [k for st, k in bag if st == s] for s in args.storages}
    while any(queues.values()):
        for s in args.storages:
            if queues[s]:
                studies.append((s, queues[s][:args.per_study]))
                queues[s] = queues[s][args.per_study:]
    return studies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="journal only, one kill of each kind, budget 3 (what CI runs)")
    parser.add_argument("--kills", type=int, default=None, help="faults in all (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--storages", default=None, help="journal,postgresql")
    parser.add_argument("--budget", type=int, default=None, help="trials per study")
    parser.add_argument("--per-study", type=int, default=None, help="faults per study")
    parser.add_argument("--minutes", type=float, default=600.0,
                        help="no new fault after this long; running studies finish")
    parser.add_argument("--logs", type=Path, help="keep every driver run's output here")
    parser.add_argument("--orphan-bound", type=float, default=30.0,
                        help="seconds a driver's processes may outlive it")
    parser.add_argument("--merge", type=Path, nargs="+", metavar="RESULT",
                        help="no soak: write the runs' result files as one (with --json)")
    args = parser.parse_args()
    if args.merge:
        if not args.json:
            parser.error("--merge needs --json PATH (where the merged result goes)")
        runs = []
        for path in args.merge:
            try:
                runs.append(json.loads(path.read_text()))
                soak.merge(runs[-1:])  # a soak's result file, whole
            except (OSError, ValueError, KeyError, TypeError) as exc:
                parser.error(f"--merge {path}: not a crash soak result ({exc})")
        merged = soak.merge(runs)
        args.json.write_text(json.dumps(merged, indent=1) + "\n")
        print(f"{merged['kills']} faults in {len(merged['runs'])} runs, "
              f"{len(merged['problems'])} problems -> {args.json}")
        return 0 if not merged["problems"] else 1
    default = "journal" if args.quick else "journal,postgresql"
    args.storages = (args.storages or default).split(",")
    args.kills = args.kills if args.kills is not None else (4 if args.quick else 200)
    args.budget = args.budget or (3 if args.quick else 6)
    args.per_study = args.per_study or (4 if args.quick else 5)
    unknown = set(args.storages) - set(KINDS)
    if unknown:
        parser.error(f"--storages: unknown {sorted(unknown)} (known: {sorted(KINDS)})")

    def stop(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)  # also when started in the background (SIGINT ignored)
    started = time.monotonic()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="detol-soak-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        os.chmod(work, 0o755)  # PostgreSQL's server runs as 'postgres' below it
        no_disk = soak.mount_refused(work / "probe")
        if no_disk:
            print(f"skipping the disk-full fault: {no_disk}", flush=True)
        soaker = Soaker(args, work)
        for storage in args.storages:
            size = "256m" if storage == "postgresql" else "48m"
            soaker.dirs[storage] = (stack.enter_context(soak.small_filesystem(work / storage, size))
                                    if not no_disk else (work / storage))
            soaker.dirs[storage].mkdir(exist_ok=True)
        if "postgresql" in args.storages:
            from tests.pg_server import throwaway_postgres

            pg_dir = soaker.dirs["postgresql"]
            os.chmod(pg_dir, 0o777)
            soaker.server = stack.enter_context(throwaway_postgres(
                directory=pg_dir, options="-c max_wal_size=64MB -c min_wal_size=32MB"))
        studies: list[Study] = []
        interrupted = None
        try:
            for index, (storage, kinds) in enumerate(plan(args, soaker.rng, not no_disk)):
                if time.monotonic() > soaker.deadline:
                    break
                study = Study(soaker, storage, index, kinds)
                soaker.current = study
                study.run()
                studies.append(study)
                print(f"{study.name}: {len(study.kills)} faults "
                      f"({', '.join(k['kind'] for k in study.kills)}), {study.runs} driver runs, "
                      f"trials {study.trial_states}, "
                      f"{'ok' if not study.problems else study.problems}", flush=True)
            soaker.look_for_orphans(wait=True)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the finished studies are the result
            interrupted = soaker.current.name if soaker.current else None
            print(f"interrupted; study {interrupted} left out", flush=True)
        finally:
            soaker.clean_up()
        kills = []
        for study in studies:
            for k in study.kills:
                kills.append({**k, "survived": not study.problems})
    rows = soak.table(kills)
    result = {
        "date": now_iso(), "machine": machine("optuna", "distributed", "mpi4py", "torch"),
        "load_before": load_before, "load_after": os.getloadavg(), "seed": args.seed,
        "quick": args.quick, "kills": len(kills), "kills_asked": args.kills,
        "wall_s": round(time.monotonic() - started, 1), "skipped": no_disk or None,
        "interrupted_study": interrupted,
        "studies": len(studies), "budget_per_study": args.budget,
        "trials_lost": soaker.lost, "unreadable_storages": soaker.unreadable,
        "orphans": len(soaker.orphans), "orphan_bound_s": args.orphan_bound,
        "torn_tails_repaired": sum(s.repairs for s in studies),
        "problems": [p for s in studies for p in (f"{s.name}: {q}" for q in s.problems)],
        "table": rows, "faults": kills,
        "study_runs": [{"study": s.name, "storage": s.storage, "driver_runs": s.runs,
                        "budget": s.budget, "trials": s.trial_states,
                        "torn_tails_repaired": s.repairs, "exits": s.exits} for s in studies],
    }
    print(f"\n{'storage':11} {'fault':9} {'kills':>5} {'survived':>8}")
    for row in rows:
        print(f"{row['storage']:11} {row['kind']:9} {row['kills']:5} {row['survived']:8}")
    print(f"{len(kills)} faults in {result['wall_s']:.0f} s (load {load_before[0]:.1f} -> "
          f"{result['load_after'][0]:.1f}): {soaker.lost} trials lost, {soaker.unreadable} "
          f"unreadable storages, {len(soaker.orphans)} orphans, "
          f"{result['torn_tails_repaired']} torn journal tails repaired, "
          f"{len(result['problems'])} problems")
    for problem in result["problems"]:
        print("  " + problem[:600])
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if not result["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
