from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fedbench.core.cache import cache_dir
from fedbench.core.errors import ConfigError, DataMissingError, UnknownNameError
from fedbench.data import BaseDataset, load_dataset, to_float_batch
from fedbench.data.base import read_or_download, resolve_root


def _tiny(n_train=3, n_test=2):
    train = {"x": np.zeros((n_train, 1, 2, 2), np.uint8), "y": np.arange(n_train), "group": np.full(n_train, 7)}
    test = {"x": np.ones((n_test, 1, 2, 2), np.uint8), "y": np.arange(n_test), "group": np.full(n_test, 8)}
    return BaseDataset.from_splits("tiny", ["a", "b", "c"], train, test)


def test_to_float_batch_scales_uint8_to_unit_interval():
    out = to_float_batch(torch.tensor([0, 51, 255], dtype=torch.uint8))
    assert out.dtype == torch.float32
    assert torch.allclose(out, torch.tensor([0.0, 0.2, 1.0]))


def test_to_float_batch_leaves_float_values_alone():
    xb = torch.tensor([-1.5, 300.0], dtype=torch.float64)
    out = to_float_batch(xb)
    assert out.dtype == torch.float32
    assert out.tolist() == [-1.5, 300.0]


def test_to_float_batch_rejects_integer_labels_mistaken_for_images():
    with pytest.raises(TypeError, match="int64"):
        to_float_batch(torch.tensor([1, 2]))


def test_from_splits_puts_train_rows_first_and_extra_keys_in_meta():
    ds = _tiny()
    assert ds.meta["split"].tolist() == ["train"] * 3 + ["test"] * 2
    assert ds.meta["group"].tolist() == [7, 7, 7, 8, 8]
    assert isinstance(ds.meta.index, pd.RangeIndex)
    assert ds.x[3:].min() == 1 and ds.x[:3].max() == 0
    assert ds.y.dtype == np.int64
    assert (len(ds), ds.input_shape, ds.is_image, ds.num_classes, ds.classes) == (
        5,
        (1, 2, 2),
        True,
        3,
        ("a", "b", "c"),
    )


def test_dataset_arrays_are_read_only_because_they_are_shared():
    ds = _tiny()
    with pytest.raises(ValueError):
        ds.x[0, 0, 0, 0] = 5
    with pytest.raises(ValueError):
        ds.y[0] = 1


def test_dataset_rejects_rows_that_do_not_line_up():
    ds = _tiny()
    with pytest.raises(ValueError, match="rows"):
        BaseDataset("bad", ds.x[:4], ds.y, ds.meta, 3, ds.classes)


def test_vector_data_is_not_image_data():
    ds = BaseDataset.from_splits(
        "vec",
        ["0", "1"],
        {"x": np.zeros((2, 4), np.float32), "y": np.array([0, 1])},
        {"x": np.zeros((1, 4), np.float32), "y": np.array([1])},
    )
    assert not ds.is_image and ds.input_shape == (4,)


def test_unknown_dataset_lists_the_known_ones():
    with pytest.raises(UnknownNameError) as info:
        load_dataset("imagenet")
    assert info.value.field == "dataset.name"
    for known in ("cifar10", "cifar100", "digits", "emnist", "fmnist", "mnist", "synthetic"):
        assert known in str(info.value)


def test_unknown_option_lists_the_allowed_ones():
    with pytest.raises(ConfigError) as info:
        load_dataset("synthetic", gamma=2.0)
    assert info.value.field == "dataset.gamma"
    assert "options of synthetic are: alpha, beta, num_devices, samples_per_device, seed, test_fraction" in str(
        info.value
    )
    with pytest.raises(ConfigError, match="options of mnist are: colour_seed, colourise"):
        load_dataset("mnist", label="fine")


def test_option_of_the_wrong_type_is_rejected():
    with pytest.raises(ConfigError) as info:
        load_dataset("synthetic", seed="zero")
    assert info.value.field == "dataset.seed"


