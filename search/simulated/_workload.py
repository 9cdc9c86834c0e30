"""A synthetic sweep as an objective: ``objective = "simulated:sweep"`` (metric ``loss``, minimize).

Each trial answers at once, like a NAS-Bench-201 lookup, with what a real training run would have
done on a simulated clock (search.simulated._clock): a duration from a log-normal distribution, a
learning curve per epoch (which the study's pruner judges epoch by epoch), and sometimes a fault.
Everything is drawn from ``noise_seed`` (the driver's seed + the trial number): a sweep is the
same every time for a seed.

- Duration: log-normal with shape ``sigma``; a share ``straggle`` of trials is ``slowdown`` times
  slower; scaled so the mean full (unpruned) duration, stragglers included, is ``mean_s``.
- Faults: a share ``fail`` raises (:class:`SimulatedFailure`) partway through; a share ``lost``
  loses its worker partway (the answer's ``lost_at_s``: the driver gets a ``KilledWorker`` then,
  and re-queues the parameters as it does for a real one).
- Landscape: every numeric parameter ``p`` has an optimum ``c_p`` in [0.2, 0.8] (from its name);
  the loss is ``mean_p (value_p - c_p) ** 2`` (optimum 0, attribute ``sim_true_loss``). The
  curve falls from ``loss + 1 + loss`` to it over ``epochs`` epochs, with noise that shrinks as
  training goes on (``noise`` at the end), so early epochs rank trials roughly, late ones well.

Options after the name: ``simulated:sweep,fail=0.1,lost=0,epochs=9`` (names: the fields of
:class:`Workload`).

>>> out = evaluate({"x": 0.5}, dataset="steady", noise_seed=0)
>>> out["sim_time_s"], len(out["curve"]), round(out["user_attrs"]["sim_true_loss"], 4)
(600.0, 20, 0.0009)
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Workload:
    mean_s: float = 600.0  # mean full duration, stragglers included
    sigma: float = 1.0  # log-normal shape (0: every trial takes mean_s)
    epochs: int = 20
    fail: float = 0.02  # share of trials that raise partway
    lost: float = 0.01  # share of trials whose worker disappears partway
    straggle: float = 0.05  # share of trials `slowdown` times slower
    slowdown: float = 4.0
    noise: float = 0.002  # the observed final loss's noise (standard deviation)

    def __post_init__(self) -> None:
        checks = {
            "mean_s": self.mean_s > 0, "sigma": self.sigma >= 0, "epochs": self.epochs >= 1,
            "fail": 0 <= self.fail <= 1, "lost": 0 <= self.lost <= 1,
            "straggle": 0 <= self.straggle <= 1, "slowdown": self.slowdown >= 1,
            "noise": self.noise >= 0,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"simulated workload: {bad[0]}={getattr(self, bad[0])!r} is out of "
                             "range (shares in [0, 1], slowdown >= 1, epochs >= 1, mean_s > 0)")
        if self.fail + self.lost > 1:
            raise ValueError(f"simulated workload: fail + lost = {self.fail + self.lost:g} > 1")


WORKLOADS: dict[str, Workload] = {
    # 10-minute mean trials, heavy-tailed, 2 % raise, 1 % lose their worker, 5 % 4x slower
    "sweep": Workload(),
    # every trial 600 s, no faults (a schedule to check by hand)
    "steady": Workload(sigma=0.0, fail=0.0, lost=0.0, straggle=0.0),
}
DATASETS = tuple(WORKLOADS)
_FIELDS = {f.name: f.type for f in dataclasses.fields(Workload)}


class SimulatedFailure(RuntimeError):
    """A simulated trial's own error; ``partial`` is what it did before (time, curve)."""

    def __init__(self, message: str, partial: dict[str, Any]) -> None:
        super().__init__(message)
        self.partial = partial


def parse(name: str) -> Workload:
    """``sweep`` or ``sweep,fail=0.1,epochs=9`` -> the workload; ValueError (one line)."""
    base, *options = name.split(",")
    if base not in WORKLOADS:
        raise ValueError(f"unknown simulated workload {base!r} (known: {list(WORKLOADS)})")
    changes: dict[str, Any] = {}
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or key not in _FIELDS:
            raise ValueError(
                f"simulated workload option {option!r}: expected NAME=VALUE with NAME in "
                f"{list(_FIELDS)}"
            )
        try:
            changes[key] = int(value) if key == "epochs" else float(value)
        except ValueError:
            raise ValueError(f"simulated workload option {key}: not a number: {value!r}") from None
    return dataclasses.replace(WORKLOADS[base], **changes)


def check_name(name: str) -> None:
    parse(name)


def check_family(family: object | None) -> None:
    """Any space: the landscape reads the numeric parameters and ignores a genome."""


def optimum(name: str) -> float:
    """Where parameter ``name``'s loss is lowest: in [0.2, 0.8], fixed by the name."""
    return 0.2 + 0.6 * zlib.crc32(name.encode()) / 2**32


def true_loss(params: Mapping[str, Any]) -> float:
    numeric = {k: float(v) for k, v in params.items()
               if isinstance(v, int | float) and not isinstance(v, bool)}
    if not numeric:
        raise ValueError("the simulated objective needs a float or int parameter in [space]")
    return sum((v - optimum(k)) ** 2 for k, v in numeric.items()) / len(numeric)


def evaluate(params: Mapping[str, Any], *, dataset: str, noise_seed: int) -> dict[str, Any]:
    """One trial of workload ``dataset`` (a name with options), drawn from ``noise_seed``.

    Returns ``{"values": {"loss"}, "sim_time_s", "sim_epoch_s", "curve": [loss per epoch],
    "user_attrs": {...}}`` (+ ``lost_at_s``), or raises :class:`SimulatedFailure`.
    """
    w = parse(dataset)
    rng = np.random.default_rng(noise_seed)
    loss = true_loss(params)
    straggler = bool(rng.random() < w.straggle)
    # E[lognormal(mu, sigma)] = exp(mu + sigma^2 / 2): the base mean that gives mean_s overall.
    base = w.mean_s / (1 - w.straggle + w.straggle * w.slowdown)
    duration = float(rng.lognormal(math.log(base) - w.sigma**2 / 2, w.sigma)) if w.sigma else base
    duration *= w.slowdown if straggler else 1.0
    epochs = np.arange(1, w.epochs + 1)
    decay = (np.exp(-3 * epochs / w.epochs) - math.exp(-3)) / (1 - math.exp(-3))
    noise = rng.normal(0, 1, w.epochs) * (w.noise + 0.05 * decay)
    curve = [float(v) for v in loss + (1 + loss) * decay + noise]
    fault, when = rng.random(), float(rng.uniform(0.05, 0.95))
    epoch_s = duration / w.epochs
    attrs = {"sim_true_loss": loss, "sim_straggler": straggler}
    if fault < w.fail:
        done = int(when * w.epochs)
        raise SimulatedFailure(
            f"simulated failure after {done} of {w.epochs} epochs",
            {"sim_time_s": when * duration, "sim_epoch_s": epoch_s, "curve": curve[:done],
             "user_attrs": attrs},
        )
    out: dict[str, Any] = {
        "values": {"loss": curve[-1]},
        "sim_time_s": duration,
        "sim_epoch_s": epoch_s,
        "curve": curve,
        "epochs_run": w.epochs,
        "user_attrs": attrs,
    }
    if fault < w.fail + w.lost:
        out["lost_at_s"] = when * duration
    return out
