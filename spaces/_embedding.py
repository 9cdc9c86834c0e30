"""A fixed-length vector per trial of a space: its genome (canonical form, so isomorphic genomes
embed alike) and its scalar dimensions, for predictors, distances and maps.

Layout: the genome's features first (see :mod:`spaces._genome_encoding`), then each scalar
dimension in the space's order:

- a float or int: its value mapped to [0, 1] (on a log scale when the dimension has one, clipped
  to the range); a dimension with a condition adds ``NAME:absent`` (1 when it does not apply).
  An inactive or missing value encodes as 0 (and ``absent`` 1), a missing unconditional one 0.5.
- a categorical: one-hot over its choices (``NAME=choice``); all zeros when inactive or missing.

>>> from spaces import CellFamily, Float, Space
>>> space = Space({"lr": Float(low=1e-3, high=1e-1, log=True), "genome": CellFamily()})
>>> embed = SpaceEmbedding(space, kind="onehot")
>>> params = {"lr": 0.01, **CellFamily().to_params(CellFamily().sample(np.random.default_rng(0)))}
>>> embed(params).shape == (embed.dim,), embed.names[-1], float(embed(params)[-1])
(True, 'lr', 0.5)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from spaces._dimensions import Categorical, Float, Int
from spaces._genome import Genome, GenomeFamily
from spaces._genome_encoding import GenomeEncoder, genome_encoder, parse_kind
from spaces._space import Space, same_value

# Chosen by benchmarks/embedding.py: the best mean Kendall tau of a random forest ranking unseen
# NAS-Bench-201 cells (3 datasets x 50/100/500 training cells x 20 splits); injective on cells.
DEFAULT_KIND = "onehot+wl1"
KINDS = (
    "onehot",
    "path",
    "wl1",
    "wl",
    "onehot+path",
    "onehot+wl1",
    "path+wl1",
    "path+wl",
    "onehot+path+wl",
)


def unit(dim: Float | Int, value: Any, name: str) -> float:
    """``value`` mapped to [0, 1] over ``dim``'s range (log scale when it has one)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{name}: expected a number, got {value!r}")
    low, high, x = float(dim.low), float(dim.high), float(value)
    if dim.log:
        low, high, x = math.log(low), math.log(high), math.log(max(x, dim.low))
    return 0.0 if high == low else min(1.0, max(0.0, (x - low) / (high - low)))


class SpaceEmbedding:
    """Maps a trial's ``params`` (as Optuna stores them; a genome under its dimension's prefix,
    e.g. ``genome.0->1``) to a float64 vector of length :attr:`dim`; :attr:`names` names each
    feature. ``kind`` picks the genome encoding: ``onehot``, ``path``, ``wl`` (``wlH``: H WL
    iterations) or a ``+`` join such as ``onehot+wl1``.
    """

    def __init__(self, space: Space, *, kind: str = DEFAULT_KIND) -> None:
        if not isinstance(space, Space):
            raise TypeError(f"space: expected a spaces.Space, got {type(space).__name__}")
        parts, wl_iterations = parse_kind(kind)
        self.space = space
        self.kind = kind
        self.genome_name: str | None = None
        self.encoder: GenomeEncoder | None = None
        names: list[str] = []
        for name, dim in space.items():
            if isinstance(dim, GenomeFamily):
                if self.encoder is not None:
                    raise ValueError(f"{name}: a space can embed one genome family, not two")
                self.genome_name = name
                self.encoder = genome_encoder(dim, parts, wl_iterations)
                prefix = "genome."
                names[:0] = [name + "." + n[len(prefix) :] for n in self.encoder.names]
            elif isinstance(dim, Float | Int):
                names.append(name)
                if space.condition(name):
                    names.append(f"{name}:absent")
            elif isinstance(dim, Categorical):
                names += [f"{name}={c}" for c in dim.choices]
            else:
                raise ValueError(f"{name}: cannot embed a {type(dim).__name__} dimension")
        self.names: tuple[str, ...] = tuple(names)
        self.dim = len(names)

    def genome_vector(self, genome: Genome) -> np.ndarray:
        """The genome part alone (its canonical form's features)."""
        if self.encoder is None:
            raise ValueError("genome: the space has no genome family to embed")
        return self.encoder(genome)

    def genome_of(self, params: Mapping[str, Any]) -> Genome:
        """The genome in ``params`` (a ValueError naming the parameter when it is incomplete)."""
        assert self.genome_name is not None
        family = self.space[self.genome_name]
        assert isinstance(family, GenomeFamily)
        return family.from_params(params, prefix=self.genome_name)

    def __call__(self, params: Mapping[str, Any]) -> np.ndarray:
        if self.encoder is None:
            return self.scalars(params)
        return np.concatenate([self.encoder(self.genome_of(params)), self.scalars(params)])

    def scalars(self, params: Mapping[str, Any]) -> np.ndarray:
        """The scalar part alone (the last ``dim - len(genome features)`` entries)."""
        scalars: list[float] = []
        for name, dim in self.space.items():
            if isinstance(dim, GenomeFamily):
                continue
            active = self.space.is_active(name, params) and name in params
            if isinstance(dim, Categorical):
                hot = self._one_hot(name, dim.choices, params[name]) if active else None
                scalars += hot or [0.0] * len(dim.choices)
                continue
            assert isinstance(dim, Float | Int)
            conditional = bool(self.space.condition(name))
            if active:
                scalars.append(unit(dim, params[name], name))
            else:
                scalars.append(0.0 if conditional else 0.5)
            if conditional:
                scalars.append(0.0 if active else 1.0)
        return np.array(scalars, dtype=np.float64)

    @staticmethod
    def _one_hot(name: str, choices: Sequence[Any], value: Any) -> list[float]:
        hot = [float(same_value(value, c)) for c in choices]
        if not any(hot):
            raise ValueError(f"{name}: {value!r} is not one of {list(choices)}")
        return hot

    def many(self, params_list: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """One row per ``params`` (shape ``(n, dim)``)."""
        out = np.zeros((len(params_list), self.dim))
        for row, params in enumerate(params_list):
            out[row] = self(params)
        return out

    def __repr__(self) -> str:
        return f"SpaceEmbedding(kind={self.kind!r}, dim={self.dim})"
