"""MNIST, Fashion-MNIST and EMNIST digits, from idx files in torchvision's root layout.

torchvision with download=False reads only the extracted idx files, while machines without internet often
keep just the original .gz files (they must not be extracted into a shared, possibly read-only root), so
the .gz files are parsed here directly. Images become uint8 [N, 1, 28, 28], or [N, 3, 28, 28] with
`colourise: true` (a seeded colour per sample, `fedbench.data.colourise`). The decoded (and colourised)
arrays are cached on disk and memory-mapped by later runs (`fedbench.data.decoded_cache`).
"""

from __future__ import annotations

import dataclasses
import gzip
import math
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fedbench.core.data_files import DataFiles
from fedbench.core.errors import DataCorruptError
from fedbench.core.fields import added_later
from fedbench.core.registry import register_dataset
from fedbench.data.base import BaseDataset, DatasetFacts, read_or_download, with_facts, with_files
from fedbench.data.colourise import colour_facts, colourised
from fedbench.data.decoded_cache import cached_dataset

DIGITS = tuple("0123456789")
FASHION = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")

_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_EMNIST_FILES = {
    s: (f"emnist-digits-{s}-images-idx3-ubyte", f"emnist-digits-{s}-labels-idx1-ubyte") for s in ("train", "test")
}
IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049


def idx_suffix(where: Path, folder: str, files: dict[str, tuple[str, str]]) -> str | None:
    """The suffix (`""` extracted, `.gz`) with which `where/<folder>/raw` holds every one of `files`; None: not all."""
    raw = where / folder / "raw"
    names = [n for pair in files.values() for n in pair]
    return next((s for s in ("", ".gz") if all((raw / f"{n}{s}").is_file() for n in names)), None)


def idx_files(folder: str, files: dict[str, tuple[str, str]]) -> DataFiles:
    """An idx dataset's files as `with_files` declares them: all extracted, or all gzipped (`idx_suffix`)."""
    names = [n for pair in files.values() for n in pair]
    return DataFiles(tuple(tuple(f"{folder}/raw/{n}{suffix}" for n in names) for suffix in ("", ".gz")))


GRAY_28 = DatasetFacts(num_classes=10, channels=1, image_size=(28, 28), train_size=60000, test_size=10000)
MNIST_FACTS = dataclasses.replace(GRAY_28, mean_std=((0.1307,), (0.3081,)))
"""MNIST's mean and std, as PyTorch's MNIST example and most FL code bases normalise it."""
FMNIST_FACTS = dataclasses.replace(GRAY_28, mean_std=((0.2860,), (0.3530,)))
"""Fashion-MNIST's training-set mean and std."""


@register_dataset("mnist")
@with_files(idx_files("MNIST", _MNIST_FILES))
@added_later("colourise", "colour_seed")
@with_facts(lambda colourise, colour_seed: colour_facts(MNIST_FACTS, colourise, colour_seed))
def mnist(root: Path, colourise: bool = False, colour_seed: int = 0) -> BaseDataset:
    """MNIST handwritten digits (60000 train + 10000 test), from `<root>/MNIST/raw/`; `colourise`: RGB, each
    sample tinted with a base colour drawn from `colour_seed` (`fedbench.data.colourise`)."""
    colour_facts(MNIST_FACTS, colourise, colour_seed)
    options = {"colourise": colourise, "colour_seed": colour_seed}
    return _idx_dataset(
        "mnist",
        root,
        "MNIST",
        _MNIST_FILES,
        options,
        lambda train, test, read_from: colourised(
            BaseDataset.from_splits("mnist", DIGITS, train, test, read_from), **options
        ),
    )


@register_dataset("fmnist")
@with_files(idx_files("FashionMNIST", _MNIST_FILES))
@added_later("colourise", "colour_seed")
@with_facts(lambda colourise, colour_seed: colour_facts(FMNIST_FACTS, colourise, colour_seed))
def fmnist(root: Path, colourise: bool = False, colour_seed: int = 0) -> BaseDataset:
    """Fashion-MNIST clothing images (60000 train + 10000 test), from `<root>/FashionMNIST/raw/`; `colourise`
    as for mnist."""
    colour_facts(FMNIST_FACTS, colourise, colour_seed)
    options = {"colourise": colourise, "colour_seed": colour_seed}
    return _idx_dataset(
        "fmnist",
        root,
        "FashionMNIST",
        _MNIST_FILES,
        options,
        lambda train, test, read_from: colourised(
            BaseDataset.from_splits("fmnist", FASHION, train, test, read_from), **options
        ),
    )


