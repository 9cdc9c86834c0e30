"""The model of benchmarks/plain_loop.py, as a user's plug-in (the plain loop builds it too)."""

from torch import nn


def cnn(params, data):
    c = params.get("channels", 32)
    return nn.Sequential(
        nn.Conv2d(data.input_shape[0], c, 3, padding=1), nn.ReLU(),
        nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * c * (data.input_shape[1] // 4) * (data.input_shape[2] // 4),
                                data.n_outputs))
