from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedbench.core.errors import DataMissingError
from fedbench.core.registry import DATASETS
from fedbench.data import load_dataset
from fedbench.data.femnist import femnist


def _user(rng, labels: list[int]) -> dict:
    """LEAF's pixels: a grayscale byte k stored as k / 255."""
    return {"x": (rng.integers(0, 256, (len(labels), 784)) / 255).tolist(), "y": labels}


def write_leaf(folder: Path, files: dict[str, dict[str, list[int]]], seed: int = 0) -> dict:
    """LEAF-format JSON files `{file: {user: labels}}` under `folder`; returns {file: parsed JSON}."""
    rng = np.random.default_rng(seed)
    written = {}
    for file, users in files.items():
        blob = {
            "users": list(users),
            "num_samples": [len(labels) for labels in users.values()],
            "user_data": {user: _user(rng, labels) for user, labels in users.items()},
        }
        path = folder / file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(blob))
        written[file] = blob
    return written


# Writers listed out of sorted order, spread over two train files; f0007 has only letters.
LEAF_FILES = {
    "train/all_data_0_niid_0_keep_0_train_9.json": {"f0003_41": [1, 12, 3], "f0001_07": [0, 61]},
    "train/all_data_1_niid_0_keep_0_train_9.json": {"f0007_30": [10, 36]},
    "test/all_data_0_niid_0_keep_0_test_9.json": {"f0001_07": [5], "f0003_41": [40, 9]},
}


def test_registered():
    assert DATASETS.get("femnist") is femnist


def test_reads_train_and_test_files_with_writers_and_mnist_polarity(tmp_path):
    blobs = write_leaf(tmp_path / "femnist", LEAF_FILES)
    ds = load_dataset("femnist", tmp_path)
    assert ds.x.shape == (10, 1, 28, 28) and ds.x.dtype == np.uint8 and ds.y.dtype == np.int64
    assert (
        ds.num_classes == 62 and ds.classes[:3] == ("0", "1", "2") and ds.classes[10] == "A" and ds.classes[61] == "z"
    )
    assert ds.meta["split"].tolist() == ["train"] * 7 + ["test"] * 3
    assert list(ds.meta.columns) == ["split", "writer"]
    # Files in sorted order, users in file order; ids number the sorted user names.
    assert ds.y.tolist() == [1, 12, 3, 0, 61, 10, 36, 5, 40, 9]
    assert ds.meta["writer"].tolist() == [1, 1, 1, 0, 0, 2, 2, 0, 1, 1]
    first = np.asarray(blobs["train/all_data_0_niid_0_keep_0_train_9.json"]["user_data"]["f0003_41"]["x"][0])
    assert np.array_equal(ds.x[0, 0].reshape(-1), 255 - np.round(first * 255))  # byte k becomes 255 - k
    last = np.asarray(blobs["test/all_data_0_niid_0_keep_0_test_9.json"]["user_data"]["f0003_41"]["x"][1])
    assert np.array_equal(ds.x[9, 0].reshape(-1), 255 - np.round(last * 255))


def test_white_background_becomes_black_and_ink_bright(tmp_path):
    folder = tmp_path / "femnist"
    write_leaf(folder, {"train/a.json": {"w": [7]}, "test/a.json": {"w": [7]}})
    path = folder / "train/a.json"
    blob = json.loads(path.read_text())
    image = np.ones(784)  # LEAF: 1.0 is the paper's white
    image[28 * 3 + 4] = 0.0  # one black ink pixel at row 3, column 4
    blob["user_data"]["w"]["x"] = [image.tolist()]
    path.write_text(json.dumps(blob))
    x = femnist(tmp_path).x[0, 0]
    assert x[3, 4] == 255 and x.sum() == 255


def test_digits_only_keeps_labels_0_to_9_and_drops_letter_only_writers(tmp_path):
    write_leaf(tmp_path / "femnist", LEAF_FILES)
    ds = load_dataset("femnist", tmp_path, digits_only=True)
    assert ds.num_classes == 10 and ds.classes == tuple("0123456789")
    assert ds.y.tolist() == [1, 3, 0, 5, 9]
    assert ds.meta["writer"].tolist() == [1, 1, 0, 0, 1]  # f0007_30 wrote no digits: ids stay contiguous
    assert ds.meta["split"].tolist() == ["train"] * 3 + ["test"] * 2
    assert ds is not load_dataset("femnist", tmp_path)


def test_leaf_data_folder_works_as_the_root(tmp_path):
    write_leaf(tmp_path / "femnist" / "data", LEAF_FILES)
    assert len(load_dataset("femnist", tmp_path)) == 10


def test_unsplit_all_data_gives_each_writer_a_test_tail(tmp_path):
    write_leaf(tmp_path / "femnist", {"all_data/all_data_0.json": {"b": list(range(20)), "a": [4], "c": [1, 2]}})
    ds = femnist(tmp_path)
    split, writer = ds.meta["split"].to_numpy(), ds.meta["writer"].to_numpy()
    assert ds.y[split == "train"].tolist() == [*range(18), 4, 1]
    assert ds.y[split == "test"].tolist() == [18, 19, 2]
    assert writer[split == "test"].tolist() == [1, 1, 2]


def test_missing_files_say_where_and_how_to_build_them(tmp_path):
    with pytest.raises(DataMissingError) as info:
        load_dataset("femnist", tmp_path)
    message = str(info.value)
    assert str(tmp_path / "femnist") in message and "train,test,all_data" in message
    assert "https://github.com/TalwalkarLab/leaf" in message and "preprocess.sh" in message
    assert "FEDBENCH_DATA" in message


def test_labels_outside_the_62_classes_are_refused(tmp_path):
    write_leaf(tmp_path / "femnist", {"train/a.json": {"w": [62]}, "test/a.json": {"w": [0]}})
    with pytest.raises(ValueError, match="labels outside 0..61"):
        femnist(tmp_path)
