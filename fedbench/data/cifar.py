"""CIFAR-10 and CIFAR-100 from the python pickles in torchvision's root layout.

The pickles are parsed here rather than through torchvision's classes, which verify every file's md5 and so
could only ever be tested on the real 160 MB downloads. Images become uint8 [N, 3, 32, 32]; the decoded arrays
are cached on disk and memory-mapped by later runs (`fedbench.data.decoded_cache`).

A data folder is user input, and `pickle.load` runs whatever a pickle asks for, so the batches are read by
`SafeUnpickler`, which builds only numpy arrays and plain Python values (dicts, lists, str, bytes, numbers)
and refuses every other global a pickle names before anything of it runs.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np

try:
    from numpy._core.multiarray import _reconstruct
except ImportError:  # numpy < 2
    from numpy.core.multiarray import _reconstruct

from fedbench.core.data_files import DataFiles
from fedbench.core.errors import DataCorruptError
from fedbench.core.registry import register_dataset
from fedbench.data.base import BaseDataset, DatasetFacts, read_or_download, with_facts, with_files
from fedbench.data.decoded_cache import cached_dataset

_CIFAR10 = ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], "batches.meta")
_CIFAR100 = ("cifar-100-python", ["train"], ["test"], "meta")


def cifar_files(layout: tuple[str, list[str], list[str], str]) -> DataFiles:
    """A CIFAR `layout`'s files as `with_files` declares them."""
    folder, train_files, test_files, meta_file = layout
    return DataFiles(((*(f"{folder}/{n}" for n in (*train_files, *test_files, meta_file)),),))


def cifar_paths(where: Path, layout: tuple[str, list[str], list[str], str]) -> list[Path] | None:
    """The files of a CIFAR `layout` (folder, train batches, test batches, meta) under `where`; None: not all."""
    folder, train_files, test_files, meta_file = layout
    paths = [where / folder / n for n in (*train_files, *test_files, meta_file)]
    return paths if all(p.is_file() for p in paths) else None


# CIFAR-10's two natural groups (001 Sec. IV-A E1/E2a, K=2 "vehicles vs animals"): airplane, automobile,
# ship and truck (labels 0, 1, 8, 9) are vehicles (0); bird, cat, deer, dog, frog and horse animals (1).
CIFAR10_SUPERCLASSES = (0, 0, 1, 1, 1, 1, 1, 1, 0, 0)
# CIFAR-100's official coarse label of each fine label, fine labels in the dataset's (alphabetical) order:
# 0 apple -> 4 fruit_and_vegetables, 1 aquarium_fish -> 1 fish, 2 baby -> 14 people, ..., 99 worm -> 13
# non-insect_invertebrates. The same table as the 'coarse_labels' stored beside 'fine_labels' in the pickles.
CIFAR100_COARSE_OF_FINE = (
    4, 1, 14, 8, 0, 6, 7, 7, 18, 3,
    3, 14, 9, 18, 7, 11, 3, 9, 7, 11,
    6, 11, 5, 10, 7, 6, 13, 15, 3, 15,
    0, 11, 1, 10, 12, 14, 16, 9, 11, 5,
    5, 19, 8, 8, 15, 13, 14, 17, 18, 10,
    16, 4, 17, 4, 2, 0, 17, 4, 18, 17,
    10, 3, 2, 12, 12, 16, 12, 1, 9, 19,
    2, 10, 0, 1, 16, 12, 9, 13, 15, 13,
    16, 19, 2, 4, 6, 19, 5, 5, 8, 19,
    18, 1, 2, 15, 6, 0, 17, 8, 14, 13,
)  # fmt: skip


Batches = list[dict[str, Any]]  # unpickled CIFAR batches, each {'data', labels...}

CIFAR10_MEAN_STD = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
"""CIFAR-10's per-channel training-set mean and std (the std over all pixels, not the per-image 0.2023 often copied)."""
CIFAR100_MEAN_STD = ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762))
"""CIFAR-100's per-channel training-set mean and std."""


@register_dataset("cifar10")
@with_files(cifar_files(_CIFAR10))
@with_facts(
    DatasetFacts(
        10, 3, (32, 32), superclasses=CIFAR10_SUPERCLASSES, mean_std=CIFAR10_MEAN_STD, train_size=50000, test_size=10000
    )
)
def cifar10(root: Path) -> BaseDataset:
    """CIFAR-10: 50000 train + 10000 test colour images, 10 classes, from `<root>/cifar-10-batches-py/`."""

    def build(train: Batches, test: Batches, meta: dict[str, Any], read_from: dict[str, str]) -> BaseDataset:
        parts = _arrays(train, "labels"), _arrays(test, "labels")
        return BaseDataset.from_splits("cifar10", meta["label_names"], *parts, read_from)

    return _cifar_dataset("cifar10", root, "CIFAR10", _CIFAR10, {}, build)


