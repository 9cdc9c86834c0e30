"""The one way a ``package.module:function`` name becomes a function: for the plug-ins
(``[training] model``, ``dataset``, ``loss``, ``metrics``), a user's own loop
(``objective = "mpi:..."``) and an objective function run in the driver's process.

>>> import_function("json:dumps")([1])
'[1]'
>>> import_function("json")
Traceback (most recent call last):
ValueError: 'json' is not 'package.module:function'
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections.abc import Callable
from typing import Any

OURS = ("search", "training", "spaces")  # detol's own packages
_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")


def collision_message(top: str, module: str) -> str:
    """Why ``module`` (in a package named ``top``, one of :data:`OURS`) cannot be a plug-in."""
    return (
        f"module {module!r} is in a package named {top!r}, the name of one of detol's own "
        f"packages ({', '.join(OURS)}): rename your package"
    )


def ours(module: str) -> str | None:
    """The one line refusing ``module`` when it is under one of our package names, else None."""
    top = module.split(".")[0]
    return collision_message(top, module) if top in OURS else None


def check_name(text: str) -> str:
    """``text`` if it reads ``package.module:function``, else ValueError (one line)."""
    if not _NAME.match(text):
        raise ValueError(f"{text!r} is not 'package.module:function'")
    return text


def import_function(text: str, *, sys_path: list[str] | None = None) -> Callable[..., Any]:
    """The function ``text`` names; ValueError (one line) when the name is malformed, names a
    module of one of our packages, does not import (whatever the module raised), or has no such
    function. ``sys_path`` entries go first on ``sys.path`` (where a rank finds the user's code).

    A module under one of our package names is refused before it is imported: a user's
    ``training.models`` would be looked for inside detol's ``training`` (and may even be found
    there: ``training.models`` is ours), so the error would be puzzling or the wrong code would run.
    """
    check_name(text)
    for path in reversed(sys_path or []):
        if path not in sys.path:
            sys.path.insert(0, path)
    module_name, _, name = text.partition(":")
    problem = ours(module_name)
    if problem is not None:
        raise ValueError(problem)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - whatever the user's module raises, one line
        raise ValueError(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    found = getattr(module, name, None)
    if not callable(found):
        raise ValueError(f"module {module_name!r} has no function {name!r}")
    return found  # type: ignore[no-any-return]


def resolve_train(text: str, sys_path: list[str] | None = None) -> Callable[[Any], Any]:
    """The function named ``package.module:function`` of a user's own loop (``objective =
    "mpi:..."``): ValueError, one line, if it is not there or does not take one argument, the
    session."""
    fn = import_function(text, sys_path=sys_path)
    name = text.partition(":")[2]
    try:
        inspect.signature(fn).bind(object())
    except TypeError:
        raise ValueError(f"{text} must take one argument, the session: "
                         f"def {name}(session)") from None
    except ValueError:  # no signature (a builtin): let the call tell
        pass
    return fn
