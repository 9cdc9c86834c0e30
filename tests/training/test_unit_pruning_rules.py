"""The rules of structured pruning (training/pruning/_units.py, _graph.py) one at a time, in one
process:
which models it refuses and with what line, how importances are agreed over ranks, how many
units a step keeps and which, how a checkpoint's widths are restored, and the schedule's
switches. Whole trials that prune run in tests/training/test_pruning_ranks.py (mpiexec)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from training.pruning._config import PruneConfig
from training.pruning._graph import cut_count
from training.pruning._units import PruneError, UnitPruning, agreed, choose, fan_in

pytestmark = pytest.mark.unit


class _One:
    size, rank = 1, 0


class _Two:
    """Rank 0 of two: the other rank's importances are ``other``."""

    size, rank = 2, 0

    def __init__(self, other: np.ndarray) -> None:
        self.other = other

    def allgather(self, flat: np.ndarray) -> list[np.ndarray]:
        return [flat, self.other]


X = torch.randn(2, 4)  # the MLP's example inputs: what its graph is traced on


def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))


def _pruning(config: PruneConfig, model: nn.Module, comm: Any = None) -> UnitPruning:
    return UnitPruning(config, model, comm or _One(), X)


def _roots(p: UnitPruning) -> list[nn.Module]:
    assert p.graph is not None
    return [p.graph.root(g) for g in p.graph.groups]


def test_a_model_that_is_only_a_classifier_is_refused_naming_its_class() -> None:
    with pytest.raises(PruneError) as info:
        _pruning(PruneConfig(), nn.Linear(4, 2))
    assert str(info.value) == (
        "training.prune: cannot prune this Linear: no linear or convolution layer whose outputs "
        "may be removed (the classifier's and the kept layers' are never)")


def test_a_model_whose_body_is_sequential_is_pruned_like_one() -> None:
    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = _mlp()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x)

    wrapped = Wrapped()
    assert _pruning(PruneConfig(), wrapped).widths() == [6, 5]


def test_a_depthwise_convolution_loses_its_inputs_with_its_outputs() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3, groups=4),
                          nn.ReLU(), nn.Flatten(), nn.Linear(4, 2))
    x = torch.randn(2, 1, 5, 5)
    p = UnitPruning(PruneConfig(target=0.5, start_epoch=1, end_epoch=1, steps=1), model, _One(),
                    x)
    assert p.widths() == [4]  # one group: the first conv's outputs are the depthwise one's
    assert p.prune(model, None, 1)
    assert (model[0].out_channels, model[2].in_channels, model[2].out_channels,
            model[2].groups) == (2, 2, 2, 2)
    assert model(x).shape == (2, 2)


def test_the_classifier_is_never_a_group_and_each_group_feeds_the_next_layer() -> None:
    model = _mlp()
    p = _pruning(PruneConfig(), model)
    assert _roots(p) == [model[0], model[2]] and p.widths() == [6, 5]
    assert p.graph is not None and p.graph.classifier == "4"
    assert _pruning(PruneConfig(units="neurons"), model).widths() == [6, 5]
    with pytest.raises(PruneError, match="no linear or convolution layer"):
        _pruning(PruneConfig(units="channels"), model)


def test_importances_are_averaged_over_ranks_group_by_group() -> None:
    local = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0, 5.0])]
    other = np.array([3.0, 6.0, 1.0, 0.0, 5.0])
    out = agreed(local, _Two(other))
    assert [o.tolist() for o in out] == [[2.0, 4.0], [2.0, 2.0, 5.0]]
    assert agreed([], _Two(np.zeros(0))) == []
    alone = agreed(local, _One())
    assert [o.tolist() for o in alone] == [[1.0, 2.0], [3.0, 4.0, 5.0]]


def test_fan_in_counts_inputs_and_kernel_cells() -> None:
    assert fan_in(nn.Linear(7, 3)) == 7
    assert fan_in(nn.Conv2d(2, 5, 3)) == 2 * 3 * 3


def test_a_step_keeps_the_rounded_remainder_of_the_original_width_and_at_least_one() -> None:
    assert cut_count(10, 10, 0.25) == 2  # keeps round(7.5) = 8 (banker's rounding to even)
    assert cut_count(6, 10, 0.5) == 1
    assert cut_count(4, 10, 0.5) == 0  # never grows back
    assert cut_count(10, 10, 0.99) == 9 and cut_count(1, 1, 0.9) == 0
    # in multiples of a step (heads): 9.6 of 32 asked, 8 cut; at least one step kept
    assert cut_count(32, 32, 0.3, 8) == 8 and cut_count(16, 16, 0.99, 8) == 8


