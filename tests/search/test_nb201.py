"""The NAS-Bench-201 objective: table lookups, the noisy single-seed answer, the exact random
search yardstick, bad input; and one `search run` of an nb201 study end to end."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from search import load_study_file
from search.simulated import _nb201 as nb
from spaces import CellFamily, CellGenome, StackFamily
from tests.cli_helpers import run_cli
from training.contract import open_storage

BEST_CIFAR10 = "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|skip_connect~0|nor_conv_3x3~1|nor_conv_1x1~2|"


@pytest.mark.unit
def test_table_has_every_cell_of_every_dataset() -> None:
    for dataset in nb.DATASETS:
        t = nb.table(dataset)
        assert len(t.keys) == 5**6 == len(set(t.keys))
        assert set(t.seeds) <= {2, 3}
        assert np.all(t.train_time_s > 0)
    assert nb.table("cifar10") is nb.table("cifar10")  # read once


@pytest.mark.unit
@pytest.mark.parametrize(
    ("dataset", "best", "key"),
    [("cifar10", 91.61, "333132"), ("cifar100", 73.49, "333133"), ("imagenet16-120", 46.73, "322133")],
)
def test_best_cell_per_dataset(dataset: str, best: float, key: str) -> None:
    assert nb.best_mean_accuracy(dataset) == pytest.approx(best, abs=0.005)
    assert nb.mean_accuracy(key, dataset) == nb.best_mean_accuracy(dataset)


@pytest.mark.unit
def test_genome_string_and_key_name_the_same_cell() -> None:
    genome = CellGenome.from_nb201_string(BEST_CIFAR10)
    assert nb.table_key(genome) == nb.table_key(BEST_CIFAR10) == "333132"
    assert nb.mean_accuracy(genome, "cifar10") == pytest.approx(91.6067, abs=1e-3)
    # Edge order 0->1, 0->2, 1->2, 0->3, 1->3, 2->3; digits index spaces.NB201_OPS.
    only_skip_03 = CellGenome(nodes=4, edges=("none",) * 3 + ("skip_connect", "none", "none"))
    assert nb.table_key(only_skip_03) == "000100"


@pytest.mark.unit
@pytest.mark.parametrize(
    ("dataset", "n", "expected"),
    [("cifar10", 10, 89.97), ("cifar10", 20, 90.37), ("cifar10", 50, 90.80), ("cifar10", 100, 91.02),
     ("cifar10", 500, 91.32), ("cifar100", 100, 71.43), ("imagenet16-120", 100, 45.35)],
)
def test_random_search_expectation_matches_the_published_figures(dataset: str, n: int, expected: float) -> None:
    assert nb.random_search_expectation(dataset, n) == pytest.approx(expected, abs=0.005)


@pytest.mark.unit
def test_random_search_expectation_agrees_with_sampling() -> None:
    t = nb.table("cifar10")
    rng = np.random.default_rng(0)
    rows = rng.integers(len(t.keys), size=(4000, 20))
    by_mean = t.mean[rows].max(axis=1).mean()
    seeds = rng.integers(t.seeds[rows])
    observed = t.accuracy[rows, seeds]
    by_observed = t.mean[rows[np.arange(len(rows)), observed.argmax(axis=1)]].mean()
    assert by_mean == pytest.approx(nb.random_search_expectation("cifar10", 20), abs=0.05)
    assert by_observed == pytest.approx(nb.random_search_expectation("cifar10", 20, noisy=True), abs=0.05)
    assert nb.random_search_expectation("cifar10", 20, noisy=True) < nb.random_search_expectation("cifar10", 20)


@pytest.mark.unit
def test_evaluate_answers_one_seed_from_the_table() -> None:
    genome = CellGenome.from_nb201_string(BEST_CIFAR10)
    t = nb.table("cifar10")
    row = t.rows["333132"]
    out = nb.evaluate({"genome": genome, "lr": 0.1}, dataset="cifar10", noise_seed=0)
    value = out["values"]["val_accuracy"]
    assert value in list(t.accuracy[row, : t.seeds[row]])
    assert value == t.accuracy[row, out["user_attrs"]["nb201_seed"]]
    assert out["sim_time_s"] == t.train_time_s[row] > 0
    assert out["user_attrs"]["nb201_arch"] == BEST_CIFAR10
    assert out["user_attrs"]["nb201_mean_val_accuracy"] == pytest.approx(91.6067, abs=1e-3)
    assert out["user_attrs"]["n_params"] > 100_000
    assert nb.evaluate({"genome": genome}, dataset="cifar10", noise_seed=0) == out  # deterministic


@pytest.mark.unit
def test_noise_seed_picks_different_training_seeds() -> None:
    genome = CellGenome.from_nb201_string(BEST_CIFAR10)
    answers = [nb.evaluate({"genome": genome}, dataset="cifar10", noise_seed=s) for s in range(40)]
    seeds = {a["user_attrs"]["nb201_seed"] for a in answers}
    values = {a["values"]["val_accuracy"] for a in answers}
    assert seeds == {0, 1, 2} and len(values) == 3


@pytest.mark.unit
def test_every_genome_the_cell_family_makes_is_in_the_table() -> None:
    family = CellFamily()
    for edges in itertools.islice(itertools.product(family.ops, repeat=6), 0, None, 97):
        genome = CellGenome(nodes=4, edges=family.repair(edges))
        out = nb.evaluate({"genome": genome}, dataset="imagenet16-120", noise_seed=1)
        assert 0 < out["values"]["val_accuracy"] < 100


@pytest.mark.unit
@pytest.mark.parametrize(
    ("params", "dataset", "message"),
    [
        ({"lr": 0.1}, "cifar10", "genome: the NAS-Bench-201 objective needs a genome"),
        ({"genome": "333132"}, "cifar10", "needs a cell genome"),
        ({"genome": StackFamily().suggest(optuna.create_study().ask())}, "cifar10", "needs a cell genome \\(family = 'cell'\\), got 'stack'"),
        ({"genome": CellGenome(nodes=5, edges=("skip_connect",) * 10)}, "cifar10", "not a NAS-Bench-201 cell"),
        ({"genome": CellGenome(nodes=4, edges=("max_pool_3x3",) * 6)}, "cifar10", "not a NAS-Bench-201 cell"),
        ({"genome": CellGenome.from_nb201_string(BEST_CIFAR10)}, "imagenet", r"unknown NAS-Bench-201 dataset 'imagenet' \(known: \('cifar10', 'cifar100', 'imagenet16-120'\)\)"),
    ],
)
def test_bad_input_is_a_clear_error(params: dict, dataset: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        nb.evaluate(params, dataset=dataset, noise_seed=0)


@pytest.mark.unit
def test_check_family_accepts_only_nb201_cell_families() -> None:
    nb.check_family(CellFamily())
    nb.check_family(CellFamily(ops=("none", "nor_conv_3x3", "skip_connect")))
    for family, message in [
        (None, "space.genome: the NAS-Bench-201 objective needs"),
        (StackFamily(), "space.genome.family: .* got 'stack'"),
        (CellFamily(nodes=5), "space.genome.nodes: NAS-Bench-201 cells have 4 nodes, got 5"),
        (CellFamily(ops=("none", "max_pool_3x3")), r"space.genome.ops: \['max_pool_3x3'\] not in"),
    ]:
        with pytest.raises(ValueError, match=message):
            nb.check_family(family)


@pytest.mark.unit
def test_bad_arch_and_n_are_errors() -> None:
    with pytest.raises(ValueError, match="arch: not a NAS-Bench-201 cell"):
        nb.mean_accuracy("|conv~0|", "cifar10")
    with pytest.raises(ValueError, match="n: needs at least one evaluation"):
        nb.random_search_expectation("cifar10", 0)


def test_search_run_of_an_nb201_study_end_to_end(tmp_path: Path) -> None:
    """`search run` on the real path (Dask, journal storage), no MPI: the table answers, the
    simulated clock runs 4 trials at once and only moves forward, in the order trials are told."""
    study = tmp_path / "nb201.toml"
    study.write_text(
        'name = "nb"\nobjective = "nb201:cifar100"\n\n[budget]\ntrials = 24\nconcurrency = 4\n\n'
        '[strategy]\nname = "tpe"\nseed = 3\n\n[pruner]\nname = "none"\n\n[space.genome]\nfamily = "cell"\n'
    )
    journal = tmp_path / "nb.journal"
    code, out, err = run_cli("run", str(study), "--storage", str(journal), "--no-progress")
    assert code == 0, out + err

    loaded = optuna.load_study(study_name="nb", storage=open_storage(str(journal)))
    assert loaded.direction == optuna.study.StudyDirection.MAXIMIZE
    trials = loaded.get_trials(deepcopy=False)
    assert len(trials) == 24 and all(t.state == TrialState.COMPLETE for t in trials)
    t100 = nb.table("cifar100")
    for t in trials:
        row = t100.rows[nb.table_key(t.user_attrs["nb201_arch"])]
        assert t.value in list(t100.accuracy[row, : t100.seeds[row]])
        assert t.user_attrs["nb201_mean_val_accuracy"] == pytest.approx(t100.mean[row])
        assert t.user_attrs["sim_time_s"] == pytest.approx(t100.train_time_s[row])
        assert t.user_attrs["sim_clock_s"] >= t.user_attrs["sim_time_s"] - 1e-6
        assert "genome_key" in t.user_attrs
    told = sorted(trials, key=lambda t: t.datetime_complete)
    clocks = [t.user_attrs["sim_clock_s"] for t in told]
    assert clocks == sorted(clocks)
    # 4 at a time: the study ends well before the trials' summed training time.
    total = sum(t.user_attrs["sim_time_s"] for t in trials)
    assert total / 4 * 0.8 < clocks[-1] < total / 2
    # Each trial draws its own training seed (noise seed = f(study seed, trial number)).
    assert len({t.user_attrs["nb201_seed"] for t in trials}) > 1


@pytest.mark.unit
@pytest.mark.parametrize("strategy", ["evolution", "reinforce", "tpe", "random"])
def test_shipped_nb201_studies_are_valid(strategy: str) -> None:
    sf = load_study_file(Path(__file__).parents[2] / "studies" / f"nb201-{strategy}.toml")
    assert (sf.objective, sf.strategy.name, sf.budget.trials) == ("nb201:cifar10", strategy, 100)
    nb.check_family(sf.search_space["genome"])
