from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from fedbench.core.errors import ConfigError, DataCorruptError, DataMissingError
from fedbench.data import load_dataset

CIFAR10_NAMES = [f"airplane{i}" for i in range(10)]
FINE_NAMES = [f"fine{i}" for i in range(100)]
COARSE_NAMES = [f"coarse{i}" for i in range(20)]


def _dump(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def _batch(rng, n: int, **labels) -> dict:
    return {
        "batch_label": "fake",
        "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        "filenames": ["x.png"] * n,
        **labels,
    }


def write_cifar10(root: Path, per_batch: int = 2) -> dict[str, list]:
    """Fake cifar-10-batches-py: 5 train batches and a test batch of `per_batch` images each."""
    rng = np.random.default_rng(0)
    folder = root / "cifar-10-batches-py"
    batches = {}
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        batches[name] = _batch(rng, per_batch, labels=rng.integers(0, 10, per_batch).tolist())
        _dump(folder / name, batches[name])
    _dump(folder / "batches.meta", {"label_names": CIFAR10_NAMES, "num_cases_per_batch": per_batch, "num_vis": 3072})
    return batches


def write_cifar100(root: Path, n_train: int = 6, n_test: int = 4) -> dict[str, dict]:
    """Fake cifar-100-python whose coarse label is fine // 5, unlike the real grouping."""
    rng = np.random.default_rng(1)
    folder = root / "cifar-100-python"
    batches = {}
    for name, n in (("train", n_train), ("test", n_test)):
        fine = rng.integers(0, 100, n)
        batches[name] = _batch(rng, n, fine_labels=fine.tolist(), coarse_labels=(fine // 5).tolist())
        _dump(folder / name, batches[name])
    _dump(folder / "meta", {"fine_label_names": FINE_NAMES, "coarse_label_names": COARSE_NAMES})
    return batches


def test_cifar10_reads_batches_in_order(tmp_path):
    batches = write_cifar10(tmp_path)
    ds = load_dataset("cifar10", tmp_path)
    assert ds.x.shape == (12, 3, 32, 32) and ds.x.dtype == np.uint8
    order = [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]
    assert ds.y.tolist() == [label for name in order for label in batches[name]["labels"]]
    assert ds.meta["split"].tolist() == ["train"] * 10 + ["test"] * 2
    assert ds.num_classes == 10 and ds.classes == tuple(CIFAR10_NAMES)
    assert np.array_equal(ds.x[10].reshape(-1), batches["test_batch"]["data"][0])


def test_pixel_rows_are_red_green_blue_planes(tmp_path):
    batches = write_cifar10(tmp_path)
    row = batches["data_batch_1"]["data"][0]
    row[:] = 0
    row[:1024] = 255  # the whole red plane
    row[1024 + 2 * 32 + 5] = 7  # green, row 2, column 5
    _dump(tmp_path / "cifar-10-batches-py/data_batch_1", batches["data_batch_1"])
    image = load_dataset("cifar10", tmp_path).x[0]
    assert (image[0] == 255).all() and image[1, 2, 5] == 7 and image[1].sum() == 7 and (image[2] == 0).all()


def test_cifar100_fine_labels_with_coarse_in_meta(tmp_path):
    batches = write_cifar100(tmp_path)
    ds = load_dataset("cifar100", tmp_path)
    fine = batches["train"]["fine_labels"] + batches["test"]["fine_labels"]
    assert ds.y.tolist() == fine and ds.num_classes == 100 and ds.classes == tuple(FINE_NAMES)
    assert ds.meta["fine_label"].tolist() == fine
    assert ds.meta["coarse_label"].tolist() == [f // 5 for f in fine]
    assert ds.meta["split"].tolist() == ["train"] * 6 + ["test"] * 4


def test_cifar100_coarse_labels(tmp_path):
    batches = write_cifar100(tmp_path)
    ds = load_dataset("cifar100", tmp_path, label="coarse")
    assert ds.num_classes == 20 and ds.classes == tuple(COARSE_NAMES)
    assert ds.y.tolist() == batches["train"]["coarse_labels"] + batches["test"]["coarse_labels"]
    assert ds is not load_dataset("cifar100", tmp_path)


def test_cifar100_bad_label_names_the_option(tmp_path):
    write_cifar100(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_dataset("cifar100", tmp_path, label="superclass")
    assert info.value.field == "dataset.label"
    assert "'fine'" in str(info.value) and "'coarse'" in str(info.value)


@pytest.mark.parametrize(
    "name, folder, files",
    [
        ("cifar10", "cifar-10-batches-py", ["data_batch_1", "data_batch_5", "test_batch", "batches.meta"]),
        ("cifar100", "cifar-100-python", ["train", "test", "meta"]),
    ],
)
def test_missing_files_name_folder_files_and_fedbench_data(tmp_path, name, folder, files):
    root = tmp_path / "empty"
    root.mkdir()
    with pytest.raises(DataMissingError) as info:
        load_dataset(name, root)
    message = str(info.value)
    assert str(root / folder) in message and "FEDBENCH_DATA" in message
    for file in files:
        assert file in message
    assert list(root.iterdir()) == []


class _RunsACommand:
    """A pickle that, loaded by `pickle.load`, runs a shell command."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("protocol", [2, 4])
def test_a_malicious_pickle_is_refused_without_running(tmp_path, protocol):
    write_cifar10(tmp_path)
    marker = tmp_path / "ran"
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    batch.write_bytes(pickle.dumps({"data": _RunsACommand(marker), "labels": [0]}, protocol=protocol))
    with pytest.raises(DataCorruptError, match="refused to load posix.system") as err:
        load_dataset("cifar10", tmp_path)
    assert "data_batch_3" in str(err.value)
    assert not marker.exists()


def test_batches_naming_numpy_1_modules_still_load(tmp_path):
    """The official batches name `numpy.core.multiarray._reconstruct`, which the safe unpickler maps to numpy 2's."""
    batches = write_cifar10(tmp_path)
    for path in (tmp_path / "cifar-10-batches-py").iterdir():
        path.write_bytes(path.read_bytes().replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n"))
    assert (tmp_path / "cifar-10-batches-py" / "test_batch").read_bytes().count(b"numpy.core.multiarray\n") == 1
    ds = load_dataset("cifar10", tmp_path)
    assert np.array_equal(ds.x[10].reshape(-1), batches["test_batch"]["data"][0])
