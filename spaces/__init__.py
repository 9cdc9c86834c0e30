"""What is searched: hyperparameter dimensions and their encoding as Optuna parameters.

>>> from spaces import Float, Categorical, Space
>>> space = Space({"lr": Float(low=1e-3, high=1e-1, log=True), "act": Categorical(("relu", "tanh"))})
>>> sorted(space.names)
['act', 'lr']
"""

from spaces._dimensions import Categorical, Dimension, Float, Int, Space

__all__ = ["Categorical", "Dimension", "Float", "Int", "Space"]
