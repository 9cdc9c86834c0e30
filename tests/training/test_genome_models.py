"""Every genome builds a network that runs forward and backward on 1-D signals, images and
vectors; parameter counts and FLOPs are exact for a hand-counted network."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spaces import (
    CellGenome,
    Genome,
    GenomeFamily,
    Layer,
    MacroGenome,
    MacroNode,
    StackGenome,
)
from tests.spaces.test_genome_families import _permuted_macro, families
from training.models._genome import ACTIVATIONS, build_genome_model, model_cost

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

# mnist1d, digits, 28x28 images (kept small here: 12x12), 2-channel signals.
SHAPES = [(40,), (1, 8, 8), (1, 12, 12), (2, 10)]


def _forward_backward(genome: Genome, shape: tuple[int, ...], batch: int = 3) -> None:
    torch.manual_seed(0)
    model = build_genome_model(genome, shape, 5, channels=4)
    x = torch.randn(batch, int(np.prod(shape)))  # flat rows, as the trainer holds them
    out = model(x)
    assert out.shape == (batch, 5) and torch.isfinite(out).all()
    torch.nn.functional.cross_entropy(out, torch.arange(batch) % 5).backward()
    grads = [p.grad for p in model.parameters()]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    cost = model_cost(model, shape)
    assert cost.n_params == sum(p.numel() for p in model.parameters()) and cost.flops > 0


@settings(deadline=None, database=None, max_examples=25)
@given(families, st.integers(0, 2**32 - 1), st.sampled_from(SHAPES))
def test_every_genome_builds_and_trains_a_step(
    family: GenomeFamily, seed: int, shape: tuple[int, ...]
) -> None:
    _forward_backward(family.sample(np.random.default_rng(seed)), shape)


def test_a_one_sample_batch_trains_even_where_the_map_shrinks_to_one_pixel() -> None:
    pool = MacroNode(op="max_pool", inputs=(0,), kernel=3)
    genome = MacroGenome(
        nodes=(
            pool,
            MacroNode(op="max_pool", inputs=(1,), kernel=3),
            MacroNode(op="max_pool", inputs=(2,), kernel=3),
            MacroNode(
                op="conv", inputs=(3, 0), width=4, kernel=3
            ),  # joins a 1x1 map with the 8x8 input
        )
    )
    _forward_backward(genome, (1, 8, 8), batch=1)


def test_hand_counted_stack_cost() -> None:
    genome = StackGenome(
        layers=(
            Layer(kind="conv", width=4, kernel=3, activation="tanh"),
            Layer(kind="dense", width=10, activation="gelu", dropout=0.5),
        )
    )
    model = build_genome_model(genome, (1, 8, 8), 10)
    cost = model_cost(model, (1, 8, 8))
    # conv: 64 positions x 4 channels x 9 taps; dense: 256 x 10; classifier: 10 x 10
    assert cost.flops == 64 * 4 * 9 + 256 * 10 + 10 * 10
    assert cost.n_params == (4 * 9 + 4) + (256 * 10 + 10) + (10 * 10 + 10)
    assert model.training  # model_cost restores the mode


def test_an_mlp_stack_matches_the_plain_mlp_builder_in_size() -> None:
    from training.models._mlp import build_mlp

    genome = StackGenome(layers=(Layer(kind="dense", width=32), Layer(kind="dense", width=32)))
    ours = build_genome_model(genome, (1, 8, 8), 10)
    plain = build_mlp(64, 10, hidden=32, layers=2, activation="relu", dropout=0.0)
    assert model_cost(ours, (1, 8, 8)) == model_cost(plain, (64,))


def test_cells_use_convolutions_of_the_input_dimension() -> None:
    cell = CellGenome.from_nb201_string(
        "|nor_conv_3x3~0|+|none~0|none~1|+|skip_connect~0|none~1|none~2|"
    )
    convs_1d = [
        m for m in build_genome_model(cell, (40,), 10).modules() if isinstance(m, torch.nn.Conv1d)
    ]
    convs_2d = [
        m
        for m in build_genome_model(cell, (1, 8, 8), 10).modules()
        if isinstance(m, torch.nn.Conv2d)
    ]
    assert convs_1d and convs_2d
    none_conv = CellGenome.from_nb201_string(
        "|nor_conv_3x3~0|+|none~0|none~1|+|skip_connect~0|none~1|avg_pool_3x3~2|"
    )
    # The conv edge 0 -> 1 feeds nothing that reaches the output: the builder gives it no weights.
    assert model_cost(build_genome_model(none_conv, (40,), 10), (40,)) == model_cost(
        build_genome_model(
            CellGenome.from_nb201_string("|none~0|+|none~0|none~1|+|skip_connect~0|none~1|none~2|"),
            (40,),
            10,
        ),
        (40,),
    )


def test_isomorphic_macro_genomes_build_networks_of_the_same_cost() -> None:
    conv = lambda w, k, *i: MacroNode(op="conv", inputs=i, width=w, kernel=k)  # noqa: E731
    genome = MacroGenome(nodes=(conv(8, 3, 0), conv(4, 5, 0), conv(6, 1, 1, 2), conv(8, 3, 0, 3)))
    copy = _permuted_macro(genome, np.random.default_rng(1))
    a, b = (model_cost(build_genome_model(g, (40,), 10), (40,)) for g in (genome, copy))
    assert a == b


def test_a_stack_cnn_learns_digits() -> None:
    from training import load_dataset

    data = load_dataset("digits", 0.2)
    genome = StackGenome(
        layers=(Layer(kind="conv", width=8, kernel=3, pool=True), Layer(kind="dense", width=32))
    )
    torch.manual_seed(0)
    model = build_genome_model(genome, data.x_train.shape[1:], data.n_classes)
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    for _ in range(30):  # plain full-batch gradient descent (a torch.optim import costs ~2 s)
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.2 * p.grad
    model.eval()
    accuracy = (model(torch.from_numpy(data.x_val)).argmax(1).numpy() == data.y_val).mean()
    assert accuracy > 0.6  # chance is 0.1


def test_every_stack_activation_has_a_module() -> None:
    from spaces import ACTIVATIONS as NAMES

    assert set(NAMES) == set(ACTIVATIONS)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"input_shape": (1, 2, 3, 4)},
            r"input_shape: expected \(D,\), \(C, L\) or \(C, H, W\), got \(1, 2, 3, 4\)",
        ),
        ({"channels": 0}, "channels: expected an integer >= 1, got 0"),
        ({"n_classes": 0}, "n_classes: expected an integer >= 1, got 0"),
    ],
)
def test_bad_builder_input_raises_one_line(kwargs: dict, message: str) -> None:
    genome = StackGenome(layers=())
    args = {"genome": genome, "input_shape": (40,), "n_classes": 10} | kwargs
    with pytest.raises(ValueError, match=message) as info:
        build_genome_model(**args)
    assert "\n" not in str(info.value)
