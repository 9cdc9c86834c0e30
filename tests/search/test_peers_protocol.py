"""The peers benchmark's protocol (benchmarks/_common/nb201_protocol.py and peers.py,
benchmarks/peers.py): the NB201 encoding the peers search, the noise model and seeds shared
with our driver, the incumbent rule, and that a peer which is missing or fails is reported,
never raised. No peer package is needed: the one real peer run here is Optuna's TPE (a
dependency)."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from search.simulated._nb201 import evaluate, mean_accuracy, table_key
from spaces import NB201_OPS, CellGenome

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def peers_mod():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import peers
        from _common import peers as _peers

        yield _peers, peers
    finally:
        sys.path.remove(str(BENCHMARKS))


def _connected(ops: tuple[str, ...]) -> CellGenome | None:
    try:
        return CellGenome(nodes=4, edges=ops)
    except ValueError:
        return None


@pytest.mark.unit
def test_every_cell_encodes_to_its_table_key_and_back(peers_mod):
    _peers, _ = peers_mod
    keys = set()
    connected = 0
    for ops in itertools.product(NB201_OPS, repeat=6):
        key = _peers.encode(ops)
        assert _peers.decode(key) == ops
        genome = _connected(ops)
        if genome is not None:  # our genome's key, in the same edge order
            assert table_key(genome) == key
            connected += 1
        keys.add(key)
    assert len(keys) == 5**6  # every peer configuration is one table row
    assert 0 < connected < 5**6  # and the flat space also holds disconnected cells


@pytest.mark.unit
def test_encode_names_the_bad_edge(peers_mod):
    _peers, _ = peers_mod
    with pytest.raises(ValueError, match="edge2: 'conv_5x5'"):
        _peers.encode(("none", "none", "conv_5x5", "none", "none", "none"))
    with pytest.raises(ValueError, match="expected 6 edges"):
        _peers.encode(("none",) * 5)


@pytest.mark.unit
def test_a_peer_sees_the_drivers_noise_model_and_noise_seeds(peers_mod):
    _peers, _ = peers_mod
    best = ("nor_conv_3x3",) * 3 + ("skip_connect", "nor_conv_3x3", "nor_conv_1x1")
    problem = _peers.NoisyCell(dataset="cifar100", seed=7, budget=6)
    seen = [problem(best) for _ in range(6)]
    genome = CellGenome(nodes=4, edges=best)
    # search.driver._driver: noise seed = strategy seed * 1_000_003 + trial number
    expected = [
        evaluate({"genome": genome}, dataset="cifar100", noise_seed=7 * 1_000_003 + i)["values"][
            "val_accuracy"
        ]
        for i in range(6)
    ]
    assert seen == expected
    assert len(set(seen)) > 1  # one training seed per evaluation, not the mean
    with pytest.raises(_peers.BudgetSpent):
        problem(best)


@pytest.mark.unit
def test_a_disconnected_cell_answers_like_the_table(peers_mod):
    _peers, _ = peers_mod
    value = _peers.observe("000000", "cifar10", noise_seed=3)
    assert value < 20.0  # all-"none": chance level
    assert mean_accuracy("000000", "cifar10") < 20.0


@pytest.mark.unit
def test_incumbent_is_the_best_observed_scored_by_its_seed_mean(peers_mod):
    _peers, _ = peers_mod
    keys = ["000000", "333132", "111111", "222222"]
    observed = [50.0, 80.0, 80.0, 10.0]  # a tie at 80: the first keeps the title
    curve = _peers.incumbent_curve(keys, observed, "cifar10")
    assert curve == [
        mean_accuracy("000000", "cifar10"),
        mean_accuracy("333132", "cifar10"),
        mean_accuracy("333132", "cifar10"),
        mean_accuracy("333132", "cifar10"),
    ]
    # Observed, not seed mean: a worse-looking evaluation of a better cell does not win.
    lucky = _peers.incumbent_curve(["111111", "333132"], [95.0, 90.0], "cifar10")
    assert lucky[-1] == mean_accuracy("111111", "cifar10")


@pytest.mark.unit
def test_optuna_tpe_peer_runs_the_protocol(peers_mod):
    _peers, _ = peers_mod
    problem = _peers.run_peer("optuna-tpe", "cifar10", 1, 12)
    assert len(problem.keys) == 12
    assert problem.observed == [
        _peers.observe(k, "cifar10", 1 * 1_000_003 + i) for i, k in enumerate(problem.keys)
    ]
    curve = problem.incumbent_curve()
    assert len(curve) == 12 and all(np.isfinite(curve))
    best = problem.keys[int(np.argmax(problem.observed))]  # argmax: the first of ties
    assert curve[-1] == mean_accuracy(best, "cifar10")


def _broken(problem, seed, budget, options):
    problem(("none",) * 6)
    raise RuntimeError("peer blew up after one evaluation")


def test_a_missing_or_failing_peer_is_reported_not_raised(peers_mod, monkeypatch, tmp_path, capsys):
    _peers, peers = peers_mod
    monkeypatch.setitem(
        _peers.PEERS,
        "ghost",
        _peers.Peer("not installed anywhere", ("detol_no_such_module",), "ghost", _broken),
    )
    monkeypatch.setitem(_peers.PEERS, "broken", _peers.Peer("raises", ("numpy",), "numpy", _broken))
    why = _peers.missing("ghost")
    assert why is not None
    assert "ModuleNotFoundError: No module named 'detol_no_such_module'" in why
    assert "pip install -e '.[peers]'" in why
    assert _peers.missing("broken") is None

    r = peers.run_job(peers.RunJob("broken", "cifar10", 0, 100))
    assert r["error"] == "RuntimeError: peer blew up after one evaluation"
    assert r["at"] == {}

    out = tmp_path / "peers.json"
    assert peers.main(["--optimizers", "ghost", "--datasets", "cifar10", "--json", str(out)]) == 0
    assert "ghost: cannot run here: ModuleNotFoundError" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["results"]["cifar10"]["ghost"]["status"] == "not installed"
    assert "detol_no_such_module" in doc["unavailable"]["ghost"]

    table = peers.summarise([r], ["cifar10"], ["broken"], {})
    assert table["cifar10"]["broken"]["status"] == "failed"
    assert table["cifar10"]["broken"]["reason"].startswith("RuntimeError")


@pytest.mark.unit
def test_benchmark_helpers_import_one_way() -> None:
    """benchmarks/_common: peers -> syne_tune_loop -> nb201_protocol, never back (the old
    _peers.py <-> _syne_tune.py circle), read from the modules' own import statements."""
    import ast

    helpers = BENCHMARKS / "_common"
    names = {p.stem for p in helpers.glob("*.py")} - {"__init__"}
    edges = {}
    for name in names:
        tree = ast.parse((helpers / f"{name}.py").read_text())
        edges[name] = {
            (node.module or "").lstrip(".") or node.names[0].name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level
        } & names
    assert edges == {
        "nb201_protocol": set(),
        "syne_tune_loop": {"nb201_protocol"},
        "peers": {"nb201_protocol", "syne_tune_loop"},
        "curves": set(),
        "flat_peers": set(),  # run as a script in a peer's own venv: imports no helper
        "anytime_peers": set(),  # the same, for the anytime benchmark (benchmarks/anytime.py)
        "soak": set(),
        "job_pool": set(),
        "kmeans": set(),  # the ASGD paper's K-means (kmeans_asgd.py, asgd_exchange.py)
    }
