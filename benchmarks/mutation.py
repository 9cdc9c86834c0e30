"""Mutation score of core modules, each against its OWN test files (issue 33).

Mutants come from mutmut's generator (``mutmut.mutation.file_mutation.create_mutations``:
flipped comparisons and operators, constants moved by one, ``and``/``or`` swapped, arguments
dropped or set to ``None``, assignments set to ``None``, strings changed, ``break``/``continue``
swapped...). Each mutant is one node replaced in the module's source; it is "killed" when the
module's own tests (``OWN_TESTS``, one table) fail with it, "survived" when they pass, "timeout"
when they run past ``--timeout-factor`` times the clean run (counted as caught, as mutmut and
Stryker count it). Mutants listed in ``benchmarks/mutation_equivalents.json`` cannot change
behaviour (the file says why for each) and are left out of the score:
``score = (killed + timeout) / (mutants - equivalent)``.

Why a driver of our own around mutmut's generator rather than ``mutmut run``: ``mutmut run``
first runs the whole test directory under a tracer to learn which tests reach which function
(our default suite takes ~21 minutes on 2 cores), and its per-module choice of tests is
one ``pytest_add_cli_args_test_selection`` for the whole run. Here one process imports the heavy
libraries once (torch, Optuna, Dask), then forks a child per mutant that serves the mutated
source for the one module through an import hook (nothing in the work tree is rewritten, so it
is safe beside other work) and runs ``pytest.main`` on that module's tests, ``-x``. The mutated
code exists only in that process: a test that starts a subprocess (mpiexec, a real study) runs
the original there, so ``OWN_TESTS`` names in-process tests.

Sampling: a module has 100-650 mutants (2,740 for the eight below); ``--sample N`` takes the N
whose key hashes lowest (stable: editing one function does not reshuffle the others), so a
before/after pair compares the same mutants. A key is ``function: 'original' -> 'mutated'``
(``#k`` for the k-th repeat in that function): no line numbers, so it survives edits elsewhere.

Command::

    nice -n 10 python benchmarks/mutation.py [MODULE ...] [--sample N] [--phase after]
        [--budget SECONDS] [--json PATH] [--quick] [--list] [--only KEY ...] [--show KEY]
        [--start I] [--stop J]

``--start``/``--stop``: a piece of the chosen mutants (``--sample 0``: in file order), so a set
too long for one sitting runs in pieces, each recorded under its own ``--phase`` (the settings
say which piece). ``--quick``: 10 mutants of spaces/_genome.py. ``--only``: the named mutants
(of one module) only, and exit 1 unless all are caught (the CI sample in
tests/test_mutation_sample.py).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "mutation.json"
EQUIVALENTS = ROOT / "benchmarks" / "mutation_equivalents.json"
PACKAGES = ("spaces", "search", "training", "tests")

# module -> its own tests: in-process and fast (each mutant runs them, -x).
OWN_TESTS: dict[str, list[str]] = {
    "spaces/_genome.py": [
        "tests/spaces/test_genome_decisions.py",
        "tests/spaces/test_genome_errors.py",
        "tests/spaces/test_genome_families.py",
        "tests/spaces/test_genome_cell.py",
    ],
    "spaces/_mutation.py": [
        "tests/spaces/test_mutation_rules.py",
        "tests/spaces/test_genome_families.py",
        "tests/spaces/test_genome_cell.py",
    ],
    "spaces/_embedding.py": [
        "tests/spaces/test_embedding_layout.py",
        "tests/spaces/test_embedding.py",
    ],
    "spaces/_stack.py": [
        "tests/spaces/test_stack_rules.py",
        "tests/spaces/test_genome_decisions.py",
        "tests/spaces/test_genome_errors.py",
        "tests/spaces/test_genome_families.py",
        "tests/spaces/test_mutation_rules.py",
        "tests/spaces/test_embedding.py",
    ],
    "spaces/_macro.py": [
        "tests/spaces/test_macro_rules.py",
        "tests/spaces/test_genome_decisions.py",
        "tests/spaces/test_genome_errors.py",
        "tests/spaces/test_genome_families.py",
        "tests/spaces/test_mutation_rules.py",
        "tests/spaces/test_embedding.py",
    ],
    "spaces/_genome_encoding.py": [
        "tests/spaces/test_genome_encoding_rules.py",
        "tests/spaces/test_embedding_layout.py",
        "tests/spaces/test_embedding.py",
    ],
    "search/pruners/_promotion.py": [
        "tests/search/test_promotion.py",
        "tests/search/test_promotion_replayed.py",
        "tests/search/test_promotion_rules.py",
        "tests/search/test_promotion_behaviour.py",
        "tests/search/test_one_rule.py",
        "tests/search/test_idle_slots.py",
        "tests/search/test_resize_replay.py",
    ],
    "search/pruners/_rung_index.py": [
        "tests/search/test_rung_index.py",
        "tests/search/test_rung_index_rules.py",
        "tests/search/test_promotion_rules.py",
        "tests/search/test_promotion.py",
        "tests/search/test_promotion_replayed.py",
    ],
    "search/pruners/_dominated.py": [
        "tests/search/test_dominated_rules.py",
        "tests/search/test_pareto_pruning.py",
    ],
    "search/strategies/_evolution.py": [
        "tests/search/test_evolution_rules.py",
        "tests/search/test_strategies.py::test_same_seed_same_sequence[evolution]",
        "tests/search/test_strategies.py::test_resume_continues_as_if_uninterrupted[evolution]",
    ],
    "training/algorithms/_asgd.py": [
        "tests/training/test_asgd_inprocess.py",
        "tests/training/test_asgd_unit.py",
        "tests/training/test_asgd_rules.py",
    ],
    "search/driver/_study.py": [
        "tests/search/test_study_rules.py",
        "tests/search/test_recovery.py",
        "tests/search/test_study_integrity.py",
        "tests/search/test_study_behaviour.py",
        "tests/search/test_one_rule.py",
        "tests/search/test_auto.py",
        "tests/search/test_warm_start.py",
        "tests/search/test_checkpoint_store.py",
    ],
    "search/driver/_driver.py": [
        "tests/search/test_driver_rules.py",
        "tests/search/test_driver_trial_rules.py",
        "tests/search/test_one_rule.py",
        "tests/search/test_pool_affinity.py",
        "tests/search/test_checkpoint_store.py",
        "tests/search/test_simulation.py",
        "tests/search/test_driver_hot_path.py",
    ],
    # Issue 46: the training core's hot paths (in-process tests only; the mpiexec ones run the
    # original code).
    "training/algorithms/_sync.py": [
        "tests/training/test_sync_rules.py",
    ],
    "training/session/_session.py": [
        "tests/training/test_one_core.py",
        "tests/training/test_session_rules.py",
    ],
    "training/data/_loaders.py": [
        "tests/training/test_datasets.py",
        "tests/training/test_loaders_rules.py",
    ],
    "training/pruning/_units.py": [
        "tests/training/test_unit_pruning_rules.py",
        "tests/training/test_unit_pruning.py",
        "tests/training/test_taylor_pruning.py",
    ],
    "training/pruning/_graph.py": [
        "tests/training/test_unit_pruning_rules.py",
        "tests/training/test_unit_pruning.py",
    ],
    # Issue 48: the shard reader and the node cache (in-process tests; the mpiexec and
    # multi-process ones run the original code).
    "training/data/_shards.py": [
        "tests/training/test_shards.py",
    ],
    "training/data/_cache.py": [
        "tests/training/test_shards.py",
    ],
    "training/state/_reshard.py": [
        "tests/training/test_reshard.py",
        "tests/training/test_checkpoint_rules.py",
        "tests/training/test_one_core.py",
    ],
    "training/launch/_warm_pool.py": [
        "tests/training/test_launcher_loopback.py",
        "tests/training/test_warm_pool_rules.py",
    ],
    "training/state/_checkpoint.py": [
        "tests/training/test_checkpoint_settings.py",
        "tests/training/test_reshard.py",
        "tests/training/test_checkpoint_rules.py",
    ],
    "search/clusters/_watch.py": [
        "tests/search/test_cluster_watch.py",
    ],
    "search/strategies/_tpe.py": [
        "tests/search/test_tpe_rules.py",
        "tests/search/test_proposal_window.py",
        "tests/search/test_strategies.py",
        "tests/search/test_sampler_contract.py",
    ],
    "search/strategies/_window.py": [
        "tests/search/test_window_rules.py",
        "tests/search/test_proposal_window.py",
        "tests/search/test_predictor.py",
        "tests/search/test_strategies.py",
    ],
    "search/strategies/_gp.py": [
        "tests/search/test_gp_rules.py",
        "tests/search/test_proposal_window.py",
        "tests/search/test_strategies.py::test_gp_same_seed_same_sequence",
        "tests/search/test_sampler_contract.py",
    ],
    "search/strategies/_auto.py": [
        "tests/search/test_auto.py",
        "tests/search/test_strategies.py::test_every_strategy_builds_for_its_objectives",
    ],
    "search/pruners/_top_half.py": [
        "tests/search/test_top_half_rules.py",
        "tests/search/test_study_file.py",
        "tests/search/test_pruning_replay.py",
    ],
    "search/strategies/_nsga2.py": [
        "tests/search/test_nsga2_rules.py",
        "tests/search/test_strategies.py",
        "tests/search/test_sampler_contract.py",
    ],
    "search/strategies/_base.py": [
        "tests/search/test_base_rules.py",
        "tests/search/test_evolution_rules.py",
        "tests/search/test_strategies.py",
        "tests/search/test_conditional_spaces.py",
        "tests/search/test_proposal_window.py",
    ],
    "search/strategies/_reinforce.py": [
        "tests/search/test_reinforce_rules.py",
        "tests/search/test_strategies.py",
        "tests/search/test_conditional_spaces.py",
        "tests/search/test_sampler_contract.py",
        "tests/search/test_warm_start.py::test_every_strategy_starts_from_the_transferred_cells"
        "[reinforce]",
    ],
    "search/strategies/_surrogate.py": [
        "tests/search/test_surrogate_rules.py",
        "tests/search/test_predictor.py",
        "tests/search/test_conditional_spaces.py",
        "tests/search/test_sampler_contract.py",
    ],
    "search/strategies/_predictor.py": [
        "tests/search/test_predictor_rules.py",
        "tests/search/test_predictor.py",
        "tests/search/test_conditional_spaces.py",
        "tests/search/test_sampler_contract.py",
    ],
    "spaces/_space.py": [
        "tests/spaces/test_space_rules.py",
        "tests/spaces/test_conditions.py",
        "tests/spaces/test_dimensions.py",
        "tests/search/test_conditional_spaces.py",
    ],
    "spaces/_dimensions.py": [
        "tests/spaces/test_dimensions_rules.py",
        "tests/spaces/test_dimensions.py",
        "tests/spaces/test_conditions.py",
        "tests/search/test_conditional_spaces.py",
    ],
    "spaces/_cell.py": [
        "tests/spaces/test_cell_rules.py",
        "tests/spaces/test_genome_cell.py",
        "tests/spaces/test_genome_errors.py",
        "tests/spaces/test_genome_decisions.py",
        "tests/spaces/test_mutation_rules.py",
        "tests/spaces/test_genome_families.py",
        "tests/spaces/test_embedding.py",
    ],
    "spaces/_graph_features.py": [
        "tests/spaces/test_graph_features_rules.py",
        "tests/spaces/test_embedding_layout.py",
        "tests/spaces/test_embedding.py",
    ],
}
# tests marked mpi launch mpiexec: the mutant does not exist in those processes
MARKERS = "not slow and not benchmark and not mpi"


def own_tests(module_path: str) -> list[str]:
    """The module's test files that exist now (a table entry may name one yet to be written)."""
    return [t for t in OWN_TESTS[module_path] if (ROOT / t.split("::")[0]).exists()]


