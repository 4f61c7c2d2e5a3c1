"""The in-memory dataset every scenario indexes into, the one cached way to load it, and where files live.

A dataset is loaded once per process and shared read-only: scenarios hold indices into it and workers form
batches from it, so images stay uint8 (4x smaller in memory and in Ray's object store) until
`to_float_batch` turns a batch into floats. Loaders that decode files (MNIST family, CIFAR, FEMNIST) keep the
decoded arrays on disk, memory-mapped by later runs (`fedbench.data.decoded_cache`: where, key, clearing).

Each loader also declares its `DatasetFacts` (`@with_facts`), so that a task's scenario can be checked
against the dataset (enough classes? a 'writer' column?) when the task is loaded, before any file is read.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import mmap
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch

from fedbench.core.cache import cache_dir
from fedbench.core.data_files import DataFiles, resolve_root
from fedbench.core.errors import ConfigError, DataCorruptError, DataMissingError
from fedbench.core.fields import coerce, signature_fields, without_later_defaults
from fedbench.core.registry import DATASETS
from fedbench.core.runspec import Normalization

if TYPE_CHECKING:  # pandas is imported where a dataset is built: checking a task's facts needs none
    import pandas as pd

T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class BaseDataset:
    """One dataset, official train and test splits concatenated (train rows first), arrays read-only.

    Attributes:
        name: the registry key it was loaded under.
        x: uint8 [N, C, H, W] for images, float32 [N, D] for vector data.
        y: int64 [N] labels in [0, num_classes).
        meta: N rows with a RangeIndex; column 'split' ('train' or 'test', the official split) plus
            dataset-specific columns (cifar100's 'coarse_label', synthetic's generating 'device').
        num_classes: number of classes of `y`.
        classes: class names, indexed by label.
        options: the loader options it was loaded with (defaults filled in), set by `load_dataset`.
    """

    name: str
    x: np.ndarray
    y: np.ndarray
    meta: pd.DataFrame
    num_classes: int
    classes: tuple[str, ...]
    options: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not len(self.x) == len(self.y) == len(self.meta):
            raise ValueError(f"{self.name}: x, y and meta have {len(self.x)}, {len(self.y)}, {len(self.meta)} rows")
        if self.x.dtype not in (np.uint8, np.float32) or self.y.dtype != np.int64:
            raise ValueError(f"{self.name}: x must be uint8 or float32 and y int64, got {self.x.dtype}, {self.y.dtype}")
        if len(self.classes) != self.num_classes:
            raise ValueError(f"{self.name}: {len(self.classes)} class names for {self.num_classes} classes")

    @classmethod
    def from_splits(
        cls,
        name: str,
        classes: Sequence[str],
        train: Mapping[str, np.ndarray],
        test: Mapping[str, np.ndarray],
        read_from: Mapping[str, str] | None = None,
    ) -> BaseDataset:
        """Concatenate an official split, train rows first, into a read-only dataset.

        Every loader builds its dataset here, so the labels of every file-backed dataset are checked here, once,
        when it loads: a label past the classes would otherwise fail rounds later, naming no file.

        Args:
            name: registry key of the dataset.
            classes: class names indexed by label.
            train: arrays of the training split: 'x', 'y', and any further key becomes a meta column.
            test: the same keys for the test split.
            read_from: the file (or files) each split's labels were read from ('train' -> path), for the errors.

        Raises:
            DataCorruptError: a split's arrays have different lengths, or a label is outside 0..len(classes)-1.
        """
        import pandas as pd

        for split, part in (("train", train), ("test", test)):
            _check_split(part, len(classes), (read_from or {}).get(split, f"{name}'s {split} split"), split)
        columns = {key: np.concatenate([train[key], test[key]]) for key in train}
        x, y = columns.pop("x"), columns.pop("y").astype(np.int64)
        split = np.repeat(np.array(["train", "test"]), [len(train["y"]), len(test["y"])])
        meta = pd.DataFrame({"split": split, **columns})
        # Shared by every caller in the process (and read-only in Ray's object store anyway): fail loudly
        # on in-place edits instead of silently corrupting other runs' data.
        x.flags.writeable = False
        y.flags.writeable = False
        return cls(name, x, y, meta, len(classes), tuple(classes))

    @functools.cached_property
    def identity(self) -> dict[str, Any]:
        """What scenarios built on this dataset depend on, for their cache keys: its name, loader options,
        shape and a digest of its labels and metadata (two loads that differ in any of these never share
        a scenario, whatever their options say)."""
        import pandas as pd

        content = hashlib.blake2b(np.ascontiguousarray(self.y).tobytes(), digest_size=16)
        content.update(pd.util.hash_pandas_object(self.meta, index=True).to_numpy().tobytes())
        return {
            "name": self.name,
            "options": [[k, list(v) if isinstance(v, tuple) else v] for k, v in self.options],
            "shape": list(self.x.shape),
            "dtype": str(self.x.dtype),
            "content": content.hexdigest(),
        }

    @functools.cached_property
    def train_channel_stats(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Per-channel mean and std of the official training images in [0, 1], exact (from a histogram of
        the uint8 values, so no float copy of the images is made)."""
        train = self.x[(self.meta["split"] == "train").to_numpy()]
        means, stds = [], []
        for channel in range(train.shape[1]):
            counts = np.bincount(train[:, channel].reshape(-1), minlength=256).astype(np.float64)
            values = np.arange(256) / 255.0
            mean = float(counts @ values / counts.sum())
            means.append(mean)
            stds.append(float(np.sqrt(counts @ (values - mean) ** 2 / counts.sum())))
        return tuple(means), tuple(stds)

    def release_pages(self) -> None:
        """Unmap from this process the pages of arrays memory-mapped from the cache (`decoded_cache`).

        They stay in the page cache and fault back in on the next access. Once `ray.put` has copied the
        arrays into the object store, the driver holding the mapped pages too would count them twice in its
        memory. Arrays held in memory are left alone.
        """
        for array in (self.x, self.y):
            mapping = getattr(array.base, "_mmap", None) if isinstance(array.base, np.memmap) else None
            if mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
                mapping.madvise(mmap.MADV_DONTNEED)  # a shared file mapping: re-read from the file, never zeroed

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    @property
    def is_image(self) -> bool:
        return self.x.dtype == np.uint8

    def __len__(self) -> int:
        return len(self.y)


