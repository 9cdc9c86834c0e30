"""The architecture map (``search report``'s 2-D map of the evaluated genomes): one point per
complete trial, the best a star, transferred trials diamonds, equal networks on one point."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

import spaces
from search.analysis._figures import study_panels
from search.analysis._map import map_figure, map_panel, project
from tests.search.test_report import make_study

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def _points(fig: object) -> dict[str, list[list[object]]]:
    """Trace name -> the customdata rows (trial number, value, label, transferred note)."""
    return {t.name: [list(row) for row in t.customdata] for t in fig.data}  # type: ignore[attr-defined]


def _complete(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(states=(TrialState.COMPLETE,))


@pytest.mark.parametrize("family", ["cell", "macro", "stack", None])
def test_one_point_per_complete_trial_and_the_best_is_a_star(
    tmp_path: Path, family: str | None
) -> None:
    study = make_study(str(tmp_path / "s.journal"), "s", trials=14, family=family, seed=5)
    complete = _complete(study)
    assert 3 <= len(complete) < len(study.trials)  # the median pruner stopped some
    fig = map_figure(study)
    points = _points(fig)
    numbers = [row[0] for rows in points.values() for row in rows]
    assert sorted(numbers) == sorted(t.number for t in complete)
    (best_name,) = [n for n in points if n.startswith("best")]
    assert points[best_name][0][0] == study.best_trial.number
    assert points[best_name][0][1] == pytest.approx(study.best_value)
    star = next(t for t in fig.data if t.name == best_name)
    assert star.marker.symbol == "star" and star.marker.size > 15
    if family is not None:  # hover: the genome summary
        summaries = {t.number: t.user_attrs["genome_summary"] for t in complete}
        for rows in points.values():
            for number, _, label, _ in rows:
                assert label == summaries[number]
    else:
        assert all("lr=" in row[2] for rows in points.values() for row in rows)
    again = map_figure(study)  # deterministic
    for a, b in zip(fig.data, again.data, strict=True):
        np.testing.assert_array_equal(a.x, b.x)
        np.testing.assert_array_equal(a.y, b.y)


def _cell_trial(
    genome: spaces.CellGenome, value: float, **attrs: object
) -> optuna.trial.FrozenTrial:
    family = spaces.CellFamily()
    params = family.to_params(genome) | {"lr": 0.01 + value / 100}
    dists = {k: CategoricalDistribution(family.ops) for k in params if k != "lr"}
    dists["lr"] = FloatDistribution(1e-3, 1.0, log=True)
    return create_trial(
        value=value,
        params=params,
        distributions=dists,
        user_attrs={"genome": genome.to_json(), **attrs},
    )


def test_transferred_trials_are_diamonds_and_equal_networks_share_a_point() -> None:
    rng = np.random.default_rng(1)
    family = spaces.CellFamily()
    genomes = [family.sample(rng) for _ in range(8)]
    # node 1's edge is dead in both: the same network as two raw genomes
    a = spaces.CellGenome(
        nodes=4, edges=("nor_conv_3x3", "none", "none", "skip_connect", "none", "none")
    )
    b = spaces.CellGenome(
        nodes=4, edges=("avg_pool_3x3", "none", "none", "skip_connect", "none", "none")
    )
    assert a.key == b.key and a.to_dict() != b.to_dict()
    study = optuna.create_study(direction="maximize")
    for i, g in enumerate(genomes):
        attrs = {"transferred_from": f"nb201-c10 #{i}"} if i < 3 else {}
        study.add_trial(_cell_trial(g, 50.0 + i, **attrs))
    study.add_trial(_cell_trial(a, 40.0))
    study.add_trial(_cell_trial(b, 40.0))  # same lr (value) too: same embedding
    fig = map_figure(study)
    points = _points(fig)
    assert sorted(row[0] for row in points["transferred"]) == [0, 1, 2]
    assert all("transferred from nb201-c10 #" in row[3] for row in points["transferred"])
    diamonds = next(t for t in fig.data if t.name == "transferred")
    assert diamonds.marker.symbol == "diamond"
    here = next(t for t in fig.data if t.name == "searched here")
    assert here.marker.symbol == "circle" and sorted(r[0] for r in points["searched here"]) == [
        3,
        4,
        5,
        6,
        8,
        9,
    ]
    assert points["best (trial 7)"][0][0] == 7
    xy = {
        row[0]: (x, y) for t in fig.data for row, x, y in zip(t.customdata, t.x, t.y, strict=True)
    }
    assert xy[8] == pytest.approx(xy[9])
    assert len({(round(x, 9), round(y, 9)) for x, y in xy.values()}) == 9  # the others differ


def test_fewer_than_three_complete_trials_leave_a_note() -> None:
    study = optuna.create_study()
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    panel = map_panel(study)
    assert panel.figure is None
    assert panel.note == "a map needs at least 3 complete trials; this study has 2"
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    assert map_panel(study).figure is not None
    assert [p.key for p in study_panels(study)][-1] == "map"


def test_projection_is_the_principal_plane() -> None:
    rng = np.random.default_rng(0)
    t = rng.normal(size=50)
    rows = np.column_stack([t, 2 * t, np.zeros(50), 0.01 * rng.normal(size=50)])
    xy = project(rows)
    # almost all the variance on component 1, which follows t (its sign fixed: positive)
    assert np.corrcoef(xy[:, 0], t)[0, 1] > 0.99
    assert xy[:, 1].std() < 0.2 * xy[:, 0].std()
    np.testing.assert_array_equal(project(np.ones((4, 3))), np.zeros((4, 2)))
