"""Structured pruning in one process, through Torch-Pruning's dependency graph: units are
physically removed (parameters and FLOPs drop), coupled layers (residual sums, batch norms,
attention) lose the same units, the optimizer's state is sliced with the weights, checkpoint
widths restore, and models or settings it cannot prune are refused with one line."""

from __future__ import annotations

import copy
import importlib
import sys
from pathlib import Path
from typing import Any

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
from training.pruning._graph import Graph, PruneError, remove
from training.pruning._units import UnitPruning

STACK = {"family": "stack", "layers": [
    {"kind": "conv", "width": 16, "activation": "relu", "dropout": 0.0, "kernel": 3, "pool": True},
    {"kind": "conv", "width": 16, "activation": "relu", "dropout": 0.0, "kernel": 3, "pool": True},
    {"kind": "dense", "width": 32, "activation": "relu", "dropout": 0.0},
]}
ONCE = PruneConfig(target=0.5, start_epoch=1, end_epoch=1, steps=1)
X = torch.randn(2, 64)  # the stack's example inputs (8x8 images, flattened)


class _Self:  # the communicator of one rank, as the pruner sees it
    size, rank = 1, 0


def _torchvision() -> Any:
    """torchvision, imported after examples/fashion_png/torchvision_cpu.py (its docstring: this
    machine's wheels)."""
    sys.path.append(str(Path(__file__).resolve().parents[2] / "examples" / "fashion_png"))
    importlib.import_module("torchvision_cpu")
    return importlib.import_module("torchvision")


def _stack() -> nn.Module:
    torch.manual_seed(0)
    return build_genome_model(genome_from_dict(STACK), (1, 8, 8), 10)


def _train(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, steps: int = 3,
           classes: int = 10) -> None:
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        y = torch.randint(0, classes, (len(x),), generator=g)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


class Residual(nn.Module):
    """conv-bn, then a block whose output is added to its input (a ResNet's basic block)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.a = nn.Sequential(nn.Conv2d(8, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(6, 8, 3, padding=1), nn.BatchNorm2d(8))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        return self.head(torch.relu(h + self.b(self.a(h))))


class Encoder(nn.Module):
    """Token embeddings, two torch transformer encoder layers, mean pooling, a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x)).mean(1))