@dataclass(frozen=True)
class Mutant:
    module: str
    function: str  # "name" or "Class.name": the top-level function or method it is in
    key: str
    _tree: Any = field(repr=False, compare=False)
    _change: tuple[Any, Any] = field(repr=False, compare=False)

    @property
    def source(self) -> str:
        """The whole module with this one change (rendered on demand: libcst is slow)."""
        return self._tree.deep_replace(*self._change).code


def _cst():
    try:
        import libcst as cst
        from mutmut.mutation.file_mutation import create_mutations
    except ImportError:
        sys.exit("mutation: mutmut is not installed (pip install -e '.[mutation]')")
    return cst, create_mutations


def _config_mutmut() -> None:
    # mutmut reads [tool.mutmut] from the current directory's pyproject.toml
    os.chdir(ROOT)


def _qualnames(module: Any, cst: Any) -> dict[int, str]:
    names: dict[int, str] = {}
    for stmt in module.body:
        if isinstance(stmt, cst.FunctionDef):
            names[id(stmt)] = stmt.name.value
        elif isinstance(stmt, cst.ClassDef):
            for sub in stmt.body.body:
                if isinstance(sub, cst.FunctionDef):
                    names[id(sub)] = f"{stmt.name.value}.{sub.name.value}"
    return names


