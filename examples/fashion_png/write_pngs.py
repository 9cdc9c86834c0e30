"""Write Fashion-MNIST as PNG files in a ``torchvision.datasets.ImageFolder`` tree.

Reads the original IDX files of Debian's ``dataset-fashion-mnist`` (or ``$DETOL_FASHION_MNIST``)
and writes ``OUT/train/<class>/<index>.png`` and ``OUT/test/<class>/<index>.png`` (28x28,
8-bit greyscale). Class folders are ``0_T-shirt_top`` ... ``9_Ankle_boot``: ImageFolder sorts
them, so its class index is the IDX label. ``<index>`` is the image's row in its IDX file.

The tree is written to a temporary directory beside OUT and renamed into place, so OUT is
either complete or absent; ``OUT/written.json`` records what it holds. Running again with the
same ``--limit`` does nothing; with another one it rewrites the tree.

    python examples/fashion_png/write_pngs.py [--out data/fashion-png] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

CLASSES = ("T-shirt_top", "Trouser", "Pullover", "Dress", "Coat",
           "Sandal", "Shirt", "Sneaker", "Bag", "Ankle_boot")
SPLITS = {"train": ("x", "y"), "test": ("x_test", "y_test")}
MARKER = "written.json"


def class_folder(label: int) -> str:
    return f"{label}_{CLASSES[label]}"


def read_arrays() -> dict[str, np.ndarray]:
    """The four IDX arrays (images uint8 (N, 28, 28), labels uint8 (N,)), FileNotFoundError
    naming where they were looked for."""
    from training.data import FASHION_MNIST_FILES, fashion_mnist_dirs, read_idx

    for d in fashion_mnist_dirs():
        if all((d / name).is_file() for name in FASHION_MNIST_FILES.values()):
            return {k: read_idx(d / name) for k, name in FASHION_MNIST_FILES.items()}
    raise FileNotFoundError(
        f"Fashion-MNIST IDX files not found in {[str(d) for d in fashion_mnist_dirs()]}: "
        "apt-get install dataset-fashion-mnist, or set DETOL_FASHION_MNIST to their directory"
    )


def _write_split(root: Path, images: np.ndarray, labels: np.ndarray) -> None:
    from PIL import Image

    for label in range(len(CLASSES)):
        (root / class_folder(label)).mkdir(parents=True)
    for i, (image, label) in enumerate(zip(images, labels, strict=True)):
        Image.fromarray(image, mode="L").save(root / class_folder(int(label)) / f"{i:05d}.png")


def written(out: Path) -> dict[str, int | None] | None:
    """What ``out``'s marker says it holds, or None if it is not a complete tree."""
    try:
        return json.loads((out / MARKER).read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def write_tree(out: Path, *, limit: int | None = None) -> bool:
    """Write the tree at ``out`` (the first ``limit`` images of each split, all if None).
    Returns False when ``out`` already held exactly that."""
    want = {"limit": limit}
    if (written(out) or {}).get("limit", -1) == limit:
        return False
    arrays = read_arrays()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        counts = {}
        for split, (xk, yk) in SPLITS.items():
            x, y = arrays[xk][:limit], arrays[yk][:limit]
            _write_split(tmp / split, x, y)
            counts[split] = len(x)
        (tmp / MARKER).write_text(json.dumps({**want, **counts}) + "\n")
        old = None
        if out.exists():  # a different limit, or a tree cut short: set it aside, then replace
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.rename(out, old / "tree")
        os.rename(tmp, out)  # the complete tree appears at once
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("data/fashion-png"),
                        help="the tree's directory (default: data/fashion-png)")
    parser.add_argument("--limit", type=int, default=None,
                        help="the first N images of each split only (default: all 60,000/10,000)")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error(f"--limit must be >= 1, got {args.limit}")
    try:
        changed = write_tree(args.out, limit=args.limit)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    state = written(args.out) or {}
    verb = "wrote" if changed else "already written:"
    print(f"{verb} {args.out} (train {state.get('train')}, test {state.get('test')} PNG files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
