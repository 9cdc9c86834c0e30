"""A fixed sample of mutants of spaces/_mutation.py that its own rule tests must kill (issue 33):
the mutation tool (benchmarks/mutation.py, around mutmut's generator) run end to end in the
default suite. The full run is not part of CI (minutes per module): docs/testing.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = [
    "_macro_add: 'rng.integers(1, n + 1)' -> 'rng.integers(n + 1)'",
    "_macro_add: 'n + 1' -> 'n - 1'",
    "_macro_add: '>= p' -> '> p'",
    "_macro_add: '< f.max_inputs' -> '<= f.max_inputs'",
    "_macro_remove: 'rng.integers(1, len(g.nodes))' -> 'rng.integers(len(g.nodes))'",
    "_macro_remove: 'in' -> 'not in'",
    "_macro_remove: '(inputs - {r}) | set(removed.inputs)' -> '(inputs - {r}) & set(removed.inputs)'",
    "_macro_remove: 'i - 1 if i > r else i' -> 'i - 1 if (i > r) and False else i'",
    "_macro_crossover: '(a, b) if rng.random() < 0.5 else (b, a)' -> '(a, b) if (rng.random() < 0.5) or True else (b, a)'",
    "_macro_crossover: '0' -> '1'",
    "_macro_crossover: 'min(len(a.nodes), len(b.nodes)) + 1' -> 'min(len(a.nodes), len(b.nodes)) - 1'",
    "_stack_crossover: 'len(pa) + 1' -> 'len(pa) - 1'",
]


@pytest.mark.timeout(900)  # ~35 s of CPU; minutes of wall time on a loaded shared machine
def test_a_fixed_sample_of_mutants_is_killed_by_the_modules_own_tests() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "mutation.py"), "spaces/_mutation.py",
         "--tests", "tests/spaces/test_mutation_rules.py", "--only", *SAMPLE],
        cwd=ROOT, capture_output=True, text=True, timeout=800)
    lines = [line.strip() for line in proc.stdout.splitlines() if line.startswith("  ")]
    assert [line.split(None, 1)[1] for line in lines] == SAMPLE, proc.stdout + proc.stderr
    survivors = [line for line in lines if not line.startswith(("killed", "timeout"))]
    assert survivors == [] and proc.returncode == 0, proc.stdout + proc.stderr
