"""A damaged dataset file fails when the dataset loads, with a DataCorruptError naming the file and the problem,
instead of an EOFError, BadGzipFile or out-of-bounds target rounds into training (issue 32, item 5)."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import yaml
from mlflow.tracking import MlflowClient

from fedbench.core.errors import DataCorruptError
from fedbench.data import load_dataset
from tests.data.test_cifar import _dump, write_cifar10
from tests.data.test_decoded_cache import EMNIST_NAMES, entries, load
from tests.data.test_femnist import LEAF_FILES, write_leaf
from tests.data.test_mnist_family import MNIST_NAMES, _idx_bytes, write_idx_set

FOLDERS = {"mnist": ("MNIST", MNIST_NAMES), "fmnist": ("FashionMNIST", MNIST_NAMES), "emnist": ("EMNIST", EMNIST_NAMES)}


def idx_root(root: Path, name: str = "mnist", gz: bool = True) -> tuple[Path, list[Path]]:
    """A fake idx root of `name`; returns it and its (train images, train labels, test images, test labels)."""
    folder, names = FOLDERS[name]
    raw = root / folder / "raw"
    write_idx_set(raw, names, gz=gz, n_train=6, n_test=3)
    return root, [raw / (f"{n}.gz" if gz else n) for n in names]


def gz_idx(path: Path, blob: bytes) -> None:
    path.write_bytes(gzip.compress(blob))


def corrupt_idx(case: str, files: list[Path]) -> tuple[Path, str]:
    """Damage one file of an idx root as `case` says; returns the file and what the message must say."""
    images, labels = files[0], files[1]
    if case == "truncated images":
        images.write_bytes(images.read_bytes()[:-40])
        return images, "not a readable gzip file (EOFError"
    if case == "labels not gzip":
        labels.write_bytes(gzip.decompress(labels.read_bytes()))
        return labels, "not a readable gzip file (BadGzipFile"
    if case == "label 200":
        gz_idx(labels, _idx_bytes(np.array([1, 2, 200, 3, 4, 5])))
        return labels, "label 200 at row 2 of the train split is outside the 10 classes 0..9"
    if case == "header says more images than follow":
        blob = gzip.decompress(images.read_bytes())
        gz_idx(images, struct.pack(">4I", 2051, 7, 28, 28) + blob[16:])
        return images, "header says (7, 28, 28) (5488 bytes) but 4704 bytes follow"
    if case == "labels header cut short":
        gz_idx(labels, struct.pack(">I", 2049))
        return labels, "4 bytes, too short for the idx header (8 bytes)"
    if case == "fewer labels than images":
        gz_idx(labels, _idx_bytes(np.arange(5)))
        return labels, "5 labels but 6 rows of 'x' in the train split"
    raise AssertionError(case)


def assert_names(error: pytest.ExceptionInfo, path: Path | str, problem: str) -> None:
    message = str(error.value)
    assert message.startswith(f"{path}: ") and problem in message, message


@pytest.mark.parametrize(
    "case",
    [
        "truncated images",
        "labels not gzip",
        "label 200",
        "header says more images than follow",
        "labels header cut short",
        "fewer labels than images",
    ],
)
def test_a_damaged_idx_file_is_named_when_the_dataset_loads(tmp_path, case):
    root, files = idx_root(tmp_path)
    path, problem = corrupt_idx(case, files)
    with pytest.raises(DataCorruptError) as error:
        load_dataset("mnist", root)
    assert_names(error, path, problem)
    assert entries() == []  # nothing half-decoded was cached


@pytest.mark.parametrize("name", ["fmnist", "emnist"])
def test_labels_are_checked_for_every_idx_dataset(tmp_path, name):
    root, files = idx_root(tmp_path, name)
    gz_idx(files[3], _idx_bytes(np.array([0, 10, 1])))  # the test split's labels
    with pytest.raises(DataCorruptError) as error:
        load_dataset(name, root)
    assert_names(error, files[3], "label 10 at row 1 of the test split is outside the 10 classes 0..9")


def test_a_damaged_extracted_idx_file_is_named(tmp_path):
    root, files = idx_root(tmp_path, gz=False)
    files[0].write_bytes(files[0].read_bytes()[:-100])
    with pytest.raises(DataCorruptError) as error:
        load_dataset("mnist", root)
    assert_names(error, f"{files[0]} or {files[1]}", "not a readable idx file (RuntimeError")


def test_a_cached_decode_does_not_hide_a_damaged_copy(tmp_path):
    """The cache is keyed by the files' content: the same names with other bytes are decoded, and refused."""
    good, _ = idx_root(tmp_path / "good")
    load("mnist", good)
    bad, files = idx_root(tmp_path / "bad")
    path, problem = corrupt_idx("label 200", files)
    with pytest.raises(DataCorruptError) as error:
        load("mnist", bad)
    assert_names(error, path, problem)
    assert len(entries()) == 1


def test_cifar_labels_and_truncated_batches_are_named(tmp_path):
    batches = write_cifar10(tmp_path)
    folder = tmp_path / "cifar-10-batches-py"
    _dump(folder / "data_batch_2", {**batches["data_batch_2"], "labels": [3, 12]})
    with pytest.raises(DataCorruptError) as error:
        load("cifar10", tmp_path)
    train = f"{folder}/{{{','.join(f'data_batch_{i}' for i in range(1, 6))}}}"
    assert_names(error, train, "label 12 at row 3 of the train split is outside the 10 classes 0..9")
    test_batch = folder / "test_batch"
    test_batch.write_bytes(test_batch.read_bytes()[:-30])
    with pytest.raises(DataCorruptError) as error:
        load("cifar10", tmp_path)
    assert_names(error, test_batch, "not a readable CIFAR batch")


def test_a_truncated_femnist_file_is_named(tmp_path):
    write_leaf(tmp_path / "femnist", LEAF_FILES)
    path = sorted((tmp_path / "femnist" / "train").glob("*.json"))[0]
    path.write_text(path.read_text()[:-20])
    with pytest.raises(DataCorruptError) as error:
        load("femnist", tmp_path)
    assert_names(error, path, "not a readable LEAF JSON file (JSONDecodeError")


def test_run_stops_before_any_run_with_the_file_named_and_no_traceback(tmp_path, monkeypatch, mlflow_store, capsys):
    """The damaged file is one error before the task starts, not a failed run after run (issue 47, item 8)."""
    from fedbench.cli import main

    root, files = idx_root(tmp_path / "data")
    path, problem = corrupt_idx("label 200", files)
    monkeypatch.setenv("FEDBENCH_DATA", str(root))
    task = {
        "name": "corrupt",
        "dataset": "mnist",
        "model": {"name": "mlp", "hidden": [8]},
        "rounds": 1,
        "scenario": {"partition": "dirichlet", "alpha": 0.5, "num_clients": 2},
        "batch_size": 4,
        "seeds": [0, 1],
        "grid": {"algorithm": ["fedavg", "local"]},
    }
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(task))
    assert main(["run", str(tmp_path / "task.yaml")]) == 2
    out = capsys.readouterr()
    printed = " ".join((out.out + out.err).split())  # rich wraps the long path over lines
    assert printed.count("error:") == 1 and f"{path}: {problem}" in printed and "label 200 at row 2" in printed
    assert "Traceback" not in printed and "[1/4]" not in printed
    client = MlflowClient(f"sqlite:///{mlflow_store}")
    experiment = client.get_experiment_by_name("corrupt")
    assert experiment is None or not client.search_runs([experiment.experiment_id])  # nothing ran
