"""The genome contract: what every topology genome and every genome family offers.

A *genome* is one network topology (immutable, valid by construction). A *family* is the searched
set of genomes (vocabulary, size bounds); it turns Optuna decisions into genomes define-by-run.
Every family describes a genome through one method, ``_decide(decisions, prefix)``, which asks
``decisions`` for each choice; asking an Optuna trial, a ``trial.params`` dict or a numpy
generator are then the same code path, so ``suggest`` and ``from_params`` cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, ClassVar, Protocol

import numpy as np
import optuna

Choice = None | bool | int | float | str

GENOMES: dict[str, type[Genome]] = {}
FAMILIES: dict[str, type[GenomeFamily]] = {}


class Genome(ABC):
    """A network topology. ``==`` and ``hash`` compare canonical forms: two genomes are equal
    when they describe the same network (isomorphic graphs, or graphs that differ only in parts
    that cannot influence the output). Compare ``to_dict()`` for equality of the raw genome."""

    family: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "family" in cls.__dict__:
            GENOMES[cls.family] = cls

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """The raw genome as JSON-ready data, with a ``"family"`` key."""

    @classmethod
    @abstractmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Genome:
        """Inverse of :meth:`to_dict` (validated)."""

    @abstractmethod
    def canonical(self) -> Genome:
        """The same network with dead parts removed and nodes numbered canonically."""

    @abstractmethod
    def summary(self) -> str:
        """One readable line."""

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @cached_property
    def canonical_json(self) -> str:
        return self.canonical().to_json()

    @cached_property
    def key(self) -> str:
        """Stable hash (20 hex digits) of the canonical form, equal for isomorphic genomes."""
        return hashlib.sha256(self.canonical_json.encode()).hexdigest()[:20]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Genome):
            return NotImplemented
        return self.family == other.family and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __str__(self) -> str:
        return self.summary()


def genome_from_dict(data: Mapping[str, Any]) -> Genome:
    """A genome of any family from its ``to_dict()`` data."""
    if not isinstance(data, Mapping) or "family" not in data:
        raise ValueError(f"genome: expected a table with a 'family' key, got {data!r}")
    kind = data["family"]
    if kind not in GENOMES:
        raise ValueError(f"family: unknown genome family {kind!r} (known: {sorted(GENOMES)})")
    return GENOMES[kind].from_dict(data)


def genome_from_json(text: str) -> Genome:
    """A genome of any family from its ``to_json()`` text.

    >>> from spaces import CellGenome
    >>> arch = "|nor_conv_3x3~0|+|none~0|none~1|+|skip_connect~0|none~1|none~2|"
    >>> g = CellGenome.from_nb201_string(arch)
    >>> genome_from_json(g.to_json()).to_dict() == g.to_dict()
    True
    """
    return genome_from_dict(json.loads(text))


def check_keys(data: Mapping[str, Any], known: Sequence[str], what: str) -> None:
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown key for {what} (known: {sorted(known)})")


# --- decisions: where a family's choices come from -------------------------------------------


class Decisions(Protocol):
    """A source of choices: an Optuna trial, a ``trial.params`` dict, or a random generator."""

    def categorical(self, name: str, choices: Sequence[Choice]) -> Any: ...

    def integer(self, name: str, low: int, high: int) -> int: ...


class TrialDecisions:
    def __init__(self, trial: optuna.Trial) -> None:
        self.trial = trial

    def categorical(self, name: str, choices: Sequence[Choice]) -> Any:
        return self.trial.suggest_categorical(name, tuple(choices))

    def integer(self, name: str, low: int, high: int) -> int:
        return self.trial.suggest_int(name, low, high)


def same_choice(a: Any, b: Any) -> bool:
    return bool(a == b) and isinstance(a, bool) == isinstance(b, bool)


class ParamsDecisions:
    """Reads decisions back from ``trial.params``; anything missing or out of range is an error."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.params = params

    def _get(self, name: str) -> Any:
        if name not in self.params:
            raise ValueError(f"{name}: missing parameter (the genome cannot be rebuilt without it)")
        return self.params[name]

    def categorical(self, name: str, choices: Sequence[Choice]) -> Any:
        value = self._get(name)
        for choice in choices:
            if same_choice(choice, value):
                return choice
        raise ValueError(f"{name}: {value!r} is not one of {list(choices)}")

    def integer(self, name: str, low: int, high: int) -> int:
        value = self._get(name)
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ValueError(f"{name}: expected an integer, got {value!r}")
        if not low <= value <= high:
            raise ValueError(f"{name}: {value} is out of range [{low}, {high}]")
        return int(value)


