"""Lets ``import torchvision`` work where its wheel was built for another torch build.

PyPI's Linux wheel of torchvision 0.28.0 is built against the CUDA torch 2.13.0; with the CPU
build (``torch 2.13.0+cpu``) its C++ extension does not load, and ``import torchvision`` then
fails with ``RuntimeError: operator torchvision::nms does not exist`` (it registers shapes for
two of the extension's operators unconditionally). This module declares those two operators
when, and only when, the extension cannot load. Models, datasets and transforms never use them;
``torchvision.ops.nms`` then raises torchvision's own "Couldn't load custom C++ ops".

Not needed with matching wheels (``pip install torch==2.13.0 torchvision==0.28.0 --index-url
https://download.pytorch.org/whl/cpu``, or both CUDA builds): then this module does nothing.
Import it before torchvision.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

_LIBRARY: torch.library.Library | None = None  # kept alive: the definitions live as long as it


def _extension_loads() -> bool:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return True  # not installed: let `import torchvision` say so
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("_C*.so"))
    if not found:
        return True
    try:
        torch.ops.load_library(str(found[0]))
    except (OSError, RuntimeError):
        return False
    return True


if not _extension_loads():
    _LIBRARY = torch.library.Library("torchvision", "FRAGMENT")
    _LIBRARY.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _LIBRARY.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
