"""How long a faulty own loop takes to fail its trial (issue 26: bounded, never a hang).

Three loops of tests/mpi_jobs/_own_loops.py, 2 ranks, run through
``training.launch.run_trial`` (the cold job, and with ``--quick`` left out, the warm pool):

* ``rank1_returns_early`` -- rank 1 returns after 1 report, rank 0 reports epoch 2;
* ``rank1_skips_a_report`` -- rank 1 skips epoch 2's report and waits in a sync allreduce;
* ``rank1_dies`` -- rank 1 is killed (SIGKILL) inside the loop.

The measurement is the time from the fault (stamped by rank 1 just before it) to
``run_trial``'s return. The yardstick is the bound each must stay under: ``agree_timeout_s``
plus 10 s for the first two (the warm pool adds its 5 s grace), 60 s for the kill (the
issue's goal). Ray Train and Optuna's TorchDistributedTrial never return in the first two.
The load average is printed beside every row.

    python benchmarks/own_loop_faults.py [--quick] [--json PATH] [--agree 20]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
JOBS = str(ROOT / "tests" / "mpi_jobs")
LOOPS = ("rank1_returns_early", "rank1_skips_a_report", "rank1_dies")


def measure(loop: str, *, warm: bool, agree: float, out: Path) -> dict[str, Any]:
    from training.launch import run_trial

    spec = {"config": {"ranks": 2, "epochs": 4, "agree_timeout_s": agree},
            "objectives": ["loss"], "timeout_s": 300, "warm": warm,
            "own_loop": {"function": f"_own_loops:{loop}", "params": {"out": str(out)},
                         "sys_path": [JOBS]}}
    result = run_trial(spec)
    took = time.time() - json.loads((out / "skipped.rank1.json").read_text())["time"]
    bound = 60.0 if loop == "rank1_dies" else agree + 10.0 + (5.0 if warm else 0.0)
    return {"loop": loop, "path": "warm" if warm else "cold", "state": result["state"],
            "seconds_to_fail": round(took, 2), "bound_s": bound,
            "ratio_to_bound": round(took / bound, 3), "load": os.getloadavg(),
            "reason": result["exit_reason"].splitlines()[0][:200]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the cold job only")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--agree", type=float, default=20.0, help="agree_timeout_s")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from training.launch import shutdown_pools

    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for warm in (False,) if args.quick else (False, True):
                for i, loop in enumerate(LOOPS):
                    row = measure(loop, warm=warm, agree=args.agree,
                                  out=Path(tmp) / f"{warm}-{i}")
                    rows.append(row)
                    print(f"{row['path']:4} {loop:22} {row['state']:7} "
                          f"{row['seconds_to_fail']:6.2f} s  (bound {row['bound_s']:g} s, "
                          f"ratio {row['ratio_to_bound']:.2f})  load "
                          f"{', '.join(f'{v:.1f}' for v in row['load'])}", flush=True)
    finally:
        shutdown_pools()
    if args.json:
        args.json.write_text(json.dumps({"agree_timeout_s": args.agree, "rows": rows},
                                        indent=1))
    ok = all(r["state"] == "failed" and r["seconds_to_fail"] < r["bound_s"] for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
