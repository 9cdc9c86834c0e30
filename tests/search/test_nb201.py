"""The NAS-Bench-201 objective: table lookups, the noisy single-seed answer, the exact random
search yardstick, bad input; and one `search run` of an nb201 study end to end."""

from __future__ import annotations

import itertools

import numpy as np
import optuna
import pytest

from search import _nb201 as nb
from spaces import CellFamily, CellGenome, StackFamily

BEST_CIFAR10 = "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|skip_connect~0|nor_conv_3x3~1|nor_conv_1x1~2|"


def test_table_has_every_cell_of_every_dataset() -> None:
    for dataset in nb.DATASETS:
        t = nb.table(dataset)
        assert len(t.keys) == 5**6 == len(set(t.keys))
        assert set(t.seeds) <= {2, 3}
        assert np.all(t.train_time_s > 0)
    assert nb.table("cifar10") is nb.table("cifar10")  # read once


@pytest.mark.parametrize(
    ("dataset", "best", "key"),
    [("cifar10", 91.61, "333132"), ("cifar100", 73.49, "333133"), ("imagenet16-120", 46.73, "322133")],
)
def test_best_cell_per_dataset(dataset: str, best: float, key: str) -> None:
    assert nb.best_mean_accuracy(dataset) == pytest.approx(best, abs=0.005)
    assert nb.mean_accuracy(key, dataset) == nb.best_mean_accuracy(dataset)


def test_genome_string_and_key_name_the_same_cell() -> None:
    genome = CellGenome.from_nb201_string(BEST_CIFAR10)
    assert nb.table_key(genome) == nb.table_key(BEST_CIFAR10) == "333132"
    assert nb.mean_accuracy(genome, "cifar10") == pytest.approx(91.6067, abs=1e-3)
    # Edge order 0->1, 0->2, 1->2, 0->3, 1->3, 2->3; digits index spaces.NB201_OPS.
    only_skip_03 = CellGenome(nodes=4, edges=("none",) * 3 + ("skip_connect", "none", "none"))
    assert nb.table_key(only_skip_03) == "000100"


@pytest.mark.parametrize(
    ("dataset", "n", "expected"),
    [("cifar10", 10, 89.97), ("cifar10", 20, 90.37), ("cifar10", 50, 90.80), ("cifar10", 100, 91.02),
     ("cifar10", 500, 91.32), ("cifar100", 100, 71.43), ("imagenet16-120", 100, 45.35)],
)
def test_random_search_expectation_matches_the_published_figures(dataset: str, n: int, expected: float) -> None:
    assert nb.random_search_expectation(dataset, n) == pytest.approx(expected, abs=0.005)


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


def test_noise_seed_picks_different_training_seeds() -> None:
    genome = CellGenome.from_nb201_string(BEST_CIFAR10)
    answers = [nb.evaluate({"genome": genome}, dataset="cifar10", noise_seed=s) for s in range(40)]
    seeds = {a["user_attrs"]["nb201_seed"] for a in answers}
    values = {a["values"]["val_accuracy"] for a in answers}
    assert seeds == {0, 1, 2} and len(values) == 3


def test_every_genome_the_cell_family_makes_is_in_the_table() -> None:
    family = CellFamily()
    for edges in itertools.islice(itertools.product(family.ops, repeat=6), 0, None, 97):
        genome = CellGenome(nodes=4, edges=family.repair(edges))
        out = nb.evaluate({"genome": genome}, dataset="imagenet16-120", noise_seed=1)
        assert 0 < out["values"]["val_accuracy"] < 100


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


def test_bad_arch_and_n_are_errors() -> None:
    with pytest.raises(ValueError, match="arch: not a NAS-Bench-201 cell"):
        nb.mean_accuracy("|conv~0|", "cifar10")
    with pytest.raises(ValueError, match="n: needs at least one evaluation"):
        nb.random_search_expectation("cifar10", 0)
