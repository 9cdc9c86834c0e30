"""Pruning during training, in one process: units are really removed (parameters and FLOPs
drop), the optimizer state is sliced with them (never reset), a pruned layer keeps learning,
batch norms are sliced, and the [training] prune table is validated key by key."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError
from torch import nn

from search._errors import StudyError
from search.studyfile import parse_study
from spaces import genome_from_dict
from training._config import TrainConfig
from training.models._genome import build_genome_model, model_cost
from training.pruning._config import PruneConfig
from training.pruning._units import PruneError, UnitPruning, groups, remove_units, resize, widths

STACK = {"family": "stack", "layers": [
    {"kind": "conv", "width": 16, "activation": "relu", "dropout": 0.0, "kernel": 3, "pool": True},
    {"kind": "conv", "width": 16, "activation": "relu", "dropout": 0.0, "kernel": 3, "pool": True},
    {"kind": "dense", "width": 32, "activation": "relu", "dropout": 0.0},
]}


class _Self:  # the communicator of one rank, as the pruner sees it
    size, rank = 1, 0


def _stack() -> nn.Module:
    torch.manual_seed(0)
    return build_genome_model(genome_from_dict(STACK), (1, 8, 8), 10)


def _train(model: nn.Module, opt: torch.optim.Optimizer, steps: int = 3) -> None:
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = torch.randn(16, 64, generator=g), torch.randint(0, 10, (16,), generator=g)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


@pytest.mark.unit
def test_pruning_removes_units_so_parameters_and_flops_drop() -> None:
    model = _stack()
    dense = model_cost(model, (1, 8, 8))
    pruning = UnitPruning(PruneConfig(target=0.5, start_epoch=1, end_epoch=1, steps=1), model,
                          _Self())
    assert pruning.prune(model, None, 1)
    pruned = model_cost(model, (1, 8, 8))
    assert widths(model) == [8, 8, 16]  # 16, 16, 32 halved; the classifier keeps its 10
    # Masks would leave both counts where they were: the tensors themselves are smaller.
    assert pruned.n_params < 0.4 * dense.n_params
    assert pruned.flops < 0.4 * dense.flops
    assert model(torch.zeros(2, 64)).shape == (2, 10)


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_optimizer_state_is_sliced_with_the_weights(kind: str) -> None:
    model = _stack()
    opt = (torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if kind == "sgd"
           else torch.optim.Adam(model.parameters(), lr=1e-3))
    _train(model, opt)
    conv2 = groups(model)[1]
    keys = ["momentum_buffer"] if kind == "sgd" else ["exp_avg", "exp_avg_sq"]
    before = {k: (opt.state[conv2.producer.weight][k].clone(),
                  opt.state[conv2.consumer.weight][k].clone()) for k in keys}
    keep = torch.tensor([0, 3, 4, 9, 15])
    remove_units(conv2, keep, opt)
    spread = 4  # the dense layer after the flatten reads 2x2 positions per channel
    cols = (keep[:, None] * spread + torch.arange(spread)).reshape(-1)
    for k in keys:
        own, consumer = before[k]
        assert torch.equal(opt.state[conv2.producer.weight][k], own[keep])
        assert torch.equal(opt.state[conv2.consumer.weight][k], consumer[:, cols])
    ids = {id(p) for g in opt.param_groups for p in g["params"]}
    assert ids == {id(p) for p in model.parameters()}  # the optimizer steps the new tensors


@pytest.mark.unit
def test_a_pruned_layer_keeps_learning() -> None:
    model = _stack()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    _train(model, opt)
    UnitPruning(PruneConfig(target=0.5, start_epoch=1, end_epoch=1, steps=1), model,
                _Self()).prune(model, opt, 1)
    conv2 = groups(model)[1]
    w = conv2.producer.weight.detach().clone()
    _train(model, opt, steps=2)
    assert (conv2.producer.weight.detach() - w).abs().max() > 1e-4


@pytest.mark.unit
def test_batch_norm_scales_choose_the_units_and_are_sliced() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
                          nn.Flatten(), nn.Linear(6 * 16, 3))
    bn = model[1]
    with torch.no_grad():
        bn.weight.copy_(torch.tensor([0.9, -0.01, 0.5, 0.02, -0.7, 0.03]))
        bn.running_mean.copy_(torch.arange(6.0))
    config = PruneConfig(criterion="bn_l1", target=0.5, start_epoch=1, end_epoch=1, steps=1)
    UnitPruning(config, model, _Self()).prune(model, None, 1)
    assert bn.weight.detach().tolist() == pytest.approx([0.9, 0.5, -0.7])  # the largest |scale|
    assert bn.running_mean.tolist() == [0.0, 2.0, 4.0] and bn.num_features == 3
    assert model(torch.zeros(2, 1, 4, 4)).shape == (2, 3)


@pytest.mark.unit
def test_resize_restores_the_widths_of_a_checkpoint() -> None:
    model, pruned = _stack(), _stack()
    UnitPruning(PruneConfig(target=0.5, start_epoch=1, end_epoch=1, steps=1), pruned,
                _Self()).prune(pruned, None, 1)
    resize(model, widths(pruned))
    model.load_state_dict(pruned.state_dict())
    x = torch.randn(3, 64)
    assert torch.equal(model(x), pruned(x))


@pytest.mark.unit
def test_models_it_cannot_prune_are_refused_with_one_line() -> None:
    cell = {"family": "cell", "nodes": 4, "edges": ["nor_conv_3x3"] * 6}
    model = build_genome_model(genome_from_dict(cell), (1, 8, 8), 10)
    with pytest.raises(PruneError, match=r"^training\.prune: cannot prune a model with a _Cell"):
        UnitPruning(PruneConfig(), model, _Self())
    with pytest.raises(PruneError, match=r"^training\.prune\.criterion: 'bn_l1' needs"):
        UnitPruning(PruneConfig(criterion="bn_l1"), _stack(), _Self())


@pytest.mark.unit
def test_the_schedule_reaches_the_target_at_end_epoch() -> None:
    assert PruneConfig(target=0.6, start_epoch=2, end_epoch=6, steps=3).events() == {
        2: pytest.approx(0.2), 4: pytest.approx(0.4), 6: pytest.approx(0.6)}
    with pytest.raises(ValidationError, match="steps = 4 do not fit in epochs 2..3"):
        PruneConfig(steps=4)


@pytest.mark.unit
@pytest.mark.parametrize(("study", "line"), [
    ({"training": {"epochs": 2, "prune": {}}},
     "training: prune.end_epoch = 3 is after the last epoch (epochs = 2)"),
    ({"training": {"prune": {"target": 1.0}}}, "training.prune.target: "),
    ({"training": {"prune": {"criterion": "hessian"}}}, "training.prune.criterion: "),
    ({"training": {"prune": {"criterion": "taylor", "start_epoch": 1}}},
     "training.prune: criterion 'taylor' needs start_epoch >= 2"),
    ({"space": {"prune_target": {"type": "float", "low": 0.0, "high": 1.0}}},
     "space.prune_target: value 1.0 is invalid for prune_target"),
    ({"space": {"prune_steps": {"type": "float", "low": 1.0, "high": 2.0}}},
     'space.prune_steps: prune_steps is an integer parameter; use type = "int"'),
])
def test_prune_keys_are_validated_naming_the_key(study: dict, line: str) -> None:
    with pytest.raises(StudyError) as caught:
        parse_study({"name": "p", **study})
    assert str(caught.value).startswith(line) and "\n" not in str(caught.value)


@pytest.mark.unit
def test_every_prune_key_is_searchable() -> None:
    sf = parse_study({"name": "p", "training": {"epochs": 6}, "space": {
        "prune_target": {"type": "float", "low": 0.0, "high": 0.8},
        "prune_criterion": {"type": "categorical", "choices": ["l1"]},
        "prune_end_epoch": {"type": "int", "low": 3, "high": 5}}})
    trial = sf.training.with_params({"prune_target": 0.4, "prune_end_epoch": 5, "lr": 0.1})
    assert trial.prune == PruneConfig(target=0.4, end_epoch=5)
    assert TrainConfig(epochs=6).prune is None  # no table, nothing searched: dense


@pytest.mark.unit
def test_a_searched_family_that_cannot_be_pruned_is_refused_up_front() -> None:
    with pytest.raises(StudyError, match=r"^training\.prune: the 'cell' genome family cannot"):
        parse_study({"name": "p", "training": {"epochs": 4},
                     "space": {"prune_target": {"type": "float", "low": 0.0, "high": 0.5},
                               "genome": {"family": "cell"}}})


@pytest.mark.unit
def test_input_layer_false_keeps_the_first_layers_units() -> None:
    model = _stack()
    config = PruneConfig(target=0.5, start_epoch=1, end_epoch=1, steps=1, input_layer=False)
    assert UnitPruning(config, model, _Self()).prune(model, None, 1)
    assert widths(model) == [16, 8, 16]  # the convolution reading the image keeps its 16


def test_rescale_multiplies_a_pruned_layers_gradient_by_its_lost_fan_in() -> None:
    grads = {}
    for rescale in (False, True):
        model = _stack()
        config = PruneConfig(target=0.5, start_epoch=1, end_epoch=1, steps=1, rescale=rescale)
        pruning = UnitPruning(config, model, _Self())
        pruning.prune(model, None, 1)
        torch.manual_seed(2)
        nn.functional.cross_entropy(model(torch.randn(4, 64)), torch.tensor([0, 1, 2, 3])).backward()
        pruning.after_backward(model)
        grads[rescale] = [m.weight.grad.clone() for m in model.body
                          if isinstance(m, nn.Conv2d | nn.Linear)]
    # first conv reads the image (fan-in 9, unchanged); the others lost half their inputs
    assert [torch.allclose(a * r, b) for a, b, r in zip(grads[False], grads[True], (1, 2, 2, 2), strict=True)] \
        == [True] * 4