def test_the_most_important_units_are_kept_in_their_order_ties_to_the_lower_index() -> None:
    assert choose(np.array([0.5, 3.0, 1.0, 3.0, 0.1]), 3).tolist() == [1, 2, 3]
    assert choose(np.array([1.0, 1.0, 1.0, 1.0]), 2).tolist() == [0, 1]
    assert choose(np.array([2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
                            1.0, 1.0, 1.0, 1.0, 1.0, 3.0]), 3).tolist() == [0, 1, 18]


def test_resize_takes_the_first_units_and_slices_the_optimizer_state() -> None:
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    before = model[0].weight.detach().clone()
    momentum = opt.state[model[0].weight]["momentum_buffer"].clone()
    p = _pruning(PruneConfig(), model)
    p.resize([4, 5], opt)
    assert p.widths() == [4, 5]
    assert torch.equal(model[0].weight.detach(), before[:4])
    assert model[0].weight.requires_grad
    assert torch.equal(opt.state[model[0].weight]["momentum_buffer"], momentum[:4])
    assert any(q is model[0].weight for q in opt.param_groups[0]["params"])
    p.resize([4, 5], opt)  # already that wide: nothing changes
    assert p.widths() == [4, 5]


def test_widths_that_do_not_fit_the_model_are_refused_naming_both() -> None:
    for sizes in ([7, 5], [6], [6, 5, 1]):
        with pytest.raises(PruneError) as info:
            _pruning(PruneConfig(), _mlp()).resize(sizes)
        assert str(info.value) == (f"training.prune: the checkpoint's widths {sizes} do not fit "
                                   "this model (widths [6, 5])")
    same = _pruning(PruneConfig(), _mlp())
    same.resize([6, 5])
    assert same.widths() == [6, 5]


def test_the_penalty_applies_up_to_end_epoch_and_only_with_a_sparsity() -> None:
    p = _pruning(PruneConfig(sparsity=1e-4, end_epoch=3), _mlp())
    assert p.active is False and p.collecting is False  # before the first epoch
    p.start_epoch(3)
    assert p.active is True
    p.start_epoch(4)
    assert p.active is False
    dense = _pruning(PruneConfig(sparsity=0.0, end_epoch=3), _mlp())
    dense.start_epoch(1)
    assert dense.active is False


def test_taylor_collects_until_its_last_step() -> None:
    p = _pruning(PruneConfig(criterion="taylor", start_epoch=2, end_epoch=3, steps=2), _mlp())
    assert [t.dtype for t in p.taylor] == [torch.float64, torch.float64]
    assert [t.shape[0] for t in p.taylor] == [6, 5]
    p.start_epoch(2)
    assert p.collecting is True
    p.start_epoch(3)
    assert p.collecting is False


def test_a_step_is_due_only_at_a_scheduled_epoch() -> None:
    p = _pruning(PruneConfig(start_epoch=2, end_epoch=4, steps=2), _mlp())
    assert [e for e in range(1, 7) if p.due(e)] == [2, 4]


def test_an_epoch_without_a_step_prunes_nothing() -> None:
    model = _mlp()
    p = _pruning(PruneConfig(start_epoch=2, end_epoch=2, steps=1, target=0.5), model)
    assert p.prune(model, None, 1) is False and p.widths() == [6, 5]
    assert p.prune(model, None, 2) is True and p.widths() == [3, 2]


def test_the_input_layer_is_kept_whole_when_asked() -> None:
    model = _mlp()
    p = _pruning(PruneConfig(input_layer=False, start_epoch=2, end_epoch=2, steps=1), model)
    assert _roots(p) == [model[2]]


def test_a_model_whose_forward_fails_on_the_example_is_refused_naming_the_error() -> None:
    with pytest.raises(PruneError) as info:
        UnitPruning(PruneConfig(), _mlp(), _One(), torch.randn(2, 7))
    assert str(info.value).startswith("training.prune: cannot trace this Sequential's graph: "
                                      "RuntimeError: mat1 and mat2 shapes cannot be multiplied")


def test_bn_l1_without_a_batch_norm_names_the_layer() -> None:
    with pytest.raises(PruneError) as info:
        _pruning(PruneConfig(criterion="bn_l1"), _mlp())
    assert str(info.value) == (
        "training.prune.criterion: 'bn_l1' needs a batch norm with a scale in every pruned "
        "group; 0's has none (use 'l1', or keep that layer with prune.keep)")


def test_importances_of_three_groups_are_each_their_own_slice() -> None:
    local = [torch.tensor([1.0]), torch.tensor([2.0, 3.0]), torch.tensor([4.0, 5.0, 6.0])]
    out = agreed(local, _One())
    assert [o.tolist() for o in out] == [[1.0], [2.0, 3.0], [4.0, 5.0, 6.0]]


def test_fan_in_of_a_layer_with_one_output() -> None:
    assert fan_in(nn.Linear(7, 1)) == 7


