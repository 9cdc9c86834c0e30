"""spaces/_genome.py's small rules, exactly (issue 33): where decisions come from and how they
are read back, constants that are never asked, stable digests, and one-line errors for a genome
table without a family."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import optuna
import pytest

from spaces import CellFamily, MacroFamily, StackFamily, genome_from_json, make_family
from spaces._genome import (
    FAMILIES,
    GenomeFamily,
    ParamsDecisions,
    RngDecisions,
    check_int,
    count,
    genome_from_dict,
    pick,
    put,
    same_choice,
    short_hash,
)

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def test_a_genome_table_without_a_family_is_one_line_not_a_key_error() -> None:
    for data in ({"nodes": 4}, [], "cell"):
        with pytest.raises(ValueError, match=r"^genome: expected a table with a 'family' key, got "):
            genome_from_dict(data)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^genome: expected a table with a 'family' key"):
        genome_from_json(json.dumps({"edges": []}))
    with pytest.raises(ValueError, match=r"^family: unknown genome family 'tree' \(known: \["):
        genome_from_dict({"family": "tree"})
    g = CellFamily().sample(np.random.default_rng(0))
    assert genome_from_dict(g.to_dict()) == g


def test_short_hash_depends_on_every_part_and_is_stable() -> None:
    assert len({short_hash("a", 1), short_hash("a", 2), short_hash("b", 1), short_hash()}) == 4
    # sha1 of repr(('a', 1)): the same in every process (Python's hash() is not)
    assert short_hash("a", 1) == hashlib.sha1(b"('a', 1)").hexdigest()


def test_params_decisions_read_back_exactly_and_name_the_parameter() -> None:
    d = ParamsDecisions({"g.op": "conv", "g.n": 3, "g.flag": True, "g.big": 9, "g.s": "3"})
    assert d.categorical("g.op", ("pool", "conv")) == "conv"
    assert d.integer("g.n", 1, 3) == 3 and d.integer("g.n", 3, 5) == 3
    with pytest.raises(ValueError, match=r"^g.x: missing parameter \(the genome cannot be rebuilt"):
        d.categorical("g.x", ("a",))
    with pytest.raises(ValueError, match=r"^g.op: 'conv' is not one of \['pool'\]$"):
        d.categorical("g.op", ("pool",))
    with pytest.raises(ValueError, match=r"^g.flag: True is not one of \[1, 2\]$"):
        d.categorical("g.flag", (1, 2))  # True == 1, but a bool is no integer choice
    with pytest.raises(ValueError, match=r"^g.flag: expected an integer, got True$"):
        d.integer("g.flag", 0, 2)
    with pytest.raises(ValueError, match=r"^g.s: expected an integer, got '3'$"):
        d.integer("g.s", 0, 5)
    with pytest.raises(ValueError, match=r"^g.big: 9 is out of range \[1, 8\]$"):
        d.integer("g.big", 1, 8)
    with pytest.raises(ValueError, match=r"^g.n: 3 is out of range \[4, 8\]$"):
        d.integer("g.n", 4, 8)
    assert same_choice(1, 1) and not same_choice(True, 1) and not same_choice(1, 2)


def test_constants_are_never_asked_and_never_stored() -> None:
    asked: list[str] = []

    class Recorder:
        def categorical(self, name, choices):  # noqa: ANN001
            asked.append(name)
            return choices[-1]

        def integer(self, name, low, high):  # noqa: ANN001
            asked.append(name)
            return high

    assert pick(Recorder(), "a", ("only",)) == "only"
    assert count(Recorder(), "n", 3, 3) == 3
    assert asked == []
    assert pick(Recorder(), "b", ("x", "y")) == "y" and count(Recorder(), "m", 1, 4) == 4
    assert asked == ["b", "m"]
    params: dict = {}
    put(params, "a", "only", 1)
    put(params, "b", "y", 2)
    assert params == {"b": "y"}


def test_random_decisions_cover_both_ends_of_a_range() -> None:
    rng = RngDecisions(np.random.default_rng(0))
    values = {rng.integer("n", 2, 4) for _ in range(200)}
    assert values == {2, 3, 4}
    assert {rng.categorical("c", ("a", "b", "c")) for _ in range(200)} == {"a", "b", "c"}


def test_trial_decisions_and_params_give_the_same_genome_under_a_prefix() -> None:
    family = CellFamily(nodes=3)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    trial = study.ask()
    g = family.suggest(trial, prefix="arch")
    assert all(k.startswith("arch.") for k in trial.params)
    assert family.from_params(trial.params, prefix="arch") == g
    assert family.to_params(g, prefix="arch") == trial.params


def test_families_register_by_name_and_options_are_checked() -> None:
    assert set(FAMILIES) == {"cell", "macro", "stack"}
    assert all(issubclass(c, GenomeFamily) and c.name == n for n, c in FAMILIES.items())
    with pytest.raises(ValueError, match=r"^width: unknown key for a cell family \(known: \["):
        make_family("cell", width=3)
    assert make_family("cell", nodes=3).nodes == 3
    assert CellFamily().values_to_check() == []


def _sorted_pairs(pairs: list[tuple[str, object]]) -> dict:
    keys = [k for k, _ in pairs]
    assert keys == sorted(keys), keys
    return dict(pairs)


def test_the_json_a_key_hashes_is_compact_with_sorted_keys() -> None:
    # the key (stored with each trial) hashes this text: another process or version must write
    # the same bytes, so the form is fixed: keys sorted at every level, no spaces
    rng = np.random.default_rng(0)
    for family in (CellFamily(), MacroFamily(max_nodes=4), StackFamily(max_conv_layers=1)):
        g = family.sample(rng)
        text = g.to_json()
        assert " " not in text and "\n" not in text
        assert json.loads(text, object_pairs_hook=_sorted_pairs) == g.to_dict()


def test_different_genomes_hash_apart_and_equal_ones_together() -> None:
    rng = np.random.default_rng(1)
    genomes = [MacroFamily(max_nodes=5).sample(rng) for _ in range(40)]
    assert len({hash(g) for g in genomes}) == len(set(genomes)) > 20
    assert all(hash(g) == hash(MacroFamily(max_nodes=5).from_params(
        MacroFamily(max_nodes=5).to_params(g))) for g in genomes)


def test_a_genome_of_another_family_is_refused_by_name() -> None:
    cell = CellFamily().sample(np.random.default_rng(0))
    with pytest.raises(ValueError, match="^genome: a cell genome is not a member of a macro fam"):
        MacroFamily().check(cell)


def test_integer_options_take_both_ends_of_their_range() -> None:
    assert check_int("nodes", 2, 2, 8) == 2 and check_int("nodes", 8, 2, 8) == 8
    assert CellFamily(nodes=8).nodes == 8
    assert MacroFamily(max_nodes=16, max_inputs=4).max_inputs == 4
    for bad in (1, 9):
        with pytest.raises(ValueError, match=rf"^nodes: {bad} is out of range \[2, 8\]"):
            check_int("nodes", bad, 2, 8)
