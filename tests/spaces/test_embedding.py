"""SpaceEmbedding: fixed length, canonical (isomorphic genomes embed alike), discriminating
(different networks usually embed differently), scalars on [0, 1] / one-hot, clear errors."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spaces import (
    Categorical,
    CellFamily,
    CellGenome,
    Float,
    GenomeFamily,
    Int,
    MacroFamily,
    Space,
    SpaceEmbedding,
    StackFamily,
    mutate,
)
from spaces._embedding import DEFAULT_KIND, KINDS
from tests.spaces.test_genome_families import (
    _permuted_cell,
    _permuted_macro,
    cell_families,
    families,
    macro_families,
    seeds,
)

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

SETTINGS = settings(deadline=None, database=None, max_examples=60)
kinds = st.sampled_from(KINDS)


def _space(family: GenomeFamily) -> Space:
    return Space({"lr": Float(low=1e-4, high=1e-1, log=True), "genome": family})


def _params(family: GenomeFamily, genome: object, lr: float = 0.01) -> dict[str, object]:
    return {"lr": lr, **family.to_params(genome, prefix="genome")}  # type: ignore[arg-type]


@SETTINGS
@given(families, seeds, kinds)
def test_fixed_length_float64_for_every_family(family: GenomeFamily, seed: int, kind: str) -> None:
    embed = SpaceEmbedding(_space(family), kind=kind)
    rng = np.random.default_rng(seed)
    genomes = [family.sample(rng) for _ in range(4)]
    genomes += [mutate(family, g, rng) for g in genomes]
    rows = embed.many([_params(family, g) for g in genomes])
    assert rows.shape == (8, embed.dim) and rows.dtype == np.float64
    assert len(embed.names) == embed.dim == len(set(embed.names))
    assert np.isfinite(rows).all()
    for g, row in zip(genomes, rows, strict=True):
        np.testing.assert_array_equal(embed.genome_vector(g), row[: len(embed.encoder.names)])


@SETTINGS
@given(st.one_of(cell_families(), macro_families()), seeds, seeds, kinds)
def test_isomorphic_genomes_embed_identically(
    family: GenomeFamily, seed: int, perm_seed: int, kind: str
) -> None:
    genome = family.sample(np.random.default_rng(seed))
    permute = _permuted_cell if isinstance(genome, CellGenome) else _permuted_macro
    copy = permute(genome, np.random.default_rng(perm_seed))  # type: ignore[arg-type]
    assert copy.key == genome.key
    # two embeddings, so neither vector comes from the other's memo
    one, two = (SpaceEmbedding(_space(family), kind=kind) for _ in range(2))
    np.testing.assert_array_equal(one(_params(family, copy)), two(_params(family, genome)))


@SETTINGS
@given(families, seeds, kinds)
def test_equal_keys_embed_equal_across_mutations(
    family: GenomeFamily, seed: int, kind: str
) -> None:
    """Mutations of one parent: children with the parent's key (changes to dead parts) embed as
    the parent; the vector depends only on the key."""
    rng = np.random.default_rng(seed)
    by_key: dict[str, np.ndarray] = {}
    parent = family.sample(rng)
    for _ in range(12):
        child = mutate(family, parent, rng) if rng.random() < 0.7 else family.sample(rng)
        vec = SpaceEmbedding(_space(family), kind=kind).genome_vector(child)  # a fresh memo
        if child.key in by_key:
            np.testing.assert_array_equal(by_key[child.key], vec)
        by_key[child.key] = vec
        parent = child


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "family",
    [CellFamily(), MacroFamily(max_nodes=5), StackFamily(max_conv_layers=2, dropouts=(0.0, 0.3))],
    ids=["cell", "macro", "stack"],
)
def test_different_networks_usually_embed_differently(family: GenomeFamily, kind: str) -> None:
    embed = SpaceEmbedding(_space(family), kind=kind)
    rng = np.random.default_rng(7)
    vectors: dict[str, bytes] = {}
    for _ in range(300):
        g = family.sample(rng)
        vectors[g.key] = embed.genome_vector(g).tobytes()
    distinct = len(set(vectors.values())) / len(vectors)
    # one-hot of the canonical form is injective, WL separates these; paths merge a few macros
    exact = "onehot" in kind or "wl" in kind or family.name == "stack"
    assert distinct == 1.0 if exact else distinct >= 0.85


def test_nb201_default_kind_separates_nearly_every_network() -> None:
    family = CellFamily()
    embed = SpaceEmbedding(Space({"genome": family}))
    assert embed.kind == DEFAULT_KIND
    rng = np.random.default_rng(0)
    vectors = {}
    for _ in range(2000):
        g = family.sample(rng)
        vectors[g.key] = embed.genome_vector(g).tobytes()
    assert len(set(vectors.values())) >= 0.97 * len(vectors)


def test_scalars_map_to_unit_interval_and_one_hot_with_absent_marks() -> None:
    space = Space(
        {
            "lr": Float(low=1e-4, high=1e-0, log=True),
            "batch": Int(low=16, high=80, step=16),
            "algorithm": Categorical(("sync", "asgd")),
            "send_every": Int(low=1, high=9),
        },
        when={"send_every": {"algorithm": "asgd"}},
    )
    embed = SpaceEmbedding(space)
    assert embed.names == (
        "lr",
        "batch",
        "algorithm=sync",
        "algorithm=asgd",
        "send_every",
        "send_every:absent",
    )
    row = embed({"lr": 1e-2, "batch": 48, "algorithm": "asgd", "send_every": 3})
    np.testing.assert_allclose(row, [0.5, 0.5, 0.0, 1.0, 0.25, 0.0])
    inactive = embed({"lr": 1e-4, "batch": 16, "algorithm": "sync", "send_every": 9})
    np.testing.assert_allclose(inactive, [0.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    missing = embed({"lr": 10.0})  # clipped; missing unconditional -> 0.5, categorical -> zeros
    np.testing.assert_allclose(missing, [1.0, 0.5, 0.0, 0.0, 0.0, 1.0])


def test_reads_params_as_optuna_stores_them() -> None:
    space = Space({"lr": Float(low=1e-3, high=1e-1, log=True), "genome": CellFamily()})
    embed = SpaceEmbedding(space, kind="onehot")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    rows = []
    for _ in range(5):
        trial = study.ask()
        values = space.suggest(trial)
        study.tell(trial, 0.0)
        rows.append((trial.params, values))
    for params, values in rows:
        vec = embed(params)
        np.testing.assert_array_equal(vec[:-1], embed.genome_vector(values["genome"]))
        assert vec[-1] == pytest.approx(np.log(params["lr"] / 1e-3) / np.log(100))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: SpaceEmbedding(_space(CellFamily()), kind="paths"), "kind: unknown encoding"),
        (lambda: SpaceEmbedding(_space(CellFamily()), kind="wl+wl"), "names an encoding twice"),
        (lambda: SpaceEmbedding(_space(CellFamily()), kind="wl0"), "unknown encoding 'wl0'"),
        (lambda: SpaceEmbedding(_space(CellFamily()), kind="wl1+wl3"), "names an encoding twice"),
        (lambda: SpaceEmbedding({"lr": Float(low=0, high=1)}), "space: expected"),  # type: ignore[arg-type]
        (lambda: SpaceEmbedding(_space(CellFamily()))({"lr": 0.1}), "genome.0->1: missing"),
        (
            lambda: SpaceEmbedding(Space({"o": Categorical(("a", "b"))}))({"o": "c"}),
            "o: 'c' is not one of",
        ),
        (lambda: SpaceEmbedding(Space({"x": Float(low=0, high=1)}))({"x": "a"}), "x: expected a"),
        (
            lambda: SpaceEmbedding(Space({"x": Float(low=0, high=1)})).genome_vector(
                CellFamily().sample(np.random.default_rng(0))
            ),
            "genome: the space has no genome",
        ),
    ],
)
def test_bad_input_is_one_clear_error(make: object, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        make()  # type: ignore[operator]


def test_remembered_vectors_are_copies() -> None:
    embed = SpaceEmbedding(_space(CellFamily()), kind="onehot")
    genome = CellFamily().sample(np.random.default_rng(0))
    first = embed.genome_vector(genome)
    first[:] = -1.0
    assert (embed.genome_vector(genome) >= 0).all()