def _snippet(cst: Any, node: Any) -> str:
    return " ".join(cst.Module(body=[]).code_for_node(node).split())


def mutants_of(module_path: str) -> list[Mutant]:
    """Every mutant mutmut makes of one module (inside functions and methods)."""
    cst, create_mutations = _cst()
    _config_mutmut()
    source = (ROOT / module_path).read_text()
    module, mutations, _, _ = create_mutations(module_path, source)
    names = _qualnames(module, cst)
    seen: dict[str, int] = {}
    out: list[Mutant] = []
    for m in mutations:
        func = m.contained_by_top_level_function
        if func is None or id(func) not in names:
            continue
        key = f"{names[id(func)]}: {_snippet(cst, m.original_node)!r} -> " \
              f"{_snippet(cst, m.mutated_node)!r}"
        n = seen.get(key, 0)
        seen[key] = n + 1
        if n:
            key = f"{key} #{n}"
        out.append(Mutant(module_path, names[id(func)], key, module,
                          (m.original_node, m.mutated_node)))
    return out


def _rank(m: Mutant) -> str:
    return hashlib.sha1(f"{m.module}\n{m.key}".encode()).hexdigest()


def sample(mutants: list[Mutant], n: int | None) -> list[Mutant]:
    return sorted(mutants, key=_rank)[:n] if n else list(mutants)