def _check_split(part: Mapping[str, np.ndarray], num_classes: int, where: str, split: str) -> None:
    """Raise DataCorruptError, naming `where`, unless `part`'s rows line up and its labels are in 0..num_classes-1."""
    y = part["y"]
    for key, array in part.items():
        if len(array) != len(y):
            raise DataCorruptError(f"{where}: {len(y)} labels but {len(array)} rows of {key!r} in the {split} split")
    bad = np.flatnonzero((y < 0) | (y >= num_classes))
    if bad.size:
        raise DataCorruptError(
            f"{where}: label {y[bad[0]]} at row {bad[0]} of the {split} split is outside the "
            f"{num_classes} classes 0..{num_classes - 1} "
            f"(out of range: {bad.size} of its {len(y)} labels)"
        )


@dataclass(frozen=True)
class DatasetFacts:
    """What a dataset is, known without loading it: what scenario checks at task-load time rely on.

    Attributes:
        num_classes: number of classes of `y`.
        channels: image channels; None for vector (non-image) datasets.
        image_size: (height, width) of the images; None for vector datasets.
        meta_columns: the meta columns besides 'split' (natural splits use them: 'writer', 'domain', ...).
        superclasses: class -> superclass id, where the dataset defines a grouping (CIFAR-10's vehicles
            and animals, CIFAR-100's 20 coarse labels); None otherwise.
        dataset: the registered name (filled in by `dataset_facts`), for messages and dataset-specific rules.
        mean_std: published per-channel (mean, std) of the training images in [0, 1], where there is one.
        train_size: rows of the official training split; None where only reading the files tells (FEMNIST).
        test_size: rows of the official test split; None where only reading the files tells.
    """

    num_classes: int
    channels: int | None
    image_size: tuple[int, int] | None
    meta_columns: tuple[str, ...] = ()
    superclasses: tuple[int, ...] | None = None
    dataset: str = ""
    mean_std: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    """The per-channel mean and std of the training images as the dataset's users quote them (for
    `normalize: dataset`); None where none is published, and the training split's own are computed."""
    train_size: int | None = None
    """What a federation is cut from: with too many clients for it, some would hold no sample."""
    test_size: int | None = None
    features: int | None = None
    """The length of a vector dataset's rows (None for images, whose shape `channels` and `image_size` give)."""

    @property
    def input_shape(self) -> tuple[int, ...] | None:
        """A sample's shape as a model takes it, where the facts tell it: [C, H, W] or [features]."""
        if self.image_size is not None and self.channels is not None:
            return (self.channels, *self.image_size)
        return None if self.features is None else (self.features,)

    def __post_init__(self) -> None:
        if self.superclasses is not None and len(self.superclasses) != self.num_classes:
            raise ValueError(f"{len(self.superclasses)} superclass ids for {self.num_classes} classes")