def _cifar100_facts(label: str) -> DatasetFacts:
    """100 fine classes grouped by the official table, or the 20 coarse ones; both labels always in meta."""
    fine = label == "fine"
    return DatasetFacts(
        100 if fine else 20,
        3,
        (32, 32),
        ("fine_label", "coarse_label"),
        CIFAR100_COARSE_OF_FINE if fine else None,
        mean_std=CIFAR100_MEAN_STD,
        train_size=50000,
        test_size=10000,
    )


@register_dataset("cifar100")
@with_files(cifar_files(_CIFAR100))
@with_facts(_cifar100_facts)
def cifar100(root: Path, label: Literal["fine", "coarse"] = "fine") -> BaseDataset:
    """CIFAR-100 from `<root>/cifar-100-python/`: 100 fine classes grouped into 20 coarse superclasses.

    Args:
        root: the data root.
        label: which labels become `y`: the 100 'fine' classes or the 20 'coarse' superclasses. Both are
            always in meta ('fine_label', 'coarse_label'), so scenarios can shift within a superclass.
    """

    def build(train: Batches, test: Batches, meta: dict[str, Any], read_from: dict[str, str]) -> BaseDataset:
        parts = [
            _arrays(p, f"{label}_labels", fine_label="fine_labels", coarse_label="coarse_labels") for p in (train, test)
        ]
        return BaseDataset.from_splits("cifar100", meta[f"{label}_label_names"], *parts, read_from)

    return _cifar_dataset("cifar100", root, "CIFAR100", _CIFAR100, {"label": label}, build)


def _arrays(entries: Batches, label_key: str, **meta_keys: str) -> dict[str, np.ndarray]:
    """{'x', 'y', meta columns...} of pickled batches; a row of 'data' is 1024 red, green, then blue pixels."""
    out = {"x": np.concatenate([e["data"] for e in entries]).astype(np.uint8, copy=False).reshape(-1, 3, 32, 32)}
    for column, key in {"y": label_key, **meta_keys}.items():
        out[column] = np.concatenate([np.asarray(e[key], dtype=np.int64) for e in entries])
    return out


def _cifar_dataset(
    name: str,
    root: Path,
    torchvision_class: str,
    layout: tuple[str, list[str], list[str], str],
    options: dict[str, Any],
    build: Callable[[Batches, Batches, dict[str, Any], dict[str, str]], BaseDataset],
) -> BaseDataset:
    """A CIFAR dataset from its folder of pickles, or a download into the cache; decoded once (`decoded_cache`).

    Args:
        name: dataset name, for messages and the cache.
        root: the data root.
        torchvision_class: torchvision's class, for a download.
        layout: (folder, train batch files, test batch files, meta file).
        options: the loader options `build` depends on (part of the cache key).
        build: the dataset from the unpickled train batches, test batches and meta, and the files of each split
            (`BaseDataset.from_splits`'s `read_from`).
    """
    folder, train_files, test_files, meta_file = layout
    names = [*train_files, *test_files, meta_file]

    def download(where: Path) -> None:
        import torchvision.datasets  # here, not at the top: a seconds-long import digits/synthetic need not pay

        getattr(torchvision.datasets, torchvision_class)(where, train=True, download=True)

    sources = read_or_download(name, root, folder, ", ".join(names), lambda at: cifar_paths(at, layout), download)

    def decode() -> BaseDataset:
        batches = [_unpickle(path) for path in sources]
        cut = len(train_files)
        read_from = {"train": _listed(sources[:cut]), "test": _listed(sources[cut:-1])}
        return build(batches[:cut], batches[cut:-1], batches[-1], read_from)

    return cached_dataset(name, sources, decode, **options)


def _listed(paths: list[Path]) -> str:
    """One file's path, or several files of a folder as `folder/{a,b}`."""
    return str(paths[0]) if len(paths) == 1 else f"{paths[0].parent}/{{{','.join(p.name for p in paths)}}}"


def _latin1_bytes(text: str, encoding: str = "latin1") -> bytes:
    """How protocol-2 pickles written by Python 3 spell bytes (`_codecs.encode(text, 'latin1')`), and nothing else."""
    if encoding != "latin1":
        raise pickle.UnpicklingError(f"refused _codecs.encode with encoding {encoding!r}")
    return text.encode("latin1")


_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,  # how the official (Python 2) batches spell it
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,  # ... and numpy 2
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_bytes,
}


class SafeUnpickler(pickle.Unpickler):
    """Builds numpy arrays, dicts, lists, str, bytes and numbers; any other global is refused unrun."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refused to load {module}.{name}: a CIFAR batch holds only numpy arrays, "
                "lists, dicts, strings and numbers"
            ) from None


def _unpickle(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        try:
            return SafeUnpickler(f, encoding="latin1").load()
        except (pickle.UnpicklingError, EOFError) as exc:  # refused, cut short, or not a pickle
            raise DataCorruptError(f"{path}: not a readable CIFAR batch ({type(exc).__name__}: {exc})") from None
