"""A cell genome's exact rules: each refusal word for word (the key it names, the ops it lists),
NAS-Bench-201 strings that name the wrong inputs or carry a stray ``~``, and what the family
asks, records and repairs."""

from __future__ import annotations

import re

import pytest

from spaces import CellFamily, CellGenome

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

KNOWN = "['avg_pool_3x3', 'max_pool_3x3', 'none', 'nor_conv_1x1', 'nor_conv_3x3', 'skip_connect']"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: CellGenome(nodes=9, edges=("skip_connect",)), "nodes: 9 is out of range [2, 8]"),
        (
            lambda: CellGenome(nodes=True, edges=("skip_connect",)),
            "nodes: expected an integer, got True",
        ),
        (
            lambda: CellGenome(nodes=2, edges="skip_connect"),
            "edges: expected a list of op names, got 'skip_connect'",
        ),
        (lambda: CellGenome(nodes=2, edges=None), "edges: expected a list of op names, got None"),
        (
            lambda: CellGenome(nodes=2, edges=("conv",)),
            f"edges: unknown op 'conv' (known: {KNOWN})",
        ),
    ],
)
def test_a_cell_genome_s_refusals_word_for_word(make, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        make()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # the right number of inputs, but not 0..j-1 in order
        ("|skip_connect~1|", "nb201 string: node 1 must list inputs 0..0, got '|skip_connect~1|'"),
        (
            "|skip_connect~0|+|none~1|nor_conv_3x3~0|",
            "nb201 string: node 2 must list inputs 0..1, got '|none~1|nor_conv_3x3~0|'",
        ),
        # an input number followed by another '~': not an input number
        (
            "|skip_connect~0~0|",
            "nb201 string: node 1 must list inputs 0..0, got '|skip_connect~0~0|'",
        ),
        # too few inputs for node 3
        (
            "|skip_connect~0|+|none~0|none~1|+|none~0|skip_connect~1|",
            "nb201 string: node 3 must list inputs 0..2, got '|none~0|skip_connect~1|'",
        ),
    ],
)
def test_a_nb201_string_that_names_the_wrong_inputs_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        CellGenome.from_nb201_string(text)


def test_a_family_keeps_its_own_copy_of_the_ops() -> None:
    ops = ["none", "skip_connect", "nor_conv_3x3"]
    family = CellFamily(nodes=3, ops=ops)
    ops[1] = "max_pool_3x3"  # the caller's list changes later
    assert family.ops == ("none", "skip_connect", "nor_conv_3x3")
    assert family.usable_ops == ("skip_connect", "nor_conv_3x3")


def test_a_family_s_refusals_word_for_word() -> None:
    with pytest.raises(ValueError) as info:
        CellFamily(ops=("none",))
    assert str(info.value) == (
        "ops: ['none'] has no usable op (every cell would be empty); add one of "
        "['avg_pool_3x3', 'max_pool_3x3', 'nor_conv_1x1', 'nor_conv_3x3', 'skip_connect']"
    )
    family = CellFamily(nodes=3, ops=("none", "skip_connect"))
    with pytest.raises(ValueError) as info:
        family.check(CellGenome(nodes=3, edges=("skip_connect", "nor_conv_3x3", "none")))
    assert str(info.value) == (
        "genome: op 'nor_conv_3x3' is not in the family's ops ['none', 'skip_connect']"
    )
