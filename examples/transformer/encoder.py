"""A transformer encoder as a user writes one, on mnist1d read as a sequence: each 40-sample
signal cut into 10 tokens of 4 values, a learned position embedding, torch's encoder layers
(``nn.TransformerEncoderLayer``: multi-head attention and an MLP, pre-norm), mean pooling and a
classifier. Plain PyTorch; ``build`` is the model plug-in's signature.

Pruned during training (studies/transformer-prune.toml), the dependency graph finds three kinds
of group: each layer's MLP width (``linear1``'s outputs and ``linear2``'s inputs), and the
residual stream (the token embedding, the position embedding, every attention projection,
``linear2``'s outputs, the norms and the classifier's inputs), cut in multiples of the number
of heads.
"""

import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self, n_classes, width=64, heads=4, depth=2, mlp=128, tokens=10, token=4):
        super().__init__()
        self.tokens, self.token = tokens, token
        self.embed = nn.Linear(token, width)
        self.position = nn.Parameter(torch.zeros(1, tokens, width))
        layer = nn.TransformerEncoderLayer(width, heads, mlp, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, n_classes)

    def forward(self, x):
        x = x.reshape(len(x), self.tokens, self.token)
        h = self.encoder(self.embed(x) + self.position)
        return self.head(self.norm(h).mean(1))


def build(params, data):  # the model plug-in's signature
    return Encoder(data.n_classes, width=params.get("width", 64), heads=params.get("heads", 4),
                   mlp=params.get("mlp", 128))