@register_dataset("emnist")
@with_files(idx_files("EMNIST", _EMNIST_FILES))
@with_facts(dataclasses.replace(GRAY_28, train_size=240000, test_size=40000))
def emnist(root: Path) -> BaseDataset:
    """EMNIST's 'digits' split (240000 train + 40000 test), from `<root>/EMNIST/raw/`.

    The NIST files store each image transposed relative to MNIST, and torchvision leaves them so; they are
    transposed back here so that a model sees upright digits, as with MNIST.
    """

    def upright(train: dict[str, np.ndarray], test: dict[str, np.ndarray], read_from: dict[str, str]) -> BaseDataset:
        for part in (train, test):
            part["x"] = part["x"].transpose(0, 1, 3, 2)
        return BaseDataset.from_splits("emnist", DIGITS, train, test, read_from)

    return _idx_dataset("emnist", root, "EMNIST", _EMNIST_FILES, {}, upright, split="digits")


Splits = dict[str, np.ndarray]


def _idx_dataset(
    name: str,
    root: Path,
    folder: str,
    files: dict[str, tuple[str, str]],
    options: dict[str, Any],
    build: Callable[[Splits, Splits, dict[str, str]], BaseDataset],
    **torchvision_kwargs: str,
) -> BaseDataset:
    """An idx dataset from its extracted files, else its .gz files, else a download; decoded once (`decoded_cache`).

    Args:
        name: dataset name, for messages and the cache.
        root: the data root.
        folder: torchvision's folder (and class name) of the dataset under a root.
        files: (images, labels) file names of each split, without .gz.
        options: the loader options `build` depends on (part of the cache key).
        build: the dataset from the train and test {'x': uint8 [n, 1, H, W], 'y'} and each split's labels file
            (`BaseDataset.from_splits`'s `read_from`).
        **torchvision_kwargs: further arguments of torchvision's class (EMNIST's `split`).
    """
    names = [n for pair in files.values() for n in pair]

    def open_torchvision(where: Path, train: bool, download: bool):
        import torchvision.datasets  # here, not at the top: a seconds-long import digits/synthetic need not pay

        cls = getattr(torchvision.datasets, folder)
        return cls(where, train=train, download=download, **torchvision_kwargs)

    def locate(where: Path) -> tuple[Path, bool] | None:
        """(root, gzipped?) of a complete set of files under `where`."""
        suffix = idx_suffix(where, folder, files)
        return None if suffix is None else (where, suffix == ".gz")

    expected = ", ".join(f"{n}.gz" for n in names) + " (or the same files extracted, without .gz)"
    where, gz = read_or_download(
        name, root, f"{folder}/raw", expected, locate, lambda to: open_torchvision(to, True, True)
    )

    def path(file: str) -> Path:
        return where / folder / "raw" / (f"{file}.gz" if gz else file)

    def read(split: str, images: str, labels: str) -> tuple[np.ndarray, np.ndarray]:
        if gz:
            return read_idx_gz(path(images), IMAGES_MAGIC), read_idx_gz(path(labels), LABELS_MAGIC)
        try:
            loaded = open_torchvision(where, split == "train", False)
        except (AssertionError, RuntimeError, ValueError) as exc:  # torchvision's checks: bare asserts, a bad reshape
            raise DataCorruptError(
                f"{path(images)} or {path(labels)}: not a readable idx file "
                f"({type(exc).__name__}{f': {exc}' if str(exc) else ''})"
            ) from exc
        return loaded.data.numpy(), loaded.targets.numpy()

    def decode() -> BaseDataset:
        found = {s: read(s, img, lbl) for s, (img, lbl) in files.items()}
        train, test = ({"x": x[:, None], "y": y} for x, y in (found["train"], found["test"]))
        return build(train, test, {s: str(path(lbl)) for s, (_, lbl) in files.items()})

    return cached_dataset(name, [path(n) for n in names], decode, **options)


def read_idx_gz(path: Path, magic: int) -> np.ndarray:
    """The uint8 array in a gzipped idx file: big-endian int32 magic, one int32 per dimension, then the data.

    The magic's low byte is the number of dimensions (2051: 3-d images, 2049: 1-d labels).

    Raises:
        DataCorruptError: the file is not gzip, is cut short, or its idx header does not match its data.
    """
    packed = path.read_bytes()
    try:
        blob = gzip.decompress(packed)  # one output buffer (GzipFile.read joins chunks: another copy)
    except (OSError, EOFError, zlib.error) as exc:  # OSError: gzip.BadGzipFile, a bad CRC or length
        raise DataCorruptError(
            f"{path}: not a readable gzip file ({type(exc).__name__}: {exc}); replace it with the original download"
        ) from exc
    found = int.from_bytes(blob[:4], "big")
    if found != magic:
        raise DataCorruptError(f"{path}: idx magic number {found}, expected {magic}")
    ndim = magic & 0xFF
    if len(blob) < 4 * (1 + ndim):
        raise DataCorruptError(f"{path}: {len(blob)} bytes, too short for the idx header ({4 * (1 + ndim)} bytes)")
    shape = tuple(int(d) for d in np.frombuffer(blob, ">i4", count=ndim, offset=4))
    data = np.frombuffer(blob, np.uint8, offset=4 + 4 * ndim)
    if data.size != math.prod(shape):
        raise DataCorruptError(f"{path}: header says {shape} ({math.prod(shape)} bytes) but {data.size} bytes follow")
    return data.reshape(shape)
