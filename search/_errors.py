"""One exception for every user-facing mistake: it names the field or thing and what was
expected. A study file with several mistakes raises one StudyError that carries them all."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


class StudyError(ValueError):
    """Bad input: a study file, a flag, a storage or a cluster that cannot be used. Exit code 2.

    ``errors`` holds every mistake found (itself when there is one). ``str()`` is one line per
    mistake, the lines after the first starting ``error: ``, so printing ``error: {exc}`` shows
    them all in the same shape:

    >>> exc = StudyError.many([StudyError("a", "bad"), StudyError("b.c", "worse")])
    >>> print(f"error: {exc}")
    error: a: bad
    error: b.c: worse
    >>> (exc.where, exc.message, len(exc.errors))
    ('a', 'bad', 2)
    """

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        self.message = message
        self.errors: tuple[StudyError, ...] = (self,)
        super().__init__(f"{where}: {message}" if where else message)

    @classmethod
    def many(cls, errors: Iterable[StudyError]) -> StudyError:
        """One error for several (in order, repeats dropped); ``where`` and ``message`` are the
        first one's."""
        flat: list[StudyError] = []
        for e in errors:
            for one in e.errors:
                if all(str(one) != str(f) for f in flat):
                    flat.append(one)
        if not flat:
            raise ValueError("StudyError.many needs at least one error")
        if len(flat) == 1:
            return flat[0]
        first = flat[0]
        combined = cls(first.where, first.message)
        combined.errors = tuple(flat)
        combined.args = ("\nerror: ".join(str(e) for e in flat),)
        return combined


def words(values: Iterable[Any]) -> str:
    """Values as plain words: ``['relu', 'tanh']`` -> ``relu, tanh``."""
    return ", ".join(str(v) for v in values)


_ITEM = r"(?:'[^'\[\]()]*'|-?\d+(?:\.\d+)?|True|False|None)"
_PY_LIST = re.compile(rf"(?<!= )\[({_ITEM}(?:, {_ITEM})*)\]|\(({_ITEM}(?:, {_ITEM})+),?\)")


def plain(message: str) -> str:
    """``message`` with Python list and tuple literals of simple values written as words:
    ``unknown op 'x' (known: ['a', 'b'])`` -> ``unknown op 'x' (known: a, b)``. A list right
    after ``= `` is left alone: it is TOML for the user to write (``when = { ranks = [2, 4] }``)."""

    def spell(m: re.Match[str]) -> str:
        items = re.findall(_ITEM, m.group(1) or m.group(2))
        return words(i[1:-1] if i.startswith("'") else i for i in items)

    return _PY_LIST.sub(spell, message)


def pydantic_message(err: Mapping[str, Any]) -> str:
    """A pydantic error's message in plain words (``err`` is one of ``exc.errors()``)."""
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    if kind == "literal_error":
        expected = re.findall(r"'([^']*)'", err.get("ctx", {}).get("expected", ""))
        return f"{err['input']!r} is not one of: {words(expected)}"
    return plain(str(err["msg"]).removeprefix("Value error, "))


def quoted(values: Sequence[Any]) -> str:
    """``'a' or 'b'``, ``'a', 'b' or 'c'``: choices in a sentence."""
    shown = [repr(v) for v in values]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"
