"""``[training] prune = { ... }``: structured pruning during training, validated in one place.

Every key is searchable in ``[space]`` as ``prune_<key>`` (``prune_target``, ``prune_criterion``
...); a searched key applies to trials whose ``[training]`` has no prune table too (the table's
defaults fill the rest), so ``prune_target = { type = "float", low = 0.0, high = 0.8 }`` makes
"how hard to prune" a dimension like any other (0: the dense model). How units are chosen and
removed is training/pruning/_units.py.

>>> PruneConfig(target=0.5, start_epoch=2, end_epoch=4, steps=3).events()
{2: 0.16666666666666666, 3: 0.3333333333333333, 4: 0.5}
>>> {e: round(f, 3) for e, f in PruneConfig(target=0.5, start_epoch=2, end_epoch=4, steps=3,
...                                          schedule="cubic").events().items()}
{2: 0.352, 3: 0.481, 4: 0.5}
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

CRITERIA = ("l1", "bn_l1", "taylor")
SCHEDULES = ("linear", "cubic")
UNITS = ("all", "neurons", "channels")
PREFIX = "prune_"


class PruneConfig(BaseModel):
    """Which units, by which importance, how many and when (searchable as ``prune_<key>``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    units: Literal["all", "neurons", "channels"] = Field(
        "all", description="groups rooted at linear layers (neurons), at convolutions "
        "(channels), or both; a group is a layer's outputs with all that is coupled to them "
        "(docs/training-core.md; the classifier's outputs are never pruned)",
    )
    criterion: Literal["l1", "bn_l1", "taylor"] = Field(
        "l1", description="importance of a unit (Torch-Pruning's, over its whole group): l1 = "
        "L1 norm of every weight coupled to it (Li et al. 2017); bn_l1 = |scale| of its batch "
        "norms (Network Slimming; every group needs one); taylor = |weight x loss gradient| "
        "summed over the batches since the last step (first-order Taylor, Molchanov et al. "
        "2019; needs start_epoch >= 2)",
    )
    keep: tuple[str, ...] = Field(
        (), description="modules never pruned, as model.named_modules() names them (a name "
        "covers what is under it): their outputs keep every unit; not searchable",
    )
    sparsity: float = Field(
        0.0, ge=0, description="L1 penalty on what the criterion measures (weights for l1, "
        "batch-norm scales for bn_l1, for taylor the batch norm's scales where a layer has "
        "one, else its weights) until end_epoch; Network Slimming uses 1e-4 to 1e-5",
    )
    target: float = Field(
        0.5, ge=0, lt=1, description="fraction of each layer's prunable units removed by "
        "end_epoch (0: dense)",
    )
    start_epoch: int = Field(2, ge=1, description="first pruning step, at the start of this epoch")
    end_epoch: int = Field(
        3, ge=1, description="last pruning step (at its start): target is reached here",
    )
    steps: int = Field(
        2, ge=1, description="pruning steps, spread evenly over start_epoch..end_epoch",
    )
    schedule: Literal["linear", "cubic"] = Field(
        "linear", description="how the removed fraction grows over the steps: linear (equal "
        "shares) or cubic (Zhu & Gupta 2017: target * (1 - (1 - k/steps)^3) after step k, "
        "large cuts early, small ones late)",
    )

    input_layer: bool = Field(
        True, description="prune the layer that reads the input too; false keeps all its "
        "units (each is cheap, its inputs being the data's channels, but the next layer then "
        "keeps all its inputs)",
    )
    average: bool = Field(
        True, description="at each step, the ranks' weights are averaged first, so every rank "
        "cuts and goes on from one model (asgd, localsgd, simuparallel: their ranks hold "
        "different weights; sync's are equal and nothing is sent)",
    )
    rescale: bool = Field(
        False, description="after a step, multiply each layer's gradient by its dense fan-in / "
        "its fan-in now, so a layer whose inputs were pruned learns as fast as before (a "
        "weight update moves a unit's output by lr x fan-in; SGD only, Adam normalises it away)",
    )

    @model_validator(mode="after")
    def _schedule(self) -> PruneConfig:
        if self.end_epoch < self.start_epoch:
            raise ValueError(
                f"end_epoch ({self.end_epoch}) is before start_epoch ({self.start_epoch})"
            )
        room = self.end_epoch - self.start_epoch + 1
        if self.steps > room:
            raise ValueError(
                f"steps = {self.steps} do not fit in epochs {self.start_epoch}..{self.end_epoch} "
                f"(one step per epoch at most: steps <= {room})"
            )
        if self.criterion == "taylor" and self.start_epoch < 2:
            raise ValueError("criterion 'taylor' needs start_epoch >= 2 (it measures the "
                             "gradients of the epochs before a step)")
        return self

    def events(self) -> dict[int, float]:
        """``{epoch: fraction of each layer's units removed by then}`` (cumulative)."""
        if self.steps == 1:
            return {self.end_epoch: self.target}
        span, n = self.end_epoch - self.start_epoch, self.steps
        share = ((lambda k: k / n) if self.schedule == "linear"
                 else (lambda k: 1.0 - (1.0 - k / n) ** 3))
        return {self.start_epoch + round(k * span / (n - 1)): self.target * share(k + 1)
                for k in range(n)}


SEARCHABLE_PRUNE = tuple(PREFIX + k for k in PruneConfig.model_fields if k != "keep")


def field_of(name: str) -> Any:
    """The pydantic field behind a searchable ``prune_<key>`` name, else None."""
    if not name.startswith(PREFIX):
        return None
    return PruneConfig.model_fields.get(name[len(PREFIX):]) if name in SEARCHABLE_PRUNE else None


def apply_prune_params(data: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a TrainConfig dump) with the searched ``prune_<key>`` values of ``params`` put
    into its prune table (made from the defaults when it has none)."""
    searched = {k[len(PREFIX):]: v for k, v in params.items() if k in SEARCHABLE_PRUNE}
    if not searched:
        return data
    return {**data, "prune": {**(data.get("prune") or {}), **searched}}