def test_load_is_cached_per_name_root_and_options(tmp_path):
    first = load_dataset("digits", tmp_path)
    assert load_dataset("digits", tmp_path) is first
    assert load_dataset("digits", str(tmp_path), test_fraction=0.2) is first  # defaults spelled out: same key
    assert load_dataset("digits", tmp_path, test_fraction=0.3) is not first


def test_root_is_explicit_then_env_then_home_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FEDBENCH_DATA", raising=False)
    assert resolve_root(None) == (tmp_path / "home/.cache/fedbench/data").resolve()
    monkeypatch.setenv("FEDBENCH_DATA", str(tmp_path / "env"))
    assert resolve_root(None) == (tmp_path / "env").resolve()
    assert resolve_root(tmp_path / "explicit") == (tmp_path / "explicit").resolve()


def test_cache_dir_follows_fedbench_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("FEDBENCH_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("FEDBENCH_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home/.cache/fedbench"


def _marker_reader(where: Path):
    marker = where / "thing" / "file.bin"
    return marker.read_text() if marker.is_file() else None


def test_read_prefers_the_root_over_the_cache(tmp_path):
    for where, text in ((tmp_path / "root", "root"), (cache_dir() / "data", "cache")):
        (where / "thing").mkdir(parents=True)
        (where / "thing/file.bin").write_text(text)
    assert read_or_download("thing", tmp_path / "root", "thing", "file.bin", _marker_reader, pytest.fail) == "root"


def test_download_goes_to_the_cache_never_the_root(tmp_path):
    root = tmp_path / "root"
    root.mkdir()

    def download(where: Path):
        (where / "thing").mkdir(parents=True)
        (where / "thing/file.bin").write_text("downloaded")

    assert read_or_download("thing", root, "thing", "file.bin", _marker_reader, download) == "downloaded"
    assert list(root.iterdir()) == []
    assert (cache_dir() / "data/thing/file.bin").is_file()


def test_failed_download_says_where_what_and_how_to_fix(tmp_path):
    def download(where: Path):
        raise RuntimeError("no route to host")

    with pytest.raises(DataMissingError) as info:
        read_or_download("thing", tmp_path, "thing/raw", "file.bin", _marker_reader, download)
    message = str(info.value)
    for part in (str(tmp_path / "thing/raw"), "file.bin", "no route to host", "FEDBENCH_DATA"):
        assert part in message
    assert isinstance(info.value, FileNotFoundError)


def test_download_that_leaves_nothing_readable_is_reported(tmp_path):
    with pytest.raises(DataMissingError, match="left no readable files"):
        read_or_download("thing", tmp_path, "thing", "file.bin", _marker_reader, lambda where: None)


def test_list_datasets_says_where_each_datasets_files_are(tmp_path, monkeypatch, capsys):
    """Issue 47, item 15: `fedbench list datasets` says which datasets FEDBENCH_DATA holds."""
    from fedbench.api import listing
    from fedbench.cli import main

    def files_status(name):
        [entry] = listing("datasets", name)["datasets"]
        return entry.files

    monkeypatch.setenv("FEDBENCH_DATA", str(tmp_path / "data"))
    raw = tmp_path / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte"):
        (raw / f"{name}.gz").write_bytes(b"")
    assert files_status("mnist").startswith("missing from")  # three of four files
    (raw / "t10k-labels-idx1-ubyte.gz").write_bytes(b"")
    assert files_status("mnist") == f"found in {(tmp_path / 'data').resolve()}"
    assert files_status("digits") == "none of its own"
    folder = tmp_path / "data" / "cifar-10-batches-py"
    folder.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]:
        (folder / name).write_bytes(b"")
    assert files_status("cifar10").startswith("found in")
    assert main(["list", "datasets", "fmnist"]) == 0
    assert "files: missing from" in capsys.readouterr().out