def equivalents() -> dict[str, dict[str, str]]:
    return json.loads(EQUIVALENTS.read_text()) if EQUIVALENTS.exists() else {}


class _Serve(importlib.abc.MetaPathFinder):
    """Serves one module's mutated source; every other import goes the usual way."""

    def __init__(self, name: str, path: Path, source: str) -> None:
        self.name, self.path, self.source = name, path, source

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001
        if fullname != self.name:
            return None
        loader = _Loader(fullname, str(self.path))
        loader.source = self.source
        return importlib.util.spec_from_file_location(fullname, self.path, loader=loader)


class _Loader(importlib.machinery.SourceFileLoader):
    source = ""

    def get_code(self, fullname):  # noqa: ANN001
        return compile(self.source, self.path, "exec", dont_inherit=True)


def _dotted(module_path: str) -> str:
    return module_path.removesuffix(".py").replace("/", ".")


_PLUGINS: list[Any] = []  # pytest's plugins (entry points), loaded by _preload


def _preload(paths: list[str]) -> None:
    """Import the project packages the modules and their tests live in, and the test files
    themselves, once (so torch, Optuna, Dask... and the project's modules are in memory), then
    forget the mutated modules, every project module that binds something of theirs when it is
    imported (:func:`_importers`), and the test modules: each child imports those afresh, the
    mutated one from memory. The rest stays imported: a child does not pay for them again."""
    sys.path.insert(0, str(ROOT))
    import importlib
    import importlib.metadata

    import pytest  # noqa: F401

    # pytest's plugins (and what they import late, as hypothesis's does at the session's end)
    # (a child that looked them up itself, entry points of every installed distribution, spent
    # 2 of its 3 s on it at load 19): handed to each child's pytest.main, autoload off there
    for entry in importlib.metadata.entry_points(group="pytest11"):
        with contextlib.suppress(Exception):
            _PLUGINS.append(entry.load())
    with contextlib.suppress(ImportError):
        import hypothesis  # noqa: F401
    for package in sorted({part for p in paths for part in Path(p).parts[:2]} & set(PACKAGES)):
        if package != "tests":
            importlib.import_module(package)
    for test in {p.split("::")[0] for p in paths if p.startswith("tests/")}:
        with contextlib.suppress(Exception):  # only a warm-up: pytest reports a real problem
            importlib.import_module(_dotted(test))
    stale = _importers({_dotted(p) for p in paths if not p.startswith("tests/")})
    for name in list(sys.modules):
        if name in stale or name.split(".")[0] == "tests":
            del sys.modules[name]
    import gc

    gc.collect()
    gc.freeze()  # what is loaded now: never scanned again by a child's collections