def test_a_model_without_a_layer_to_prune_is_refused_or_trains_dense_where_allowed() -> None:
    model = nn.Sequential(nn.Flatten(), nn.ReLU())
    with pytest.raises(PruneError, match="no linear or convolution layer"):
        _pruning(PruneConfig(), model)
    dense = UnitPruning(PruneConfig(), model, _One(), X, allow_empty=True)  # a genome's draw
    assert dense.graph is None and dense.widths() == [] and not dense.prune(model, None, 2)


def test_each_step_keeps_a_share_of_the_original_width_not_of_the_last() -> None:
    model = _mlp()
    p = _pruning(PruneConfig(target=0.5, start_epoch=2, end_epoch=3, steps=2), model)
    assert p.events == {2: 0.25, 3: 0.5}
    assert p.prune(model, None, 2) and p.widths() == [4, 4]  # round(6 x 0.75), round(5 x .75)
    assert p.prune(model, None, 3) and p.widths() == [3, 2]  # round(6 x 0.5), round(5 x 0.5)
    assert [len(k) for k in p.kept[1]] == [3, 2]
    assert [t.dtype for t in p.taylor] == [torch.float64, torch.float64]
    assert [t.shape[0] for t in p.taylor] == [3, 2]  # taylor's sums start again, new widths


def test_resize_to_the_same_widths_replaces_nothing_and_needs_no_optimizer_state() -> None:
    model = _mlp()
    opt = torch.optim.Adam(model.parameters())  # no step yet: no state for any parameter
    weight = model[0].weight
    p = _pruning(PruneConfig(), model)
    p.resize([6, 5], opt)
    assert model[0].weight is weight
    p.resize([2, 5], opt)
    assert p.widths() == [2, 5]
    assert any(q is model[0].weight for q in opt.param_groups[0]["params"])


def test_a_frozen_parameter_stays_frozen_when_its_units_are_removed() -> None:
    model = _mlp()
    model[0].bias.requires_grad_(False)
    _pruning(PruneConfig(), model).resize([3, 5])
    assert model[0].bias.requires_grad is False and model[0].weight.requires_grad is True


def test_renewing_a_parameter_copies_it_and_moves_its_optimizer_state() -> None:
    from training.pruning._rebuild import renew_parameters

    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    old = model[2].weight
    momentum = opt.state[old]["momentum_buffer"].clone()
    renew_parameters(model, opt)
    assert model[2].weight is not old and torch.equal(model[2].weight, old)
    assert torch.equal(opt.state[model[2].weight]["momentum_buffer"], momentum)
    assert old not in opt.state
    assert any(q is model[2].weight for q in opt.param_groups[0]["params"])
    assert not any(q is old for q in opt.param_groups[0]["params"])


def test_the_penalty_pulls_what_the_criterion_measures_and_nothing_else() -> None:
    def grads(model: nn.Module, config: PruneConfig, x: torch.Tensor) -> list[torch.Tensor]:
        p = UnitPruning(config, model, _One(), x[:2])
        p.start_epoch(1)
        model.zero_grad()
        model(x).sum().backward()
        before = [q.grad.clone() for q in model.parameters()]
        p.after_backward(model)
        return [q.grad - b for q, b in zip(model.parameters(), before, strict=True)]

    model = _mlp()
    added = grads(model, PruneConfig(sparsity=0.1, end_epoch=3), torch.randn(3, 4))
    weights = [model[0].weight, model[2].weight]  # the groups' layers; not the classifier's
    for q, a in zip(model.parameters(), added, strict=True):
        expected = 0.1 * torch.sign(q.detach()) if any(q is w for w in weights) else 0 * q
        assert torch.allclose(a, expected), a
    torch.manual_seed(0)
    conv = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(16, 2))
    with torch.no_grad():
        conv[1].weight.copy_(torch.tensor([0.5, -0.2, 0.3, -0.9]))
    added = grads(conv, PruneConfig(criterion="bn_l1", sparsity=0.1, end_epoch=3),
                  torch.randn(3, 1, 4, 4))
    named = dict(zip([n for n, _ in conv.named_parameters()], added, strict=True))
    assert torch.allclose(named["1.weight"], torch.tensor([0.1, -0.1, 0.1, -0.1]))
    assert all(torch.equal(v, torch.zeros_like(v)) for k, v in named.items() if k != "1.weight")
    # l1 on the same model: the convolution's weights, not the norm's scales
    added = grads(conv, PruneConfig(sparsity=0.1, end_epoch=3), torch.randn(3, 1, 4, 4))
    named = dict(zip([n for n, _ in conv.named_parameters()], added, strict=True))
    assert torch.allclose(named["0.weight"], 0.1 * torch.sign(conv[0].weight.detach()))
    assert all(torch.equal(v, torch.zeros_like(v)) for k, v in named.items() if k != "0.weight")
