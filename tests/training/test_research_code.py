"""Research code's shapes on the plug-in path (issue 45): dict samples, tuple and mapping outputs,
a Hugging Face model with its own loss, AdamW and schedules, bf16, gradient clipping, and FLOPs
that are counted from a real sample (attention included) or absent, never 0."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from tests.mpi_helpers import HERE, run_mpi_job
from training import DataInfo
from training._config import TrainConfig
from training.data._batches import BatchShape, prediction
from training.jobs._optim import Schedule
from training.models import count_flops
from training.plugins import PluginError

sys.path[:0] = [str(HERE)]
import _research_plugins as research  # noqa: E402  (tests/mpi_jobs/_research_plugins.py)

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("research") / "out.json"
    return run_mpi_job("_research_job.py", out, ranks=2, timeout=600)  # type: ignore[no-any-return]


@pytest.mark.parametrize("shape", ["dict_samples", "tuple_output", "mapping_output"])
def test_dicts_tuples_and_mappings_train_the_weights_of_the_built_in_path(
        job: dict[str, Any], shape: str) -> None:
    got = job["shapes"][shape]
    assert got["max_weight_difference"] == 0.0
    assert got["val_accuracy"] == job["shapes"]["values"]["val_accuracy"] > 0.5


@pytest.mark.parametrize("algorithm", ["sync", "asgd"])
def test_a_hugging_face_model_trains_on_its_own_loss_with_adamw_warmup_and_bf16(
        job: dict[str, Any], algorithm: str) -> None:
    got = job[f"hf_{algorithm}"]
    assert got["state"] == "complete"
    # The ranks learn: their training loss (the mean over ranks) falls from chance's (ln 10 =
    # 2.30) by more than a tenth (sync 2.29 -> 1.31; asgd 2.28-2.32 -> 1.44-1.93 in 60 runs of this job).
    loss = got["train_loss"]
    assert len(loss) == 6 and loss[-1] < 0.9 * loss[0], loss
    curve = got["curve"]  # validation accuracy, 6 epochs; chance is 0.1
    assert len(curve) == 6 and all(0.0 <= a <= 1.0 for a in curve), curve
    if algorithm == "sync":  # deterministic: 0.62 here, half of that is asked
        assert curve[-1] > 0.3 and max(curve) > curve[0], curve
    # asgd's is scored on the mean of the ranks' weights, and with AdamW the gate accepts few
    # exchanges (0-13 of ~50), so the ranks drift apart and their mean was at chance in every
    # epoch in 3 of 25 runs (docs/training-core.md): no accuracy is asked of it here.
    # The linear schedule ran to its end: the last step's rate is a small part of lr (asgd: a
    # rank that claimed more than its share of the last epoch steps on at its end, rate 0).
    least = 0.0 if algorithm == "asgd" else 1e-12
    assert least <= got["lr_at_end"] < 3e-3 * 0.1
    # ViT: the patches' projection, the Linear layers and attention's two products per layer.
    assert got["flops"] > got["linear_macs"] > 0


def test_grad_clip_bounds_every_step(job: dict[str, Any]) -> None:
    assert 0 < job["clipped"]["moved"] <= job["clipped"]["bound"]


def test_bf16_changes_the_arithmetic_not_the_outcome(job: dict[str, Any]) -> None:
    got = job["precision"]
    assert got["max_weight_difference"] > 1e-4
    assert abs(got["bf16"] - got["fp32"]) < 0.05


def test_a_cosine_schedule_with_adamw_resumes_to_the_same_weights(job: dict[str, Any]) -> None:
    got = job["resume"]
    assert got["start_epoch"] == 3 and got["max_weight_difference"] == 0.0
    assert got["constant_difference"] > 1e-3  # the schedule changed the training


def test_repeats_report_the_mean_of_the_seeds_trained_alone(job: dict[str, Any]) -> None:
    got = job["repeats"]
    alone = got["alone"]
    for name in ("val_accuracy", "val_loss", "train_loss"):
        assert got["together"][name] == pytest.approx(
            sum(a[name] for a in alone) / 3, rel=1e-12, abs=1e-12)
        assert got["spread"]["std"][name] == pytest.approx(
            float(np.std([a[name] for a in alone], ddof=1)), rel=1e-9, abs=1e-12)
    assert got["spread"]["seeds"] == [3, 4, 5]
    assert [v["val_accuracy"] for v in got["spread"]["values"]] == [
        a["val_accuracy"] for a in alone]
    # Every epoch's report is the mean too (what the pruner judges).
    means = [sum(h[i] for h in got["alone_history"]) / 3 for i in range(2)]
    assert got["history"] == pytest.approx(means, rel=1e-12)
    assert len({a["val_loss"] for a in alone}) == 3  # the seeds differ


@pytest.mark.unit
def test_flops_of_integer_inputs_count_attention_s_products() -> None:
    info = DataInfo(input_shape=(65,), n_classes=10, n_targets=None, task="classification",
                    n_train=1)
    bert = research.tiny_bert({}, info)
    ids = torch.randint(0, 17, (1, 65))
    # Per token, per layer: Q, K, V and the output projection (32 x 32), the feed-forward's two
    # (32 x 64, 64 x 32); then the pooler (32 x 32) and the classifier (32 x 10) on [CLS] alone.
    linear = 2 * 65 * (4 * 32 * 32 + 2 * 32 * 64) + 32 * 32 + 32 * 10
    # 2 layers x 2 heads: Q K^T and the product by V, 65 x 65 x 16 multiply-adds each.
    attention = 2 * 2 * 2 * 65 * 65 * 16
    assert count_flops(bert, {"input_ids": ids}) == linear + attention


@pytest.mark.unit
def test_flops_of_torch_transformer_layers_count_their_products_not_only_the_head() -> None:
    # In eval mode without gradients these layers take a fused fast path the counter cannot
    # see into: the figure would be the embedding and the classifier alone.
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
                          nn.Flatten(), nn.Linear(5 * 32, 10))
    linear = 2 * 5 * (4 * 32 * 32 + 2 * 32 * 64) + 5 * 32 * 10  # q, k, v, out; the MLP; head
    attention = 2 * 4 * 2 * 5 * 5 * 8  # 2 layers x 4 heads: Q K^T and by V, 5 x 5 x 8 each
    assert count_flops(model, torch.zeros(1, 5, 32)) == linear + attention


@pytest.mark.unit
def test_flops_are_absent_not_zero_where_nothing_is_counted() -> None:
    info = DataInfo(input_shape=(64,), n_classes=10, n_targets=None, task="classification",
                    n_train=1)
    assert count_flops(research.elementwise_model({}, info), torch.zeros(1, 64)) is None

    class Fails(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("no")

    assert count_flops(Fails(), torch.zeros(1, 64)) is None


@pytest.mark.unit
def test_batches_and_outputs_are_read_as_documented() -> None:
    x, y = torch.zeros(3, 2), torch.tensor([0, 1, 1])
    assert BatchShape().split({"x": x, "labels": y})[0] is x
    assert BatchShape().split({"x": x, "label": y})[1] is y
    inputs, target = BatchShape().split({"a": x, "b": x, "labels": y})  # several: keywords
    assert set(inputs) == {"a", "b"} and target is y
    assert set(BatchShape(model_loss=True).split({"a": x, "labels": y})[0]) == {"a", "labels"}
    assert BatchShape(inputs="a").split({"a": x, "b": x, "labels": y})[0] is x
    assert BatchShape().split((x, y))[0] is x and BatchShape().split([x, y])[1] is y
    with pytest.raises(PluginError, match="training.dataset: a batch is a tuple of 3"):
        BatchShape().split((x, y, y))
    assert prediction((x, "aux")) is x and prediction({"logits": x, "loss": 0}) is x
    assert prediction([x]) is x and prediction(x) is x


@pytest.mark.unit
def test_schedules_follow_their_rules() -> None:
    def factors(**kw: Any) -> list[float]:
        s = Schedule(TrainConfig(epochs=4, **kw))
        return [round(s.factor(e, 0, 10), 4) for e in (1, 2, 3, 4)]

    assert factors() == [1.0] * 4
    assert factors(lr_schedule="step", step_epochs=2, step_gamma=0.5) == [1, 1, 0.5, 0.5]
    assert factors(lr_schedule="linear") == [1, 0.75, 0.5, 0.25]
    assert factors(lr_schedule="cosine") == [1, 0.8536, 0.5, 0.1464]
    assert factors(warmup_epochs=2) == [0, 0.5, 1, 1]
    per_step = Schedule(TrainConfig(epochs=1, warmup_epochs=1))
    assert per_step.factor(1, 5, 10) == 0.5
    per_epoch = Schedule(TrainConfig(epochs=2, warmup_epochs=1, lr_every="epoch"))
    assert per_epoch.factor(1, 5, 10) == 0.0 and per_epoch.factor(2, 5, 10) == 1.0


@pytest.mark.unit
def test_fp16_on_a_cpu_fails_the_trial_with_one_line(tmp_path: Path) -> None:
    from training.jobs._optim import Precision

    with pytest.raises(PluginError, match='training.precision: "fp16" needs a CUDA device; '
                                          'this rank trains on cpu: use "bf16"'):
        Precision("fp16", torch.device("cpu"))