def with_facts(facts: DatasetFacts | Callable[..., DatasetFacts]) -> Callable[[T], T]:
    """Attach a loader's facts, as `loader.facts(**params)`: fixed facts, or a function of the loader's params.

    The function gets every loader parameter but the root, defaults filled in and values coerced, and
    should reject bad values the way the loader would (a ConfigError naming `dataset.<option>`), so that
    a task fails when it is loaded rather than when its data is.
    """
    describe = facts if callable(facts) else (lambda **params: facts)

    def attach(loader: T) -> T:
        loader.facts = describe  # type: ignore[attr-defined]
        return loader

    return attach


def with_files(files: DataFiles) -> Callable[[T], T]:
    """Attach the files a file-backed loader reads, as `loader.data_files` (`fedbench.core.data_files`: where
    `fedbench list datasets` looks for them); generated and bundled datasets have none."""

    def attach(loader: T) -> T:
        loader.data_files = files  # type: ignore[attr-defined]
        return loader

    return attach


def dataset_facts(name: str, **params: Any) -> DatasetFacts:
    """The facts of dataset `name` with loader options `params`, without reading any data.

    Raises:
        UnknownNameError: `name` is not registered.
        ConfigError: an option is unknown or has a bad value.
    """
    loader = DATASETS.get(name, field="dataset.name")
    describe = getattr(loader, "facts", None)
    if describe is None:
        raise NotImplementedError(f"dataset {name!r} declares no facts: decorate its loader with @with_facts")
    return dataclasses.replace(describe(**resolve_options(name, loader, params)), dataset=name)


