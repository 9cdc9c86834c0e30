"""Models: a genome (cell, macro DAG, stack) or the built-in MLP as a ``torch.nn.Module``, and
what a model costs (parameters, FLOPs). Add a genome family's builder here. Loads torch on use.
"""

from training._lazy import lazy

__getattr__ = lazy(__name__, {
    "ModelCost": "_genome",
    "build_genome_model": "_genome",
    "model_cost": "_genome",
    "build_mlp": "_mlp",
    "count_flops": "_flops",
})

__all__ = ["ModelCost", "build_genome_model", "build_mlp", "count_flops", "model_cost"]
