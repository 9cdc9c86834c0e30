"""The model plug-in: ``build(params, data) -> torch.nn.Module``."""

from torch import nn


def build(params: dict, data) -> nn.Module:
    width = params["width"]  # a free name from [space]
    return nn.Sequential(
        nn.Linear(data.input_shape[0], width),
        nn.SiLU(),
        nn.Linear(width, width),
        nn.SiLU(),
        nn.Linear(width, data.n_targets),
    )
