from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torchvision.datasets

from fedbench.core.cache import cache_dir
from fedbench.core.errors import DataMissingError
from fedbench.data import load_dataset
from fedbench.data.mnist_family import read_idx_gz

MNIST_NAMES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]


def _idx_bytes(array: np.ndarray) -> bytes:
    magic = 2051 if array.ndim == 3 else 2049
    return struct.pack(f">{1 + array.ndim}I", magic, *array.shape) + array.astype(np.uint8).tobytes()


def write_idx_set(raw: Path, names: list[str], gz: bool, n_train: int = 5, n_test: int = 3, seed: int = 0) -> dict:
    """Fake idx files (train images, train labels, test images, test labels) named `names`; returns the arrays."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train_x": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train_y": rng.integers(0, 10, n_train, dtype=np.uint8),
        "test_x": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "test_y": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    raw.mkdir(parents=True, exist_ok=True)
    for name, array in zip(names, arrays.values(), strict=False):
        blob = _idx_bytes(array)
        if gz:
            with gzip.open(raw / f"{name}.gz", "wb") as f:
                f.write(blob)
        else:
            (raw / name).write_bytes(blob)
    return arrays


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in [root, *root.rglob("*")]}


@pytest.mark.parametrize(
    "name, folder, first_class", [("mnist", "MNIST", "0"), ("fmnist", "FashionMNIST", "T-shirt/top")]
)
def test_reads_gz_files_without_writing_to_the_root(tmp_path, name, folder, first_class):
    arrays = write_idx_set(tmp_path / folder / "raw", MNIST_NAMES, gz=True)
    before = _snapshot(tmp_path)
    ds = load_dataset(name, tmp_path)
    assert _snapshot(tmp_path) == before
    assert ds.x.shape == (8, 1, 28, 28) and ds.x.dtype == np.uint8
    assert np.array_equal(ds.x[:5, 0], arrays["train_x"]) and np.array_equal(ds.x[5:, 0], arrays["test_x"])
    assert ds.y.tolist() == [*arrays["train_y"], *arrays["test_y"]] and ds.y.dtype == np.int64
    assert ds.meta["split"].tolist() == ["train"] * 5 + ["test"] * 3
    assert ds.num_classes == 10 and len(ds.classes) == 10 and ds.classes[0] == first_class


def test_reads_extracted_files_through_torchvision(tmp_path, monkeypatch):
    arrays = write_idx_set(tmp_path / "MNIST" / "raw", MNIST_NAMES, gz=False)
    opened = []
    real_init = torchvision.datasets.MNIST.__init__

    def spy(self, root, *args, **kwargs):
        opened.append(kwargs.get("download"))
        real_init(self, root, *args, **kwargs)

    monkeypatch.setattr(torchvision.datasets.MNIST, "__init__", spy)
    ds = load_dataset("mnist", tmp_path)
    assert opened == [False, False]
    assert np.array_equal(ds.x[:5, 0], arrays["train_x"]) and ds.y.tolist() == [*arrays["train_y"], *arrays["test_y"]]


def test_one_extracted_file_beside_the_gz_set_does_not_confuse_the_reader(tmp_path):
    arrays = write_idx_set(tmp_path / "MNIST" / "raw", MNIST_NAMES, gz=True)
    write_idx_set(tmp_path / "MNIST" / "raw", MNIST_NAMES[:1], gz=False)  # someone gunzipped one file
    assert np.array_equal(load_dataset("mnist", tmp_path).x[:5, 0], arrays["train_x"])


def test_emnist_images_come_out_transposed_to_stand_upright(tmp_path):
    names = [
        f"emnist-digits-{s}-{k}-idx{d}-ubyte" for s in ("train", "test") for k, d in (("images", 3), ("labels", 1))
    ]
    raw = tmp_path / "EMNIST" / "raw"
    arrays = write_idx_set(raw, names, gz=True)
    arrays["train_x"][0] = 0
    arrays["train_x"][0, 0, :] = 255  # the stored image's top row...
    with gzip.open(raw / f"{names[0]}.gz", "wb") as f:
        f.write(_idx_bytes(arrays["train_x"]))
    ds = load_dataset("emnist", tmp_path)
    assert (ds.x[0, 0, :, 0] == 255).all() and (ds.x[0, 0, :, 1:] == 0).all()  # ...is the loaded left column
    assert np.array_equal(ds.x[1:5, 0], arrays["train_x"][1:].transpose(0, 2, 1))
    assert np.array_equal(ds.x[5:, 0], arrays["test_x"].transpose(0, 2, 1))


def test_mnist_is_not_transposed(tmp_path):
    arrays = write_idx_set(tmp_path / "MNIST" / "raw", MNIST_NAMES, gz=True)
    assert not np.array_equal(arrays["train_x"][0], arrays["train_x"][0].T)
    assert np.array_equal(load_dataset("mnist", tmp_path).x[0, 0], arrays["train_x"][0])


def test_missing_files_name_folder_files_and_fedbench_data(tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    with pytest.raises(DataMissingError) as info:
        load_dataset("fmnist", root)
    message = str(info.value)
    assert str(root / "FashionMNIST" / "raw") in message
    for name in MNIST_NAMES:
        assert f"{name}.gz" in message
    assert "FEDBENCH_DATA" in message and "failed" in message
    assert list(root.iterdir()) == []  # the download attempt went to the cache, not the root


def test_download_lands_in_the_cache_and_is_read_from_there(tmp_path, monkeypatch):
    root = tmp_path / "empty"
    root.mkdir()
    written = {}

    def fake_download(self):
        written.update(write_idx_set(Path(self.raw_folder), MNIST_NAMES, gz=False))

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", fake_download)
    ds = load_dataset("mnist", root)
    assert list(root.iterdir()) == []
    assert (cache_dir() / "data/MNIST/raw/train-images-idx3-ubyte").is_file()
    assert np.array_equal(ds.x[5:, 0], written["test_x"])


def test_partial_set_counts_as_missing(tmp_path):
    write_idx_set(tmp_path / "MNIST" / "raw", MNIST_NAMES, gz=True)
    (tmp_path / "MNIST/raw/t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataMissingError, match="t10k-labels-idx1-ubyte.gz"):
        load_dataset("mnist", tmp_path)


def test_idx_reader_rejects_wrong_magic_and_truncation(tmp_path):
    labels = tmp_path / "labels.gz"
    with gzip.open(labels, "wb") as f:
        f.write(_idx_bytes(np.arange(4)))
    with pytest.raises(ValueError, match="magic number 2049, expected 2051"):
        read_idx_gz(labels, 2051)
    short = tmp_path / "short.gz"
    with gzip.open(short, "wb") as f:
        f.write(_idx_bytes(np.zeros((2, 28, 28)))[:-10])
    with pytest.raises(ValueError, match="bytes follow"):
        read_idx_gz(short, 2051)


@pytest.mark.real_data
@pytest.mark.parametrize("name, folder", [("mnist", "MNIST"), ("fmnist", "FashionMNIST")])
def test_real_files_load_without_writing_to_the_root(name, folder):
    root = os.environ.get("FEDBENCH_DATA")
    if not root or not all((Path(root) / folder / "raw" / f"{n}.gz").is_file() for n in MNIST_NAMES):
        pytest.skip(f"set FEDBENCH_DATA to a folder holding {folder}/raw/*.gz")
    before = _snapshot(Path(root))
    ds = load_dataset(name)
    assert _snapshot(Path(root)) == before
    assert len(ds) == 70000 and ds.x.shape == (70000, 1, 28, 28) and ds.x.dtype == np.uint8
    assert ds.num_classes == 10 and set(np.unique(ds.y)) == set(range(10))
    assert (ds.meta["split"] == "train").sum() == 60000
    assert 0 < ds.x.mean() < 255