def _imports(name: str, path: Path, package: bool) -> set[str]:
    """Every module name ``name``'s source imports (anywhere in it), with the packages an
    ``import a.b`` binds, and ``pkg.x`` for ``from pkg import x`` (x may be a module)."""
    import ast

    base = name if package else name.rpartition(".")[0]
    found: set[str] = set()
    source = path.read_text()
    if package and "lazy(" in source:  # training/_lazy.py's re-exports: {"Name": "_module"}
        found.update(f"{name}.{module}" for module in re.findall(r'": "(_\w+|\w+)"', source))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base.split(".")[: len(base.split(".")) - node.level + 1]
                module = ".".join([*parent, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _importers(targets: set[str]) -> set[str]:
    """``targets`` and every loaded project module that imports one of them, directly or
    through another such module: those may hold the original's functions and classes, so a
    child must import them again after the mutant."""
    edges: dict[str, set[str]] = {}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if name.split(".")[0] in PACKAGES and file and file.endswith(".py"):
            edges[name] = _imports(name, Path(file), hasattr(module, "__path__"))
    out = set(targets)
    grew = True
    while grew:
        grew = False
        for name, deps in edges.items():
            if name not in out and deps & out:
                out.add(name)
                grew = True
    return out


class _Reach:
    """pytest plugin for the clean run: which tests call which function of the module."""

    def __init__(self, path: Path) -> None:
        # "<import>": called while the tests are collected (class creation, module constants)
        self.path, self.test, self.reach = str(path), "<import>", {}
        self.seconds: dict[str, float] = {}
        sys.settrace(self._trace)

    def _trace(self, frame, event, arg):  # noqa: ANN001
        if frame.f_code.co_filename == self.path and self.test:
            func = frame.f_code.co_qualname.split(".<locals>")[0]
            self.reach.setdefault(func, set()).add(self.test)
        return None

    def pytest_runtest_setup(self, item) -> None:  # noqa: ANN001
        self.test = item.nodeid
        sys.settrace(self._trace)
        threading.settrace(self._trace)

    def pytest_runtest_logreport(self, report) -> None:  # noqa: ANN001
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_runtest_teardown(self, item) -> None:  # noqa: ANN001
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
        self.test = ""


def _pytest_args(tests: list[str]) -> list[str]:
    # --assert=plain: a failing assert still fails its test; rewriting every test module's
    # asserts again in each child cost seconds per mutant
    return [*tests, "-x", "-q", "-p", "no:cacheprovider", "--no-header", "-o", "addopts=",
            "--assert=plain", "-p", "no:unraisableexception", "-m", MARKERS, f"--rootdir={ROOT}"]


def _run_child(module_path: str, source: str | None, tests: list[str], log: Path,
               timeout: float, reach: Path | None = None) -> tuple[str, float]:
    """Fork; the child runs the tests with the module's source replaced. -> (outcome, seconds)
    With ``reach``, the child writes there which tests call which function."""
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # child
        code = 3
        try:
            os.setsid()
            # An empty directory of its own: a mutant that writes into the working directory
            # (a checkpoint, a log) cannot touch the work tree.
            os.chdir(tempfile.mkdtemp(prefix="cwd-", dir=log.parent))
            tests = [str(ROOT / t) if not Path(t).is_absolute() else t for t in tests]
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            if source is not None:
                sys.meta_path.insert(0, _Serve(_dotted(module_path), ROOT / module_path, source))
            import pytest

            plugin = _Reach(ROOT / module_path) if reach else None
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # _PLUGINS are loaded already
            code = int(pytest.main(_pytest_args(tests),
                                   plugins=[*_PLUGINS, *([plugin] if plugin else [])]))
            if plugin:
                # fastest first: with -x, a mutant is caught by the first test that fails
                order = plugin.seconds.get
                reach.write_text(json.dumps({f: sorted(t, key=lambda n: (order(n, 0.0), n))
                                             for f, t in plugin.reach.items()}))
        finally:
            os._exit(code)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            return ("survived" if rc == 0 else "killed"), time.monotonic() - start
        if time.monotonic() - start > timeout:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", time.monotonic() - start
        time.sleep(0.02)


def run_module(module_path: str, mutants: list[Mutant], tests: list[str], *, budget: float,
               timeout_factor: float, verbose: bool = True) -> dict[str, Any]:
    """Each mutant runs the tests (of ``tests``) that call its function in the clean run;
    one that no test calls survives without a run."""
    equiv = equivalents().get(module_path, {})
    logdir = Path(tempfile.mkdtemp(prefix="mutation-"))
    clean, t0 = _run_child(module_path, None, tests, logdir / "clean.log", 3600,
                           reach=logdir / "reach.json")
    if clean != "survived":
        sys.exit(f"mutation: {module_path}: its own tests fail without a mutant "
                 f"(see {logdir / 'clean.log'})")
    reach = json.loads((logdir / "reach.json").read_text())
    timeout = timeout_factor * t0 + 10
    counts = {"mutants": 0, "killed": 0, "survived": 0, "timeout": 0, "equivalent": 0}
    survivors: list[str] = []
    unreached = 0
    start = time.monotonic()
    for i, m in enumerate(mutants):
        if time.monotonic() - start > budget:
            break
        counts["mutants"] += 1
        if m.key in equiv:
            counts["equivalent"] += 1
            continue
        callers = reach.get(m.function, [])
        if "<import>" in callers:
            callers = tests
        if callers:
            outcome, _ = _run_child(module_path, m.source, callers, logdir / f"{i}.log", timeout)
        else:
            outcome, unreached = "survived", unreached + 1
        counts[outcome] += 1
        if outcome == "survived":
            survivors.append(m.key)
        if verbose:
            print(f"  {outcome:8s} {m.key}{'' if callers else '  (no test calls it)'}",
                  flush=True)
    scored = counts["mutants"] - counts["equivalent"]
    caught = counts["killed"] + counts["timeout"]
    return {**counts, "not_run": len(mutants) - counts["mutants"], "unreached": unreached,
            "score": round(caught / scored, 3) if scored else None,
            "tests": tests, "clean_run_s": round(t0, 2),
            "seconds": round(time.monotonic() - start, 1), "survivors": survivors}


def _record(path: Path, phase: str, per_module: dict[str, Any], settings: dict) -> None:
    from benchmarks._common import machine, now_iso

    data = json.loads(path.read_text()) if path.exists() else {"benchmark": "mutation"}
    data.setdefault("modules", {})
    for module, result in per_module.items():
        data["modules"].setdefault(module, {})[phase] = {
            **result, "date": now_iso(), "load": os.getloadavg(), "settings": settings}
    data["machine"] = machine()
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def _merge(before: dict[str, Any], rerun: dict[str, Any], phase: str) -> dict[str, Any]:
    """The whole module's count after re-running ``before``'s survivors only."""
    out = {**rerun, "mutants": before["mutants"], "not_run": before["not_run"],
           "rerun_of": phase, "rerun_mutants": rerun["mutants"]}
    for k in ("killed", "timeout", "equivalent"):
        out[k] = before[k] + rerun[k]
    scored = out["mutants"] - out["equivalent"]
    out["score"] = round((out["killed"] + out["timeout"]) / scored, 3) if scored else None
    return out


def table(path: Path = RESULTS, phases: tuple[str, str] = ("before", "after")) -> str:
    """The before/after table of a results file, in Markdown (docs/testing.md); ``phases``:
    the keys of the two columns (``full_before full_after``: the full mutant sets)."""
    data = json.loads(path.read_text())

    def cell(r: dict[str, Any] | None) -> str:
        if not r:
            return "| | | | |"
        caught = r["killed"] + r["timeout"]
        score = "" if r["score"] is None else f"{100 * r['score']:.0f} %"
        return f"| {r['mutants']} | {caught} | {r['equivalent']} | {score} |"

    rows = ["| module | before: run | caught | equivalent | score | after: run | caught "
            "| equivalent | score |", "|---|---|---|---|---|---|---|---|---|"]
    for module, runs in sorted(data["modules"].items()):
        if any(p in runs for p in phases):
            rows.append(f"| {module} {cell(runs.get(phases[0]))}{cell(runs.get(phases[1]))[1:]}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("modules", nargs="*", help=f"known: {sorted(OWN_TESTS)}")
    p.add_argument("--sample", type=int, default=40, help="mutants per module (0: all)")
    p.add_argument("--budget", type=float, default=900, help="seconds per module")
    p.add_argument("--timeout-factor", type=float, default=4.0)
    p.add_argument("--phase", default="after", help="key the counts are stored under")
    p.add_argument("--json", type=Path, default=None, help=f"default {RESULTS.relative_to(ROOT)}")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--list", action="store_true", help="print the sampled mutants' keys")
    p.add_argument("--show", metavar="KEY", help="print one mutant's changed lines")
    p.add_argument("--only", nargs="+", metavar="KEY")
    p.add_argument("--start", type=int, default=0, metavar="I",
                   help="skip the first I of the chosen mutants (the rest of a set run in "
                        "pieces: with --sample 0, file order)")
    p.add_argument("--stop", type=int, default=None, metavar="J",
                   help="end before the J-th of the chosen mutants (with --start: a piece)")
    p.add_argument("--tests", nargs="+", metavar="PATH",
                   help="run these test files instead of the module's own (one module)")
    p.add_argument("--exclude-tests", nargs="+", default=[], metavar="PATH",
                   help="leave these test files out (a 'before' run of tests added later)")
    p.add_argument("--table", nargs="*", metavar="PHASE",
                   help="print the results as a table (of two phases; default: before after)")
    p.add_argument("--survivors-of", metavar="PHASE",
                   help="run only the survivors recorded under PHASE (a full 'before' run; tests "
                        "were only added since, so what it killed stays killed) and record the "
                        "module's whole count under --phase")
    args = p.parse_args(argv)
    if args.table is not None:
        print(table(args.json or RESULTS, tuple(args.table or ("before", "after"))))
        return 0
    modules = args.modules or (["spaces/_genome.py"] if args.quick else list(OWN_TESTS))
    unknown = [m for m in modules if m not in OWN_TESTS]
    if unknown:
        p.error(f"unknown module {unknown[0]!r} (known: {sorted(OWN_TESTS)})")
    n = 10 if args.quick else args.sample
    chosen = {m: sample(mutants_of(m), n)[args.start:args.stop] for m in modules}
    if args.only:
        if len(modules) != 1:
            p.error("--only takes the keys of one module: name it")
        by_key = {m.key: m for m in mutants_of(modules[0])}
        missing = [k for k in args.only if k not in by_key]
        if missing:
            p.error(f"no mutant {missing[0]!r} in {modules[0]} (see --list)")
        chosen = {modules[0]: [by_key[k] for k in args.only]}
    earlier = {}
    if args.survivors_of:
        recorded = json.loads((args.json or RESULTS).read_text())["modules"]
        earlier = {m: recorded[m][args.survivors_of] for m in modules}
        chosen = {m: [mu for mu in mutants_of(m) if mu.key in set(earlier[m]["survivors"])]
                  for m in modules}
    if args.list or args.show:
        for m, ms in chosen.items():
            for mu in (ms if args.list else mutants_of(m)):
                if args.list:
                    print(f"{m}\t{mu.key}")
                elif mu.key == args.show:
                    import difflib

                    old = (ROOT / m).read_text().splitlines()
                    print("\n".join(difflib.unified_diff(old, mu.source.splitlines(), m, m,
                                                         lineterm="", n=1)))
        return 0
    tests = {m: args.tests or [t for t in own_tests(m) if t not in args.exclude_tests]
             for m in chosen}  # fixed now: test files written meanwhile wait
    _preload([*chosen, *(t for ts in tests.values() for t in ts)])
    results = {}
    for m, ms in chosen.items():
        print(f"{m}: {len(ms)} mutants against {tests[m]}", flush=True)
        results[m] = run_module(m, ms, tests[m], budget=args.budget,
                                timeout_factor=args.timeout_factor)
        if m in earlier:
            results[m] = _merge(earlier[m], results[m], args.survivors_of)
        r = results[m]
        print(f"{m}: killed {r['killed']} timeout {r['timeout']} survived {r['survived']} "
              f"equivalent {r['equivalent']} score {r['score']}", flush=True)
    if args.only:
        return 0 if all(r["survived"] == 0 for r in results.values()) else 1
    settings = {"sample": n, "timeout_factor": args.timeout_factor, "budget_s": args.budget,
                "generator": "mutmut 3.8.1 create_mutations",
                **({"start": args.start, "stop": args.stop}
                   if args.start or args.stop is not None else {})}
    _record(args.json or RESULTS, args.phase, results, settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
