"""spaces/_stack.py's rules, exactly (issue 33): what a layer and a stack accept and the one-line
error that names what they refuse, the labels a table prints, the parameters a stack family asks
(names, order, constants left out) and reads back, and which stacks belong to a family."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import optuna
import pytest

from spaces import CellFamily, Layer, StackFamily, StackGenome, genome_from_json, make_family
from spaces._stack import check_dropout
from tests.spaces.rules_helpers import Recorder, refused

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)


def conv(width: int = 16, kernel: int = 3, **kw: Any) -> Layer:
    return Layer(kind="conv", width=width, kernel=kernel, **kw)


def dense(width: int = 32, **kw: Any) -> Layer:
    return Layer(kind="dense", width=width, **kw)


def test_a_layer_refuses_each_bad_field_by_name() -> None:
    with refused("kind: unknown layer kind 'lstm' (known: ['conv', 'dense'])"):
        Layer(kind="lstm", width=8)
    with refused("width: 0 is out of range [1, 4096]"):
        dense(0)
    with refused("width: 4097 is out of range [1, 4096]"):
        dense(4097)
    with refused(
        "activation: unknown activation 'swish' (known: ['relu', 'tanh', 'gelu', 'silu'])"
    ):
        dense(activation="swish")
    with refused("dropout: 1 must be a number in [0, 1)"):
        dense(dropout=1)
    with refused("kernel: expected an integer, got None"):
        Layer(kind="conv", width=8)
    with refused("kernel: 17 is out of range [1, 15]"):
        conv(kernel=17)
    with refused("kernel: 4 must be odd"):
        conv(kernel=4)
    with refused("pool: expected true or false, got 1"):
        conv(pool=1)
    with refused("kernel: a dense layer takes no kernel or pool, got 3, False"):
        dense(kernel=3)
    with refused("kernel: a dense layer takes no kernel or pool, got None, True"):
        dense(pool=True)
    # the edges that are allowed
    assert conv(width=4096, kernel=15).kernel == 15
    assert conv(width=1, kernel=1, pool=True).pool is True
    for activation in ("relu", "tanh", "gelu", "silu"):
        assert dense(activation=activation).activation == activation


def test_dropout_must_be_a_number_in_zero_to_one() -> None:
    for bad in (True, False, "0.1", None, -0.01, 1.0, 1):
        with refused(f"p: {bad!r} must be a number in [0, 1)"):
            check_dropout("p", bad)
    for good in (0, 0.0, 0.5, 0.999):
        check_dropout("p", good)
    layer = dense(dropout=0)
    assert type(layer.dropout) is float and layer.dropout == 0.0
    assert json.dumps(layer.to_dict()) == (
        '{"kind": "dense", "width": 32, "activation": "relu", "dropout": 0.0}'
    )


def test_a_layer_as_a_table_and_back() -> None:
    c = conv(64, 5, pool=True, activation="gelu", dropout=0.25)
    assert c.to_dict() == {
        "kind": "conv",
        "width": 64,
        "activation": "gelu",
        "dropout": 0.25,
        "kernel": 5,
        "pool": True,
    }
    d = dense(128, activation="tanh")
    assert d.to_dict() == {"kind": "dense", "width": 128, "activation": "tanh", "dropout": 0.0}
    for layer in (c, d):
        assert Layer.from_dict(layer.to_dict()) == layer
    with refused("layers: expected a table per layer, got 'dense'"):
        Layer.from_dict("dense")  # type: ignore[arg-type]
    with refused(
        "size: unknown key for a layer "
        "(known: ['activation', 'dropout', 'kernel', 'kind', 'pool', 'width'])"
    ):
        Layer.from_dict({"kind": "dense", "width": 8, "size": 3})


def test_layer_labels() -> None:
    assert conv(16, 3).label() == "conv16k3 relu"
    assert conv(32, 5, pool=True, dropout=0.1, activation="silu").label() == (
        "conv32k5 silu pool drop0.1"
    )
    assert dense(128).label() == "dense128 relu"
    assert dense(64, dropout=0.5, activation="tanh").label() == "dense64 tanh drop0.5"


def test_a_stack_refuses_bad_layers_by_name() -> None:
    with refused("layers: expected a list of layers, got 'dense'"):
        StackGenome(layers="dense")  # type: ignore[arg-type]
    with refused("layers: expected a list of layers, got 3"):
        StackGenome(layers=3)  # type: ignore[arg-type]
    with refused("layers: 25 is out of range [0, 24]"):
        StackGenome(layers=(dense(),) * 25)
    assert len(StackGenome(layers=(conv(),) * 8 + (dense(),) * 16).layers) == 24
    assert StackGenome(layers=[]).layers == ()
    with refused("layers: expected Layer, got {'kind': 'dense'}"):
        StackGenome(layers=({"kind": "dense"},))  # type: ignore[arg-type]
    with refused("layers: conv layer 2 comes after a dense layer"):
        StackGenome(layers=(conv(), dense(), conv()))
    with refused("layers: conv layer 3 comes after a dense layer"):
        StackGenome(layers=(conv(), dense(), dense(), conv()))
    ok = StackGenome(layers=[conv(), conv(), dense(), dense()])
    assert isinstance(ok.layers, tuple)
    assert ok.part("conv") == (conv(), conv()) and ok.part("dense") == (dense(), dense())


def test_a_stack_as_a_table_json_and_summary() -> None:
    g = StackGenome(layers=(conv(16, 3, pool=True), dense(64, dropout=0.1)))
    assert g.to_dict() == {"family": "stack", "layers": [layer.to_dict() for layer in g.layers]}
    back = genome_from_json(g.to_json())
    assert isinstance(back, StackGenome) and back.layers == g.layers
    assert StackGenome.from_dict(g.to_dict()).layers == g.layers
    assert g.canonical() is g
    assert g.summary() == "stack: conv16k3 relu pool | dense64 relu drop0.1 | out"
    assert StackGenome(layers=()).summary() == "stack: out"
    with refused("nodes: unknown key for a stack genome (known: ['family', 'layers'])"):
        StackGenome.from_dict({"family": "stack", "nodes": []})
    with refused("layers: expected a list of layers, got 'dense'"):
        StackGenome.from_dict({"family": "stack", "layers": "dense"})
    with refused("layers: expected a list of layers, got None"):
        StackGenome.from_dict({"family": "stack"})


def test_a_stack_family_refuses_each_option_by_name() -> None:
    with refused("min_dense_layers: 17 is out of range [0, 16]"):
        StackFamily(min_dense_layers=17, max_dense_layers=16)
    with refused("min_dense_layers: 3 must be <= max_dense_layers (2)"):
        StackFamily(min_dense_layers=3, max_dense_layers=2)
    with refused("min_conv_layers: 2 must be <= max_conv_layers (1)"):
        StackFamily(min_conv_layers=2, max_conv_layers=1)
    with refused("channels: 5000 is out of range [1, 4096]"):
        StackFamily(channels=(5000,))
    with refused("kernels: 4 must be odd (so 'same' padding keeps the size)"):
        StackFamily(kernels=(3, 4))
    with refused("kernels: 17 is out of range [1, 15]"):
        StackFamily(kernels=(17,))
    with refused("pools: unknown value 1 (known: [False, True])"):
        StackFamily(pools=(1,))
    with refused("widths: 0 is out of range [1, 4096]"):
        StackFamily(widths=(0,))
    with refused(
        "activations: unknown activation 'swish' (known: ['gelu', 'relu', 'silu', 'tanh'])"
    ):
        StackFamily(activations=("swish",))
    with refused("dropouts: -0.1 must be a number in [0, 1)"):
        StackFamily(dropouts=(-0.1,))
    with refused("dropouts: must not be empty"):
        StackFamily(dropouts=())
    f = StackFamily(
        channels=[np.int64(8)], kernels=[np.int64(3)], widths=[np.int64(4)], dropouts=[0, 0.5]
    )
    assert f.channels == (8,) and type(f.channels[0]) is int
    assert f.kernels == (3,) and type(f.kernels[0]) is int
    assert f.widths == (4,) and type(f.widths[0]) is int
    assert f.dropouts == (0.0, 0.5) and all(type(d) is float for d in f.dropouts)
    assert StackFamily(pools=[True]).pools == (True,)
    assert StackFamily(activations=["tanh"]).activations == ("tanh",)
    assert make_family("stack", max_conv_layers=8, max_dense_layers=16).bounds("dense") == (1, 16)


def test_the_defaults_are_mlps_of_one_to_three_layers() -> None:
    f = StackFamily()
    assert (f.min_conv_layers, f.max_conv_layers) == (0, 0) == f.bounds("conv")
    assert (f.min_dense_layers, f.max_dense_layers) == (1, 3) == f.bounds("dense")
    assert f.layer_choices("dense") == {
        "width": (32, 64, 128, 256),
        "activation": ("relu",),
        "dropout": (0.0,),
    }
    assert f.layer_choices("conv") == {
        "width": (16, 32, 64),
        "kernel": (3, 5),
        "pool": (False, True),
        "activation": ("relu",),
        "dropout": (0.0,),
    }


FAMILY = StackFamily(
    min_conv_layers=1,
    max_conv_layers=2,
    min_dense_layers=0,
    max_dense_layers=2,
    channels=(8, 16),
    kernels=(3,),
    widths=(32, 64),
    activations=("relu", "tanh"),
    dropouts=(0.0,),
)


def test_the_questions_a_stack_family_asks_in_order() -> None:
    rec = Recorder({"p.conv_layers": 2, "p.dense_layers": 1, "p.conv1.width": 8})
    g = FAMILY._decide(rec, "p")
    assert rec.asked == [
        ("p.conv_layers", (1, 2)),
        ("p.conv0.width", (8, 16)),
        ("p.conv0.pool", (False, True)),
        ("p.conv0.activation", ("relu", "tanh")),
        ("p.conv1.width", (8, 16)),
        ("p.conv1.pool", (False, True)),
        ("p.conv1.activation", ("relu", "tanh")),
        ("p.dense_layers", (0, 2)),
        ("p.dense0.width", (32, 64)),
        ("p.dense0.activation", ("relu", "tanh")),
    ]
    assert g.layers == (
        conv(16, 3, pool=True, activation="tanh"),
        conv(8, 3, pool=True, activation="tanh"),
        dense(64, activation="tanh"),
    )
    # a fixed count is not asked
    fixed = StackFamily(min_dense_layers=2, max_dense_layers=2, widths=(8,))
    rec = Recorder({})
    assert fixed._decide(rec, "g").layers == (dense(8), dense(8))
    assert rec.asked == []


def test_to_params_is_what_suggest_asked() -> None:
    g = StackGenome(layers=(conv(16, 3, pool=True), dense(32, activation="tanh")))
    params = FAMILY.to_params(g, prefix="arch")
    assert params == {
        "arch.conv_layers": 1,
        "arch.conv0.width": 16,
        "arch.conv0.pool": True,
        "arch.conv0.activation": "relu",
        "arch.dense_layers": 1,
        "arch.dense0.width": 32,
        "arch.dense0.activation": "tanh",
    }
    assert FAMILY.from_params(params, prefix="arch").layers == g.layers
    assert list(FAMILY.to_params(g)) == [k.replace("arch", "genome") for k in params]
    # through an Optuna trial
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(5):
        trial = study.ask()
        genome = FAMILY.suggest(trial, "s")
        assert FAMILY.to_params(genome, "s") == trial.params
        study.tell(trial, 0.0)
    # fixed counts and single choices are left out
    one = StackFamily(min_dense_layers=1, max_dense_layers=1, widths=(8,))
    assert one.to_params(StackGenome(layers=(dense(8),))) == {}


def test_random_layers_draw_every_choice() -> None:
    rng = np.random.default_rng(0)
    layers = [FAMILY.random_layer(rng, "conv") for _ in range(40)]
    assert {layer.kind for layer in layers} == {"conv"}
    assert {layer.width for layer in layers} == {8, 16}
    assert {layer.pool for layer in layers} == {False, True}
    assert {layer.activation for layer in layers} == {"relu", "tanh"}
    dl = [FAMILY.random_layer(rng, "dense") for _ in range(40)]
    assert {layer.width for layer in dl} == {32, 64} and {d.kind for d in dl} == {"dense"}
    sizes = {
        (len(g.part("conv")), len(g.part("dense")))
        for g in (FAMILY.sample(np.random.default_rng(s)) for s in range(40))
    }
    assert sizes == {(c, d) for c in (1, 2) for d in (0, 1, 2)}


def test_check_says_which_layer_is_not_a_member() -> None:
    ok = StackGenome(layers=(conv(8), conv(16), dense(64), dense(32)))
    FAMILY.check(ok)  # both ends of each count are members
    FAMILY.check(StackGenome(layers=(conv(8),)))
    with refused("genome: 0 conv layers is out of range [1, 2]"):
        FAMILY.check(StackGenome(layers=(dense(32),)))
    with refused("genome: 3 conv layers is out of range [1, 2]"):
        FAMILY.check(StackGenome(layers=(conv(8),) * 3))
    with refused("genome: 3 dense layers is out of range [0, 2]"):
        FAMILY.check(StackGenome(layers=(conv(8),) + (dense(32),) * 3))
    with refused("genome: conv layer 1 width 32 is not one of [8, 16]"):
        FAMILY.check(StackGenome(layers=(conv(8), conv(32))))
    with refused("genome: conv layer 0 kernel 5 is not one of [3]"):
        FAMILY.check(StackGenome(layers=(conv(8, 5),)))
    with refused("genome: dense layer 0 activation 'gelu' is not one of ['relu', 'tanh']"):
        FAMILY.check(StackGenome(layers=(conv(8), dense(32, activation="gelu"))))
    with refused("genome: dense layer 1 dropout 0.5 is not one of [0.0]"):
        FAMILY.check(StackGenome(layers=(conv(8), dense(32), dense(32, dropout=0.5))))
    with refused("genome: conv layer 0 width 32 is not one of [8, 16]"):
        FAMILY.to_params(StackGenome(layers=(conv(32),)))
    cell = CellFamily().sample(np.random.default_rng(0))
    with refused("genome: a cell genome is not a member of a stack family"):
        FAMILY.check(cell)
    with refused("genome: a cell genome is not a member of a stack family"):
        FAMILY.to_params(cell)
