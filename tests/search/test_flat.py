"""The flat tables as an objective (``objective = "flat:kc1"``) and their yardstick: normalised
regret, with random search's expected best computed exactly by order statistics."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from search.simulated import _flat

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

# Three configurations, two training seeds each, minimised: seed means A 3, B 2, C 5.
TINY = _flat.Table(
    dataset="tiny", metric="val_loss", direction="minimize", names=("x",),
    choices=((1, 2, 3),), rows={"0": 0, "1": 1, "2": 2},
    value=np.array([[1.0, 5.0], [2.0, 2.0], [4.0, 6.0]]), train_time_s=np.ones((3, 2)),
)


def test_random_search_expected_best_on_a_table_computed_by_hand() -> None:
    # Best seed mean of 2 uniform draws: 2 unless B is missed (P 4/9); then 3 unless both are C.
    # 2 * 5/9 + 3 * 3/9 + 5 * 1/9 = 24/9.
    assert _flat.random_best(TINY, 2) == pytest.approx(24 / 9)
    # Noisy: each draw sees one seed, the incumbent is the lowest observed (1, 2, 2, 4, 5, 6 with
    # seed means 3, 2, 2, 5, 3, 5): P(min = 1) = 11/36, P(min = 2) = 16/36, then 5, 3, 1 / 36.
    assert _flat.random_best(TINY, 2, noisy=True) == pytest.approx(
        (11 * 3 + 16 * 2 + 5 * 5 + 3 * 3 + 1 * 5) / 36)
    assert _flat.random_best(TINY, 1) == pytest.approx(10 / 3)  # the plain mean
    assert TINY.best == 2.0
    # Normalised regret of an incumbent with seed mean 3: (3 - 2) / (24/9 - 2) = 1.5.
    assert _flat.regret(3.0, TINY.best, _flat.random_best(TINY, 2)) == pytest.approx(1.5)


def test_maximised_tables_order_the_other_way() -> None:
    flipped = dataclasses.replace(TINY, direction="maximize", value=-TINY.value)
    assert flipped.best == -2.0
    assert _flat.random_best(flipped, 2) == pytest.approx(-24 / 9)


def test_a_configuration_is_answered_by_one_training_seed_of_its_row() -> None:
    t = _flat.table("kc1")
    params = {"alpha": 0, "batch_size": 9, "depth": 2, "learning_rate_init": 5, "width": 9}
    key = _flat.table_key(params, "kc1")
    assert _flat.decode(key, "kc1") == {"alpha": 1e-8, "batch_size": 256, "depth": 3,
                                        "learning_rate_init": 5.9948424e-3, "width": 1024}
    seen = {_flat.evaluate(params, dataset="kc1", noise_seed=s)["values"]["val_acc"]
            for s in range(40)}
    assert seen <= set(t.value[t.rows[key]]) and len(seen) > 1  # one seed each, not the mean
    out = _flat.evaluate(params, dataset="kc1", noise_seed=3)
    assert out["user_attrs"]["flat_seed_mean"] == pytest.approx(t.value[t.rows[key]].mean())
    assert _flat.normalised_regret(t.best, "kc1") == 0.0
    assert _flat.normalised_regret(_flat.random_mean("kc1"), "kc1") == pytest.approx(1.0)


@pytest.mark.parametrize(("params", "message"), [
    ({"alpha": 10}, r"^alpha: expected an index 0\.\.9"),
    ({"alpha": 0}, r"^batch_size: the flat table 'kc1' needs it"),
])
def test_a_value_off_the_table_is_a_one_line_error_naming_it(params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        _flat.table_key(params, "kc1")
    assert "\n" not in str(err.value)


def test_an_unknown_table_names_the_known_ones() -> None:
    from search.backends._objectives import check_objective

    with pytest.raises(ValueError, match=r"unknown flat table 'kc2' \(known: \['naval_propulsion'"):
        check_objective("flat:kc2")


def test_a_seeded_share_of_observations_are_a_diverged_runs() -> None:
    params = {"alpha": 0, "batch_size": 9, "depth": 2, "learning_rate_init": 5, "width": 9}
    t = _flat.table("kc1")
    bad = _flat.outlier("kc1")
    median = float(np.median(t.mean))
    assert bad == pytest.approx(t.best - 10 * (t.best - median)) and bad < median  # maximised
    seen = [_flat.evaluate(params, dataset="kc1,outliers=0.05", noise_seed=s)["values"]["val_acc"]
            for s in range(2000)]
    share = sum(v == bad for v in seen) / len(seen)
    assert 0.035 < share < 0.065, share
    again = [_flat.evaluate(params, dataset="kc1,outliers=0.05", noise_seed=s)["values"]
             ["val_acc"] for s in range(200)]
    assert again == seen[:200]  # seeded: the same observations each time
    clean = [_flat.evaluate(params, dataset="kc1", noise_seed=s)["values"]["val_acc"]
             for s in range(200)]
    assert [v for v, c in zip(seen, clean, strict=False) if v != bad] == [
        c for v, c in zip(seen, clean, strict=False) if v != bad]  # the rest untouched
    for name in ("kc1,outliers=2", "kc1,noise=0.1", "kc1,outliers=x"):
        with pytest.raises(ValueError, match="expected outliers=SHARE"):
            _flat.check_name(name)
