"""The embedding's layout, feature by feature, on a space whose genome is not called "genome"
and does not come first (issue 33: every test called it "genome", so ``genome_of`` could ignore
the real name and ``names`` could drift from the vector)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spaces import Categorical, CellFamily, Float, Int, MacroFamily, Space, SpaceEmbedding
from spaces._embedding import unit

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

FAMILY = CellFamily()
SPACE = Space(
    {
        "lr": Float(low=1e-3, high=1e-1, log=True),
        "arch": FAMILY,
        "opt": Categorical(("sgd", "adam")),
        "momentum": Float(low=0.0, high=0.8),
        "depth": Int(low=2, high=6),
    },
    when={"momentum": {"opt": "sgd"}},
)


def _params(seed: int = 0, **scalars: object) -> dict:
    genome = FAMILY.sample(np.random.default_rng(seed))
    return {**FAMILY.to_params(genome, prefix="arch"), **scalars}, genome


def test_names_match_the_vector_feature_by_feature() -> None:
    embed = SpaceEmbedding(SPACE, kind="onehot")
    params, genome = _params(lr=0.01, opt="sgd", momentum=0.2, depth=6)
    vector = embed(params)
    assert vector.shape == (embed.dim,) and len(embed.names) == embed.dim
    g = len(embed.genome_vector(genome))
    assert all(n.startswith("arch.") for n in embed.names[:g])  # the genome first, its own name
    np.testing.assert_array_equal(vector[:g], embed.genome_vector(genome))
    assert embed.names[g:] == ("lr", "opt=sgd", "opt=adam", "momentum", "momentum:absent",
                               "depth")
    feature = dict(zip(embed.names[g:], vector[g:], strict=True))
    assert feature == {"lr": pytest.approx(0.5), "opt=sgd": 1.0, "opt=adam": 0.0,
                       "momentum": pytest.approx(0.25), "momentum:absent": 0.0, "depth": 1.0}
    np.testing.assert_array_equal(embed.scalars(params), vector[g:])


def test_inactive_and_missing_values_encode_as_documented() -> None:
    embed = SpaceEmbedding(SPACE, kind="onehot")
    params, _ = _params(lr=0.001, opt="adam", momentum=0.2)  # momentum inactive; depth missing
    feature = dict(zip(embed.names, embed(params), strict=True))
    assert feature["lr"] == 0.0 and feature["opt=adam"] == 1.0 and feature["opt=sgd"] == 0.0
    assert feature["momentum"] == 0.0 and feature["momentum:absent"] == 1.0
    assert feature["depth"] == 0.5  # an unconditional value that is missing: the middle
    no_opt, _ = _params(lr=0.1)
    feature = dict(zip(embed.names, embed(no_opt), strict=True))
    assert feature["opt=sgd"] == feature["opt=adam"] == 0.0 and feature["lr"] == 1.0


def test_genome_of_reads_the_dimensions_own_name() -> None:
    embed = SpaceEmbedding(SPACE)
    params, genome = _params(3, lr=0.01, opt="adam")
    assert embed.genome_of(params) == genome
    assert embed.genome_name == "arch"
    renamed = {k.replace("arch.", "genome.", 1): v for k, v in params.items()}
    with pytest.raises(ValueError, match=r"arch"):
        embed(renamed)


def test_unit_maps_the_range_on_its_scale_and_clips() -> None:
    log = Float(low=1e-3, high=1e-1, log=True)
    assert unit(log, 1e-2, "lr") == pytest.approx(0.5)
    assert unit(log, 1e-5, "lr") == 0.0 and unit(log, 1.0, "lr") == 1.0
    lin = Float(low=-1.0, high=3.0)
    assert unit(lin, 0.0, "x") == pytest.approx(0.25)
    assert unit(lin, -5.0, "x") == 0.0 and unit(lin, 9.0, "x") == 1.0
    assert unit(Int(low=4, high=4), 4, "n") == 0.0
    assert unit(Int(low=1, high=5), np.int64(2), "n") == pytest.approx(0.25)
    for bad in (True, "3", None):
        with pytest.raises(ValueError, match=rf"^x: expected a number, got {bad!r}$"):
            unit(lin, bad, "x")
    assert not math.isnan(unit(log, 0.0, "lr"))  # below a log range's low: clipped, no log(0)


def test_errors_name_the_dimension() -> None:
    with pytest.raises(ValueError, match="^b: a space can embed one genome family, not two$"):
        SpaceEmbedding(Space({"a": FAMILY, "b": MacroFamily()}))
    scalars_only = SpaceEmbedding(Space({"lr": Float(low=0.0, high=1.0)}))
    with pytest.raises(ValueError, match="^genome: the space has no genome family to embed$"):
        scalars_only.genome_vector(FAMILY.sample(np.random.default_rng(0)))
    embed = SpaceEmbedding(SPACE)
    params, _ = _params(lr=0.01, opt="rmsprop")
    with pytest.raises(ValueError, match=r"^opt: 'rmsprop' is not one of \['sgd', 'adam'\]$"):
        embed(params)
    with pytest.raises(TypeError, match="^space: expected a spaces.Space, got dict$"):
        SpaceEmbedding({"lr": Float(low=0.0, high=1.0)})  # type: ignore[arg-type]


class Seed:
    """A dimension of the protocol (a space takes any) that the embedding has no encoding for."""

    def suggest(self, trial: object, name: str) -> int:
        return trial.suggest_int(name, 0, 9)  # type: ignore[attr-defined]

    def values_to_check(self) -> list[int]:
        return [0, 9]


def test_a_dimension_it_cannot_encode_is_named_with_its_type() -> None:
    with pytest.raises(ValueError, match="^seed: cannot embed a Seed dimension$"):
        SpaceEmbedding(Space({"lr": Float(low=0.0, high=1.0), "seed": Seed()}))


def test_scalars_only_and_many_rows() -> None:
    embed = SpaceEmbedding(Space({"lr": Float(low=0.0, high=1.0), "k": Categorical((1, 2))}))
    assert embed.names == ("lr", "k=1", "k=2") and repr(embed) == (
        "SpaceEmbedding(kind='onehot+wl1', dim=3)")
    rows = [{"lr": 0.25, "k": 2}, {"lr": 1.0, "k": 1}]
    np.testing.assert_array_equal(embed.many(rows), [[0.25, 0.0, 1.0], [1.0, 1.0, 0.0]])
    assert embed.many([]).shape == (0, 3)