class RngDecisions:
    """Uniform random decisions from an explicit numpy generator (no Optuna study needed)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def categorical(self, name: str, choices: Sequence[Choice]) -> Any:
        return choices[int(self.rng.integers(len(choices)))]

    def integer(self, name: str, low: int, high: int) -> int:
        return int(self.rng.integers(low, high + 1))


def pick(decisions: Decisions, name: str, choices: Sequence[Choice]) -> Any:
    """A categorical decision; a single choice is a constant and is not asked (no parameter)."""
    return choices[0] if len(choices) == 1 else decisions.categorical(name, choices)


def count(decisions: Decisions, name: str, low: int, high: int) -> int:
    """An integer decision; a fixed value is a constant and is not asked (no parameter)."""
    return low if low == high else decisions.integer(name, low, high)


def put(params: dict[str, Any], name: str, value: Any, n_choices: int) -> None:
    """The inverse of :func:`pick` / :func:`count`: record ``value`` unless it was a constant."""
    if n_choices > 1:
        params[name] = value


# --- families ----------------------------------------------------------------------------------


class GenomeFamily(ABC):
    """A searched set of genomes. Use it as a dimension of :class:`spaces.Space`, or directly:

    ``suggest(trial, prefix)`` samples a genome through ``trial.suggest_*`` only (any sampler),
    ``from_params(trial.params, prefix)`` rebuilds it, ``to_params(genome, prefix)`` is the
    inverse (for samplers that propose genomes, e.g. evolution), ``sample(rng)`` draws one
    without Optuna, and ``check(genome)`` says whether a genome belongs to the family.
    """

    name: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            FAMILIES[cls.name] = cls

    @abstractmethod
    def _decide(self, decisions: Decisions, prefix: str) -> Genome: ...

    @abstractmethod
    def to_params(self, genome: Genome, prefix: str = "genome") -> dict[str, Any]:
        """The ``trial.params`` that make ``suggest`` / ``from_params`` return ``genome``."""

    @abstractmethod
    def check(self, genome: Genome) -> None:
        """Raise ValueError unless ``genome`` is a member of this family (one line)."""

    def suggest(self, trial: optuna.Trial, prefix: str = "genome") -> Genome:
        """Sample a genome define-by-run; parameter names start with ``prefix + "."``."""
        return self._decide(TrialDecisions(trial), prefix)

    def from_params(self, params: Mapping[str, Any], prefix: str = "genome") -> Genome:
        """The genome ``suggest`` returned, rebuilt from ``trial.params`` alone."""
        return self._decide(ParamsDecisions(params), prefix)

    def sample(self, rng: np.random.Generator) -> Genome:
        """A random member (each decision uniform), without an Optuna study."""
        return self._decide(RngDecisions(rng), "genome")

    def values_to_check(self) -> list[Any]:
        """Part of the :class:`spaces.Dimension` protocol: a family has no scalar edge values."""
        return []

    def _check_family(self, genome: Genome) -> None:
        if genome.family != self.name:
            raise ValueError(
                f"genome: a {genome.family} genome is not a member of a {self.name} family"
            )


def make_family(family: str, **options: Any) -> GenomeFamily:
    """A family from a study file's table, e.g. ``make_family("cell", nodes=4)``.

    Every error is one line that starts with the offending key.

    >>> make_family("cell", nodes=4).name
    'cell'
    """
    if family not in FAMILIES:
        raise ValueError(f"family: unknown genome family {family!r} (known: {sorted(FAMILIES)})")
    cls = FAMILIES[family]
    known = getattr(cls, "OPTIONS", ())
    check_keys(options, known, f"a {family} family")
    return cls(**options)


# --- argument checks shared by the families ----------------------------------------------------


def check_int(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name}: {value} is out of range [{low}, {high}]")
    return int(value)


def check_min_max(prefix: str, low: Any, high: Any, bounds: tuple[int, int]) -> tuple[int, int]:
    low = check_int(f"min_{prefix}", low, *bounds)
    high = check_int(f"max_{prefix}", high, *bounds)
    if low > high:
        raise ValueError(f"min_{prefix}: {low} must be <= max_{prefix} ({high})")
    return low, high


def check_choices(
    name: str, values: Any, known: Sequence[Any] | None = None, *, what: str = "value"
) -> tuple[Any, ...]:
    """A non-empty sequence of distinct choices, each in ``known`` when given."""
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise ValueError(f"{name}: expected a list, got {values!r}")
    if not values:
        raise ValueError(f"{name}: must not be empty")
    out = tuple(values)
    if len(set(map(repr, out))) != len(out):
        raise ValueError(f"{name}: choices must be distinct, got {list(out)}")
    if known is not None:
        for v in out:
            if not any(same_choice(v, k) for k in known):
                raise ValueError(f"{name}: unknown {what} {v!r} (known: {sorted(known)})")
    return out


def check_int_choices(
    name: str, values: Any, low: int, high: int, *, odd: bool = False
) -> tuple[int, ...]:
    out = check_choices(name, values)
    for v in out:
        check_int(name, v, low, high)
        if odd and v % 2 == 0:
            raise ValueError(f"{name}: {v} must be odd (so 'same' padding keeps the size)")
    return tuple(int(v) for v in out)


def short_hash(*parts: Any) -> str:
    """A stable digest of ``repr(parts)`` (Python's ``hash`` changes between processes)."""
    return hashlib.sha1(repr(parts).encode()).hexdigest()
