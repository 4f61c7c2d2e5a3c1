"""CIFAR-10 and CIFAR-100 from the python pickles in torchvision's root layout.

The pickles are parsed here rather than through torchvision's classes, which verify every file's md5 and so
could only ever be tested on the real 160 MB downloads. Images become uint8 [N, 3, 32, 32].
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Literal

import numpy as np

from fedbench.core.registry import register_dataset
from fedbench.data.base import BaseDataset, read_or_download

_CIFAR10 = ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], "batches.meta")
_CIFAR100 = ("cifar-100-python", ["train"], ["test"], "meta")


@register_dataset("cifar10")
def cifar10(root: Path) -> BaseDataset:
    """CIFAR-10: 50000 train + 10000 test colour images, 10 classes, from `<root>/cifar-10-batches-py/`."""
    train, test, meta = _load("cifar10", root, "CIFAR10", *_CIFAR10)
    return BaseDataset.from_splits("cifar10", meta["label_names"], _arrays(train, "labels"), _arrays(test, "labels"))


@register_dataset("cifar100")
def cifar100(root: Path, label: Literal["fine", "coarse"] = "fine") -> BaseDataset:
    """CIFAR-100 from `<root>/cifar-100-python/`: 100 fine classes grouped into 20 coarse superclasses.

    Args:
        root: the data root.
        label: which labels become `y`: the 100 'fine' classes or the 20 'coarse' superclasses. Both are
            always in meta ('fine_label', 'coarse_label'), so scenarios can shift within a superclass.
    """
    train, test, meta = _load("cifar100", root, "CIFAR100", *_CIFAR100)
    parts = [_arrays(p, f"{label}_labels", fine_label="fine_labels", coarse_label="coarse_labels") for p in (train, test)]
    return BaseDataset.from_splits("cifar100", meta[f"{label}_label_names"], *parts)


def _arrays(entries: list[dict[str, Any]], label_key: str, **meta_keys: str) -> dict[str, np.ndarray]:
    """{'x', 'y', meta columns...} of pickled batches; a row of 'data' is 1024 red, green, then blue pixels."""
    out = {"x": np.concatenate([e["data"] for e in entries]).astype(np.uint8, copy=False).reshape(-1, 3, 32, 32)}
    for column, key in {"y": label_key, **meta_keys}.items():
        out[column] = np.concatenate([np.asarray(e[key], dtype=np.int64) for e in entries])
    return out


def _load(
    name: str, root: Path, torchvision_class: str, folder: str, train_files: list[str], test_files: list[str], meta_file: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """The unpickled train batches, test batches and meta of a CIFAR folder, or a download into the cache."""
    names = [*train_files, *test_files, meta_file]

    def read(where: Path) -> list[dict[str, Any]] | None:
        if not all((where / folder / n).is_file() for n in names):
            return None
        return [_unpickle(where / folder / n) for n in names]

    def download(where: Path) -> None:
        import torchvision.datasets  # here, not at the top: a seconds-long import digits/synthetic need not pay

        getattr(torchvision.datasets, torchvision_class)(where, train=True, download=True)

    batches = read_or_download(name, root, folder, ", ".join(names), read, download)
    return batches[: len(train_files)], batches[len(train_files) : -1], batches[-1]


def _unpickle(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        return pickle.load(f, encoding="latin1")
