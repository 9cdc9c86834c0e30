"""Research code's other shapes on the plug-in path: dict samples whose target is under "y", a
model that returns (logits, features), an optimizer and a learning-rate schedule of the user's.

Plain PyTorch and scikit-learn; the lines marked ``# detol`` are the only ones that exist for
detol (studies/shapes.toml names the functions and sets target = "y").
"""

import math

import torch
from sklearn.datasets import load_digits
from torch import nn

from training import TorchDatasets  # detol


class Samples(torch.utils.data.Dataset):
    def __init__(self, x, y):
        self.x = torch.as_tensor(x, dtype=torch.float32) / 16.0
        self.y = torch.as_tensor(y)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"image": self.x[i].reshape(1, 8, 8), "y": self.y[i]}


def load(val_fraction):  # detol: the signature
    x, y = load_digits(return_X_y=True)
    n_val = int(len(y) * val_fraction)
    return TorchDatasets(Samples(x[n_val:], y[n_val:]), Samples(x[:n_val], y[:n_val]),  # detol
                         n_classes=10)  # detol


class Net(nn.Module):
    def __init__(self, width, classes):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, width, 3, padding=1), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(4), nn.Flatten())
        self.head = nn.Linear(16 * width, classes)

    def forward(self, image):
        features = self.body(image)
        return self.head(features), features  # (logits, features): trained on the logits


def build(params, data):  # detol: the signature
    return Net(params["width"], data.n_classes)  # detol: data.n_classes


def optimizer(params, model_parameters):  # detol: the signature
    return torch.optim.SGD(model_parameters, lr=params["lr"], momentum=0.9, nesterov=True)


def schedule(progress, params):  # detol: the signature
    """One cosine cycle per half of training, the second at half height."""
    cycle, phase = divmod(2 * progress, 1.0)
    return (0.5 if cycle >= 1 else 1.0) * 0.5 * (1 + math.cos(math.pi * phase))
