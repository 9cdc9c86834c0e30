"""examples/fashion_png: the PNG tree writer (against the IDX arrays) and the user's ResNet-18
model and ImageFolder datasets. Reads Debian's dataset-fashion-mnist; needs torchvision."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

pytestmark = pytest.mark.unit  # starts no process or server (tests/_starts.py)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fashion_png"
LIMIT = 30


def _example(name: str) -> ModuleType:
    """A module of examples/fashion_png, imported as the study's PYTHONPATH imports it."""
    if str(EXAMPLE) not in sys.path:
        sys.path.insert(0, str(EXAMPLE))
    try:
        return __import__(name)
    except ImportError as exc:  # torchvision (or Pillow, which comes with it) missing
        pytest.fail(f"{exc}: the ResNet-18 example needs torchvision: pip install -e '.[vision]'")


@pytest.fixture(scope="module")
def idx() -> dict[str, np.ndarray]:
    return _example("write_pngs").read_arrays()


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("png") / "fashion-png"
    assert _example("write_pngs").write_tree(out, limit=LIMIT) is True
    return out


@pytest.mark.parametrize("split,keys", [("train", ("x", "y")), ("test", ("x_test", "y_test"))])
def test_tree_matches_the_idx_arrays(tree: Path, idx: dict[str, np.ndarray], split: str,
                                     keys: tuple[str, str]) -> None:
    from PIL import Image

    wp = _example("write_pngs")
    images, labels = idx[keys[0]][:LIMIT], idx[keys[1]][:LIMIT]
    folders = sorted(p.name for p in (tree / split).iterdir())
    assert folders == [wp.class_folder(k) for k in range(10)]  # sorted = label order
    counts = [len(list((tree / split / f).glob("*.png"))) for f in folders]
    assert counts == np.bincount(labels, minlength=10).tolist()
    for i in (0, 7, LIMIT - 1):
        path = tree / split / wp.class_folder(int(labels[i])) / f"{i:05d}.png"
        with Image.open(path) as png:
            assert png.mode == "L" and png.size == (28, 28)
            assert np.array_equal(np.asarray(png), images[i])


def test_writer_is_idempotent_and_replaces_a_different_limit(tmp_path: Path) -> None:
    wp = _example("write_pngs")
    out = tmp_path / "t"
    assert wp.write_tree(out, limit=5) is True
    stamp = (out / "train").stat().st_mtime_ns
    assert wp.write_tree(out, limit=5) is False  # same limit: nothing written
    assert (out / "train").stat().st_mtime_ns == stamp
    assert wp.write_tree(out, limit=8) is True
    assert wp.written(out) == {"limit": 8, "train": 8, "test": 8}
    assert sum(1 for _ in (out / "test").rglob("*.png")) == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]  # no temporary left


def test_writer_leaves_nothing_when_it_fails(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    wp = _example("write_pngs")
    calls = []

    def fail_on_test_split(root: Path, images: np.ndarray, labels: np.ndarray) -> None:
        calls.append(root.name)
        if root.name == "test":
            raise OSError("disk full")
        original(root, images, labels)

    original = wp._write_split
    monkeypatch.setattr(wp, "_write_split", fail_on_test_split)
    with pytest.raises(OSError, match="disk full"):
        wp.write_tree(tmp_path / "t", limit=4)
    assert calls == ["train", "test"]
    assert list(tmp_path.iterdir()) == []  # neither the tree nor its temporary


def test_writer_command_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    wp = _example("write_pngs")
    with pytest.raises(SystemExit) as exit_info:
        wp.main(["--out", str(tmp_path / "t"), "--limit", "0"])
    assert exit_info.value.code == 2 and "--limit must be >= 1, got 0" in capsys.readouterr().err
    monkeypatch.setattr("training.data.fashion_mnist_dirs", lambda: [tmp_path / "nowhere"])
    assert wp.main(["--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: Fashion-MNIST IDX files not found")
    assert not (tmp_path / "t").exists()


def test_resnet_builder_takes_one_channel_28x28() -> None:
    import torch

    from training import DataInfo

    resnet = _example("resnet")
    info = DataInfo(input_shape=(1, 28, 28), n_classes=10, n_targets=None,
                    task="classification", n_train=100)
    model = resnet.build({"lr": 0.1}, info)
    assert isinstance(model, torch.nn.Module)
    assert model.conv1.in_channels == 1 and model.conv1.stride == (1, 1)
    assert model(torch.zeros(3, 1, 28, 28)).shape == (3, 10)
    assert model.fc.out_features == 10


def test_resnet_load_reads_the_png_tree_lazily(tree: Path, idx: dict[str, np.ndarray],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from training import TorchDatasets

    resnet = _example("resnet")
    monkeypatch.setattr(resnet, "ROOT", str(tree))
    data = resnet.load(0.2)
    assert isinstance(data, TorchDatasets) and data.n_classes == 10
    assert (len(data.train), len(data.val), len(data.test)) == (24, 6, LIMIT)
    # No overlap between train and validation; together the whole train/ folder.
    rows = sorted(data.train.indices + data.val.indices)
    assert rows == list(range(LIMIT))
    x, y = data.test[0]  # ImageFolder's order: class folder, then file name
    path, label = data.test.samples[0]
    i = int(Path(path).stem)
    assert label == y == int(idx["y_test"][i])
    assert x.shape == (1, 28, 28) and x.dtype == torch.float32
    expected = (torch.from_numpy(idx["x_test"][i].astype(np.float32)) / 255 - 0.286) / 0.353
    assert torch.allclose(x[0], expected, atol=1e-5)
