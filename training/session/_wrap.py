"""A user's optimizer wrapped with one of our algorithms: Horovod's shape, without subclassing.

``step()`` does what the built-in trainer does around ``optimizer.step()``: the algorithm's
``before_step`` (sync: wait for the gradient allreduce that backward started), the step, then
``after_step`` (asgd: blend and send states; localsgd: average every few steps).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from training.algorithms import ALGORITHMS, make_algorithm

# What a user's loop can use: "batch" steps once an epoch, at an end only the trainer knows.
WRAPPABLE = tuple(name for name in ALGORITHMS if name != "batch")


class DistributedOptimizer:
    """``optimizer`` driven by ``algorithm`` (an :class:`training.algorithms._base.Algorithm`).

    Use it as the optimizer itself: ``zero_grad()``, ``loss.backward()``, ``step()``. The loss
    is the mean over this rank's batch, as without detol: sync sums the gradients over the
    ranks and ``step`` divides them by the rank count (the mean over the global batch, as
    Horovod and DDP do). ``consensus()`` is the context in which to evaluate weights every rank
    agrees on (asgd and localsgd average them; sync's are equal already).
    """

    def __init__(
        self, optimizer: torch.optim.Optimizer, algorithm: Any, *, name: str, average: bool,
        make: Callable[[], Any] | None = None,
    ) -> None:
        self.optimizer = optimizer
        self.algorithm = algorithm
        self.name = name
        self.make = make  # the algorithm again, on the model's current parameters
        self._scale = 1.0 / algorithm.comm.size if average and algorithm.comm.size > 1 else 1.0
        self._params = [p for g in optimizer.param_groups for p in g["params"]]
        self.steps = 0
        # Pruning during training (Session.prune_units): (UnitPruning, the wrapped model).
        self.pruning: tuple[Any, torch.nn.Module] | None = None

    def renew(self, algorithm: Any) -> None:
        """After a prune: ``algorithm`` (rebuilt on the new parameters) drives the step."""
        self.algorithm = algorithm
        self._params = [p for g in self.optimizer.param_groups for p in g["params"]]

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @property
    def state(self) -> Any:
        return self.optimizer.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.algorithm.zero_grad()

    def step(self, closure: Any = None) -> Any:
        if closure is not None:
            raise ValueError("step(closure): a wrapped optimizer takes no closure; call "
                             "loss.backward() and then step()")
        if not self.algorithm.before_step(False):  # sync: waits for all ranks
            return None
        if self._scale != 1.0:
            with torch.no_grad():
                for p in self._params:
                    if p.grad is not None:
                        p.grad.mul_(self._scale)  # summed over ranks -> mean
        if self.pruning is not None:  # as the trainer: taylor's sums, the sparsity penalty
            pruning, model = self.pruning
            pruning.after_backward(model)
        out = self.optimizer.step()
        self.algorithm.after_step()
        self.steps += 1
        return out

    @contextlib.contextmanager
    def consensus(self) -> Iterator[None]:
        """Weights every rank agrees on, for evaluation (a collective except for sync)."""
        with self.algorithm.consensus():  # waits for all ranks (except sync)
            yield

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state and the algorithm's (for a checkpoint)."""
        return {**self.optimizer.state_dict(), "detol_algorithm": self.algorithm.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        own = state.pop("detol_algorithm", None)
        self.optimizer.load_state_dict(state)
        if own is not None:
            self.algorithm.load_state_dict(own)

    def __repr__(self) -> str:
        return f"DistributedOptimizer({self.name}, {self.optimizer!r})"


def wrap(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    comm: Any,
    algorithm: str = "sync",
    *,
    send_every: int = 4,
    local_steps: int = 8,
    bucket_kb: int = 256,
    seed: int = 0,
) -> tuple[torch.nn.Module, DistributedOptimizer]:
    """``model`` with rank 0's weights on every rank, and ``optimizer`` wrapped (see
    :class:`DistributedOptimizer`). Collective: every rank calls it, in the same order."""
    if algorithm not in WRAPPABLE:
        raise ValueError(f"wrap: unknown algorithm {algorithm!r} (known: {', '.join(WRAPPABLE)})")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"wrap: optimizer must be a torch.optim.Optimizer, got "
                        f"{type(optimizer).__name__}")
    owned = {id(p) for p in model.parameters()}
    if any(id(p) not in owned for g in optimizer.param_groups for p in g["params"]):
        raise ValueError("wrap: the optimizer holds parameters that are not the model's "
                         "(make the optimizer from this model's parameters)")
    lr = float(optimizer.param_groups[0]["lr"])
    make = functools.partial(make_algorithm, algorithm, model, comm, lr=lr,
                             send_every=send_every, local_steps=local_steps,
                             bucket_bytes=bucket_kb * 1024, seed=seed)
    algo = make()
    algo.broadcast_parameters(root=0)  # waits for rank 0: every rank starts from its weights
    return model, DistributedOptimizer(optimizer, algo, name=algorithm,
                                       average=algorithm == "sync", make=make)
