"""What is searched: hyperparameter dimensions, topology genomes, and their Optuna encoding.

Dimensions sample one value each; a genome family samples a whole network topology, define-by-run
through ``trial.suggest_*`` so any Optuna sampler can search it. A family is a dimension too.
A dimension can apply only when others have given values (``Space(..., when=...)``): it is then
asked for after them, and only when its condition holds.

>>> import optuna
>>> from spaces import CellFamily, Float, Space
>>> space = Space({"lr": Float(low=1e-3, high=1e-1, log=True), "genome": CellFamily()})
>>> params = space.suggest(optuna.create_study().ask())
>>> params["genome"].family
'cell'

Genomes: :class:`CellGenome` (fixed nodes, an op per edge: NAS-Bench-201), :class:`MacroGenome`
(CGP-style DAG of ops with their own hyperparameters), :class:`StackGenome` (MLP / CNN stack).
Each is valid by construction, compares by canonical form (``genome.key`` is a stable hash), and
round-trips through ``to_json`` / :func:`genome_from_json`. Families: :class:`CellFamily`,
:class:`MacroFamily`, :class:`StackFamily` (or :func:`make_family` from a study file's table);
:func:`mutate` and :func:`crossover` vary genomes for evolutionary search.
:class:`SpaceEmbedding` maps a trial's parameters (canonical genome and scalars) to a vector.
"""

from spaces._cell import CELL_OPS, NB201_OPS, CellFamily, CellGenome, cell_edges
from spaces._dimensions import Categorical, Dimension, Float, Int
from spaces._embedding import SpaceEmbedding
from spaces._genome import (
    FAMILIES,
    Genome,
    GenomeFamily,
    genome_from_dict,
    genome_from_json,
    make_family,
)
from spaces._macro import MACRO_OPS, MacroFamily, MacroGenome, MacroNode
from spaces._mutation import MUTATIONS, applicable_mutations, crossover, mutate
from spaces._space import Space, condition_problems
from spaces._stack import ACTIVATIONS, Layer, StackFamily, StackGenome

__all__ = [
    "ACTIVATIONS",
    "CELL_OPS",
    "FAMILIES",
    "MACRO_OPS",
    "MUTATIONS",
    "NB201_OPS",
    "Categorical",
    "CellFamily",
    "CellGenome",
    "Dimension",
    "Float",
    "Genome",
    "GenomeFamily",
    "Int",
    "Layer",
    "MacroFamily",
    "MacroGenome",
    "MacroNode",
    "Space",
    "SpaceEmbedding",
    "StackFamily",
    "StackGenome",
    "applicable_mutations",
    "cell_edges",
    "condition_problems",
    "crossover",
    "genome_from_dict",
    "genome_from_json",
    "make_family",
    "mutate",
]