def resolve_options(name: str, loader: Callable[..., Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """The loader's keyword options with defaults filled in and values coerced; unknown options rejected."""
    fields = signature_fields(loader, skip=1)
    for option, value in options.items():
        if option not in fields:
            raise ConfigError(
                f"dataset.{option}", value, f"options of {name} are: {', '.join(sorted(fields)) or 'none'}"
            )
    return {
        opt: coerce(f"dataset.{opt}", options[opt], annotation) if opt in options else default
        for opt, (annotation, default) in fields.items()
    }


_LOADED: dict[tuple[str, str, tuple[tuple[str, Any], ...]], BaseDataset] = {}


def load_dataset(name: str, data_root: str | os.PathLike | None = None, **options: Any) -> BaseDataset:
    """The dataset registered as `name`, loaded once per process for each (name, root, options).

    Args:
        name: a key of `fedbench.core.registry.DATASETS` (mnist, fmnist, emnist, cifar10, cifar100, digits,
            synthetic, ...).
        data_root: folder in torchvision's layout; see `resolve_root` for the fallbacks.
        **options: the loader's keyword parameters (e.g. `label="coarse"` for cifar100).

    Raises:
        UnknownNameError: `name` is not registered (the message lists the known names).
        ConfigError: an option is unknown or has a bad value (the message lists what is allowed).
        DataMissingError: the files are neither under the root nor downloadable.
        DataCorruptError: a file is there but damaged (the message names it and what is wrong).
    """
    loader = DATASETS.get(name, field="dataset.name")
    # Defaults filled in and values coerced, so that spelling an option out or leaving it at its default
    # finds the same cached dataset.
    resolved = resolve_options(name, loader, options)
    root = resolve_root(data_root)
    key = (name, str(root), tuple(sorted(resolved.items())))
    if key not in _LOADED:
        options = without_later_defaults(tuple(sorted(resolved.items())), loader, skip=1)  # scenarios key on them
        _LOADED[key] = dataclasses.replace(loader(root, **resolved), options=options)
    return _LOADED[key]


def normalization_values(
    normalize: Normalization, dataset: BaseDataset
) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """The per-channel (mean, std) a run standardises its images with; None: the images stay in [0, 1].

    Vector datasets are never normalised (their features are what the generating process gives).
    """
    if not dataset.is_image or normalize.mode == "none":
        return None
    if normalize.mode == "values":
        return normalize.mean, normalize.std
    published = dataset_facts(dataset.name, **dict(dataset.options)).mean_std if dataset.name in DATASETS else None
    return published or dataset.train_channel_stats


def to_float_batch(xb: torch.Tensor) -> torch.Tensor:
    """The one place images become floats: uint8 [0, 255] -> float32 [0, 1]; float input -> float32.

    Datasets keep images uint8 so that shared memory holds a quarter of the bytes; call this on each batch
    (after moving it to the device, so that the transfer is also 4x smaller).
    """
    if xb.dtype == torch.uint8:
        return xb.to(torch.float32).div_(255.0)  # the conversion made a new tensor: divided in place
    if xb.is_floating_point():
        return xb.to(torch.float32)
    raise TypeError(f"expected a uint8 or floating-point batch, got {xb.dtype}")


def read_or_download(
    name: str,
    root: Path,
    folder: str,
    expected: str,
    read: Callable[[Path], T | None],
    download: Callable[[Path], object],
) -> T:
    """Read a dataset's files from `root`, else from the download cache, else download them into the cache.

    The root may be read-only or shared, so nothing is ever written there: downloads and extractions go to
    `cache_dir() / "data"`, laid out like torchvision's roots.

    Args:
        name: dataset name, for the message.
        root: the resolved data root.
        folder: torchvision's folder of the files relative to a root (e.g. `MNIST/raw`).
        expected: the files looked for, as the message should name them.
        read: returns what it finds under a root (the files, or their data), or None when they are not there.
        download: torchvision's download into a root; any exception it raises counts as "no network".

    Raises:
        DataMissingError: naming the folder, the expected files and how to point fedbench at them.
    """
    store = (cache_dir() / "data").resolve()
    for where in dict.fromkeys([root, store]):
        found = read(where)
        if found is not None:
            return found
    try:
        download(store)
    except Exception as exc:  # torchvision raises URLError, RuntimeError, BadZipFile... all mean "no copy"
        reason = " ".join(str(exc).split())  # torchvision's messages span lines, one per mirror
        problem, cause = f"downloading into {store / folder} failed ({type(exc).__name__}: {reason})", exc
    else:
        found = read(store)
        if found is not None:
            return found
        problem, cause = f"a download into {store / folder} left no readable files", None
    raise DataMissingError(
        f"{name}: dataset files not found in {root / folder}; expected {expected}; {problem}. "
        f"Set FEDBENCH_DATA (or the task's dataset.data_root) to a folder in torchvision's layout, "
        f"i.e. one holding {folder}/ with these files."
    ) from cause


def require(ok: bool, option: str, value: Any, allowed: str) -> None:
    """Reject a bad option value at the boundary with a ConfigError naming `dataset.<option>`."""
    if not ok:
        raise ConfigError(f"dataset.{option}", value, allowed)