class HeadsByHand(nn.Module):
    """Attention written as research code often does (q, k, v split into heads by a view: the
    library offers no group there) on a residual stream that is the model's input itself:
    cutting the stream's channels breaks the model, so that group is left alone."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 4, 4).unbind(2)
        att = torch.softmax(torch.einsum("bthd,bshd->bhts", q, k) / 2.0, -1)
        h = x + torch.einsum("bhts,bshd->bthd", att, v).reshape(b, t, 16)
        return self.head((h + self.mlp(h)).mean(1))


@pytest.mark.unit
def test_pruning_removes_units_so_parameters_and_flops_drop() -> None:
    model = _stack()
    dense = model_cost(model, (1, 8, 8))
    pruning = UnitPruning(ONCE, model, _Self(), X)
    assert pruning.prune(model, None, 1)
    pruned = model_cost(model, (1, 8, 8))
    assert pruning.widths() == [8, 8, 16]  # 16, 16, 32 halved; the classifier keeps its 10
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
    _train(model, opt, torch.randn(16, 64))
    graph = UnitPruning(ONCE, model, _Self(), X).graph
    assert graph is not None
    conv2, dense = graph.groups[1], model.body[-1]  # the second conv; the classifier
    producer, consumer = graph.root(conv2), graph.layers(graph.groups[2], (nn.Linear,))[0]
    keys = ["momentum_buffer"] if kind == "sgd" else ["exp_avg", "exp_avg_sq"]
    before = {k: (opt.state[producer.weight][k].clone(), opt.state[consumer.weight][k].clone())
              for k in keys}
    weights = (producer.weight.detach().clone(), consumer.weight.detach().clone())
    keep = torch.tensor([0, 3, 4, 9, 15])
    remove(graph, [(conv2, sorted(set(range(16)) - set(keep.tolist())))], opt)
    spread = 4  # the dense layer after the flatten reads 2x2 positions per channel
    cols = (keep[:, None] * spread + torch.arange(spread)).reshape(-1)
    assert torch.equal(producer.weight, weights[0][keep])
    assert torch.equal(consumer.weight, weights[1][:, cols])
    for k in keys:
        own, read = before[k]
        assert torch.equal(opt.state[producer.weight][k], own[keep])
        assert torch.equal(opt.state[consumer.weight][k], read[:, cols])
    ids = {id(p) for g in opt.param_groups for p in g["params"]}
    assert ids == {id(p) for p in model.parameters()}  # the optimizer steps the new tensors
    assert dense.out_features == 10


def _trained_residual(n: int) -> tuple[Residual, torch.Tensor, torch.optim.Optimizer]:
    """A Residual trained 3 steps on ``n`` random images (momentum in its optimizer)."""
    torch.manual_seed(0)
    model = Residual()
    x = torch.randn(n, 1, 6, 6)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    _train(model, opt, x, classes=3)
    return model, x, opt


@pytest.mark.unit
def test_a_residual_pair_loses_the_same_channels_and_the_rest_follows() -> None:
    model, x, opt = _trained_residual(4)
    pruning = UnitPruning(ONCE, model, _Self(), x[:2])
    graph = pruning.graph
    assert graph is not None
    # One group for the sum's 8 channels (stem conv, block's last conv, their norms, the
    # block's first conv and the classifier read them), one for the block's inner 6.
    convs = [{graph.name[m] for m in graph.layers(g, (nn.Conv2d,))} for g in graph.groups]
    assert sorted(map(sorted, convs)) == [["a.0"], ["b.0", "stem.0"]]
    assert sorted(pruning.widths()) == [6, 8]
    shared = graph.groups[convs.index({"stem.0", "b.0"})]
    old = {n: p.detach().clone() for n, p in model.named_parameters()}
    momentum = {n: opt.state[p]["momentum_buffer"].clone() for n, p in model.named_parameters()}
    gone = [1, 2, 5, 6]
    remove(graph, [(shared, gone)], opt)
    keep = torch.tensor([0, 3, 4, 7])
    params = dict(model.named_parameters())
    for name in ("stem.0.weight", "stem.1.weight", "b.0.weight", "b.1.bias"):  # outputs
        assert torch.equal(params[name], old[name][keep]), name
        assert torch.equal(opt.state[params[name]]["momentum_buffer"], momentum[name][keep])
    for name in ("a.0.weight", "head.2.weight"):  # inputs
        assert torch.equal(params[name], old[name][:, keep]), name
    assert model.stem[1].running_mean.shape == (4,) and model.b[1].num_features == 4
    _train(model, opt, x, classes=3)  # trains on, shapes consistent


@pytest.mark.unit
def test_groups_keep_their_names_and_order_over_the_cuts_and_each_cut_counts_from_the_dense(
) -> None:
    torch.manual_seed(0)
    model = Residual()
    x = torch.randn(2, 1, 6, 6)
    pruning = UnitPruning(PruneConfig(target=0.5, start_epoch=1, end_epoch=2, steps=2), model,
                          _Self(), x)
    seen = []
    for epoch in (1, 2):
        assert pruning.prune(model, None, epoch)
        graph = pruning.graph
        assert graph is not None
        seen.append(([graph.name[graph.root(g)] for g in graph.groups], pruning.widths()))
    # a quarter of the dense 8 and 6 gone, then half of them (not half of what was left)
    assert seen == [(["stem.0", "a.0"], [6, 4]), (["stem.0", "a.0"], [4, 3])]


@pytest.mark.unit
def test_a_removal_that_fails_puts_every_weight_back_and_says_why_in_one_line() -> None:
    model, x, opt = _trained_residual(2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    stats = model.stem[1].running_mean.clone()
    out = model.eval()(x)
    graph = Graph(model.train(), x)
    first, inner = graph.groups  # stem's 8 channels (cut first), then the block's inner 6

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk on fire")

    inner.prune = broken  # fails after the first group was cut
    with pytest.raises(PruneError, match=r"^training\.prune: removing units failed: "
                       r"RuntimeError: disk on fire$"):
        remove(graph, [(first, [0, 1]), (inner, [2])], opt)
    assert (model.stem[0].out_channels, model.stem[1].num_features, model.a[0].in_channels,
            model.head[2].in_features) == (8, 8, 8, 8)
    after = dict(model.named_parameters())
    for name, value in before.items():
        assert after[name].shape == value.shape and torch.equal(after[name], value), name
        assert after[name].dtype == torch.float32  # not the float64 index codes
    assert torch.equal(model.stem[1].running_mean, stats)
    assert torch.equal(model.eval()(x), out)


@pytest.mark.unit
def test_the_weights_kept_are_the_librarys_own_choice_and_values() -> None:
    """The index codes reproduce exactly what Torch-Pruning does to the weights themselves."""
    import torch_pruning as tp

    torch.manual_seed(0)
    for model, x in ((Residual(), torch.randn(2, 1, 6, 6)),
                     (Encoder(), torch.randint(0, 20, (2, 7)))):
        theirs = copy.deepcopy(model)
        graph = Graph(model, x)
        plans = []
        for g in graph.groups:
            step = graph.step(g)
            plans.append((graph.name[graph.root(g)], list(range(0, 2 * step))))
        remove(graph, [(g, idxs) for g, (_, idxs) in zip(graph.groups, plans, strict=True)])
        dg = tp.DependencyGraph().build_dependency(theirs, example_inputs=x)
        mods = dict(theirs.named_modules())
        for name, idxs in plans:
            root = mods[name]
            fn = dg.get_pruner_of_module(root).prune_out_channels
            dg.get_pruning_group(root, fn, idxs).prune()
        ours = dict(model.named_parameters())
        for name, p in theirs.named_parameters():
            assert torch.equal(ours[name], p), name
        assert torch.equal(model.eval()(x), theirs.eval()(x))


@pytest.mark.unit
def test_models_of_every_shape_prune_and_train_on() -> None:
    torchvision = _torchvision()

    torch.manual_seed(0)
    resnet = torchvision.models.resnet18(weights=None, num_classes=10)
    resnet.conv1 = nn.Conv2d(1, 64, 3, 1, 1, bias=False)
    cell = {"family": "cell", "nodes": 4, "edges": ["nor_conv_3x3", "skip_connect",
                                                    "nor_conv_1x1", "avg_pool_3x3",
                                                    "nor_conv_3x3", "skip_connect"]}
    macro = {"family": "macro", "nodes": [
        {"op": "conv", "inputs": [0], "width": 8, "kernel": 3},
        {"op": "conv", "inputs": [1], "width": 12, "kernel": 3},
        {"op": "conv", "inputs": [1, 2], "width": 16, "kernel": 3}]}
    cases = {
        "resnet18": (resnet, torch.randn(2, 1, 16, 16), 10),
        "transformer": (Encoder(), torch.randint(0, 20, (2, 7)), 5),
        "cell": (build_genome_model(genome_from_dict(cell), (1, 8, 8), 10), torch.randn(2, 64), 10),
        "macro": (build_genome_model(genome_from_dict(macro), (1, 8, 8), 10), torch.randn(2, 64),
                  10),
    }
    for name, (model, x, classes) in cases.items():
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        _train(model, opt, x, steps=1, classes=classes)
        n = sum(p.numel() for p in model.parameters())
        pruning = UnitPruning(ONCE, model, _Self(), x)
        assert pruning.prune(model, opt, 1), name
        assert sum(p.numel() for p in model.parameters()) < 0.6 * n, name
        _train(model, opt, x, steps=1, classes=classes)
        assert model(x).shape == (2, classes), name
        assert all(opt.state[p]["exp_avg"].shape == p.shape for p in model.parameters()), name


@pytest.mark.unit
def test_attention_loses_whole_heads_worth_and_a_group_it_cannot_cut_is_left_alone() -> None:
    torch.manual_seed(0)
    model = Encoder()
    x = torch.randint(0, 20, (2, 7))
    pruning = UnitPruning(PruneConfig(target=0.3, start_epoch=1, end_epoch=1, steps=1), model,
                          _Self(), x)
    pruning.prune(model, None, 1)
    attention = model.encoder.layers[0].self_attn
    assert attention.embed_dim % attention.num_heads == 0 and attention.embed_dim < 32
    by_hand = HeadsByHand()
    pruning = UnitPruning(ONCE, by_hand, _Self(), torch.randn(2, 5, 16))
    # The stream's group (the input's 16 features, coupled through the view into heads to
    # qkv's outputs), known by its first layer: cutting it cannot run.
    assert pruning.left_alone() == ["qkv"]
    assert pruning.prune(by_hand, None, 1) and by_hand.mlp[0].out_features == 16
    assert by_hand.qkv.out_features == 48 and by_hand.mlp[2].out_features == 16
    assert by_hand(torch.randn(3, 5, 16)).shape == (3, 3)


def test_hugging_face_attention_is_cut_in_whole_heads_found_by_the_check() -> None:
    _torchvision()  # transformers imports it
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(image_size=8, patch_size=2, num_channels=1, hidden_size=32,
                       num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                       num_labels=10)
    model = ViTForImageClassification(config)
    x = {"pixel_values": torch.randn(2, 1, 8, 8)}
    pruning = UnitPruning(PruneConfig(target=0.3, start_epoch=1, end_epoch=1, steps=1), model,
                          _Self(), x)
    graph = pruning.graph
    assert graph is not None and pruning.left_alone() == []
    steps = {graph.name[graph.root(g)]: graph.step(g) for g in graph.groups}
    attention = [n for n in steps if ".attention." in n]
    assert len(attention) == 2 and all(steps[n] == 8 for n in attention)  # the head size
    assert pruning.prune(model, None, 1)
    q = model.vit.layers[0].attention.q_proj  # 32 - 8: 9.6 units asked, whole heads cut
    assert q.out_features == 24 and model(**x).logits.shape == (2, 10)


@pytest.mark.unit
def test_a_pruned_layer_keeps_learning() -> None:
    model = _stack()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    _train(model, opt, torch.randn(16, 64))
    pruning = UnitPruning(ONCE, model, _Self(), X)
    pruning.prune(model, opt, 1)
    conv2 = pruning.graph.root(pruning.graph.groups[1])  # type: ignore[union-attr]
    w = conv2.weight.detach().clone()
    _train(model, opt, torch.randn(16, 64), steps=2)
    assert (conv2.weight.detach() - w).abs().max() > 1e-4


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
    UnitPruning(config, model, _Self(), torch.zeros(2, 1, 4, 4)).prune(model, None, 1)
    assert bn.weight.detach().tolist() == pytest.approx([0.9, 0.5, -0.7])  # the largest |scale|
    assert bn.running_mean.tolist() == [0.0, 2.0, 4.0] and bn.num_features == 3
    assert model(torch.zeros(2, 1, 4, 4)).shape == (2, 3)


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["stack", "residual", "transformer"])
def test_resize_restores_the_widths_of_a_checkpoint(kind: str) -> None:
    def make() -> tuple[nn.Module, torch.Tensor, int]:
        torch.manual_seed(0)
        if kind == "stack":
            return _stack(), torch.randn(16, 64), 10
        if kind == "residual":
            return Residual(), torch.randn(8, 1, 6, 6), 3
        return Encoder(), torch.randint(0, 20, (8, 7)), 5

    (model, x, classes), (pruned, _, _) = make(), make()
    opt = torch.optim.SGD(pruned.parameters(), lr=0.05)
    _train(pruned, opt, x, classes=classes)
    done = UnitPruning(ONCE, pruned, _Self(), x[:2])
    done.prune(pruned, opt, 1)
    _train(pruned, opt, x, classes=classes)  # trained on at the pruned widths
    again = UnitPruning(ONCE, model, _Self(), x[:2])
    again.resize(done.widths())
    model.load_state_dict(pruned.state_dict())  # the shapes fit, buffers included
    assert torch.equal(model.eval()(x), pruned.eval()(x))


@pytest.mark.unit
def test_widths_that_do_not_fit_the_model_are_refused() -> None:
    pruning = UnitPruning(ONCE, _stack(), _Self(), X)
    for sizes in ([9, 8, 16, 4], [17, 8, 16]):  # a group too many; wider than the model
        with pytest.raises(PruneError, match=r"^training\.prune: the checkpoint's widths "
                           rf"\[{', '.join(map(str, sizes))}\] do not fit this model "
                           r"\(widths \[16, 16, 32\]\)$"):
            pruning.resize(sizes)


@pytest.mark.unit
def test_models_it_cannot_prune_are_refused_with_one_line() -> None:
    with pytest.raises(PruneError, match=r"^training\.prune\.criterion: 'bn_l1' needs a batch "
                       r"norm with a scale in every pruned group; body\.\d+'s has none"):
        UnitPruning(PruneConfig(criterion="bn_l1"), _stack(), _Self(), X)
    only_a_classifier = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    with pytest.raises(PruneError, match=r"^training\.prune: cannot prune this Sequential: no "
                       "linear or convolution layer whose outputs may be removed"):
        UnitPruning(ONCE, only_a_classifier, _Self(), X)
    empty = UnitPruning(ONCE, only_a_classifier, _Self(), X, allow_empty=True)  # a genome draw
    assert empty.graph is None and not empty.due(1) and empty.widths() == []

    class Untraceable(nn.Module):  # its output does not depend on the graph's tensors
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(64, 8), nn.Linear(8, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("needs a mask argument")

    with pytest.raises(PruneError, match=r"^training\.prune: cannot trace this Untraceable's "
                       "graph: RuntimeError: needs a mask argument$"):
        UnitPruning(ONCE, Untraceable(), _Self(), X)
    with pytest.raises(PruneError, match=r"^training\.prune\.keep: no module named 'body\.99'"):
        UnitPruning(ONCE.model_copy(update={"keep": ("body.99",)}), _stack(), _Self(), X)


@pytest.mark.unit
def test_kept_modules_keep_their_units_and_the_rest_is_pruned() -> None:
    model = _stack()
    first = next(n for n, m in model.named_modules() if isinstance(m, nn.Conv2d))
    pruning = UnitPruning(ONCE.model_copy(update={"keep": (first,)}), model, _Self(), X)
    assert pruning.widths() == [16, 32]  # the kept conv's group is not a group
    pruning.prune(model, None, 1)
    assert pruning.widths() == [8, 16] and model.get_submodule(first).out_channels == 16


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
def test_a_searched_prune_on_the_cell_and_macro_families_is_accepted() -> None:
    for family in ("cell", "macro"):
        sf = parse_study({"name": "p", "training": {"epochs": 4},
                          "space": {"prune_target": {"type": "float", "low": 0.0, "high": 0.5},
                                    "genome": {"family": family}}})
        assert sf.training.with_params({"prune_target": 0.3}).prune.target == 0.3  # type: ignore[union-attr]


@pytest.mark.unit
def test_input_layer_false_keeps_the_first_layers_units() -> None:
    model = _stack()
    config = PruneConfig(target=0.5, start_epoch=1, end_epoch=1, steps=1, input_layer=False)
    pruning = UnitPruning(config, model, _Self(), X)
    assert pruning.prune(model, None, 1)
    assert pruning.widths() == [8, 16]  # the convolution reading the image is no group  # the convolution reading the image keeps its 16


def test_rescale_multiplies_a_pruned_layers_gradient_by_its_lost_fan_in() -> None:
    grads = {}
    for rescale in (False, True):
        model = _stack()
        config = PruneConfig(target=0.5, start_epoch=1, end_epoch=1, steps=1, rescale=rescale)
        pruning = UnitPruning(config, model, _Self(), X)
        pruning.prune(model, None, 1)
        torch.manual_seed(2)
        nn.functional.cross_entropy(model(torch.randn(4, 64)), torch.tensor([0, 1, 2, 3])).backward()
        pruning.after_backward(model)
        grads[rescale] = [m.weight.grad.clone() for m in model.body
                          if isinstance(m, nn.Conv2d | nn.Linear)]
    # first conv reads the image (fan-in 9, unchanged); the others lost half their inputs
    assert [torch.allclose(a * r, b) for a, b, r in zip(grads[False], grads[True], (1, 2, 2, 2), strict=True)] \
        == [True] * 4
