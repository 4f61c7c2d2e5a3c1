"""Decoded datasets kept on disk as memory-mapped .npy files, so that only the first run decodes them.

Decoding MNIST's .gz files (or CIFAR's pickles, or FEMNIST's JSON) and colourising takes 0.2 s to seconds on
every run, and leaves each process with its own private copy of the arrays. A cached dataset is instead
opened with `np.load(mmap_mode="r")`: nothing is read until used, and processes on a machine share the
pages through the page cache.

Where: `cache_dir() / "decoded"` (env `FEDBENCH_CACHE`, else ~/.cache/fedbench/decoded), one folder per
entry, `<dataset>-<key>/` holding x.npy, y.npy, one meta.<i>.npy per meta column and manifest.json.

Key: a sha256 of the dataset name, its loader options, each source file's name, folder name and sha256 of
its content (in order), and the sha256 of fedbench/data's own code, so a changed or replaced file, other options,
or an edited decoder never find an old entry. A file's content digest is remembered in `decoded/digests/` under
its (path, inode, size, mtime_ns, ctime_ns): rewriting or replacing a file changes its ctime, which no user call
can set back, so it is hashed again, and an unchanged file costs one stat instead of a full read (sha256 reads
~1 GB/s here: 6 ms for MNIST's 12 MB, 40 ms for Fashion-MNIST's, seconds for a full FEMNIST).

Writing: each file goes to a temporary name in the entry's folder, then `os.replace`; the manifest last,
so an entry is read only once every file of it is complete, and processes filling the same entry at once
write the same bytes. An entry that does not load (deleted or truncated files) is decoded and written again;
a cache folder that cannot be written to costs a warning and a decode on every run, never a failure.

Clearing: delete the `decoded` folder (or any entry in it) at any time, even while runs use it (they keep
their mapping); what is needed is rebuilt. Never edit a cached file in place: processes mapping it would see
the edit.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedbench.core.cache import cache_dir
from fedbench.data.base import BaseDataset

if TYPE_CHECKING:
    import pandas as pd

MANIFEST = "manifest.json"


def cached_dataset(
    name: str, sources: Sequence[Path], decode: Callable[[], BaseDataset], **options: Any
) -> BaseDataset:
    """The dataset `decode()` builds from `sources`, read from the cache when an entry exists, else decoded and cached.

    Args:
        name: the dataset's registered name.
        sources: every file the dataset is decoded from, in a fixed order.
        decode: builds the dataset from the files (called only on a cache miss).
        **options: every loader option that changes what `decode` returns: each is part of the key.

    Returns:
        The dataset, its x and y read-only memory maps (plain ndarrays, so that Ray serialises them out of
        band) wherever the cache could be written or read.
    """
    folder = cache_dir() / "decoded"
    entry = folder / f"{name}-{_entry_key(name, sources, options, folder / 'digests')}"
    found = _read_entry(entry, name)
    if found is not None:
        return found
    dataset = decode()
    try:
        _write_entry(entry, dataset, options)
    except OSError as exc:
        warnings.warn(
            f"{name}: cannot cache the decoded dataset in {folder} ({type(exc).__name__}: {exc}); "
            "it is decoded on every run (set FEDBENCH_CACHE to a writable folder)",
            stacklevel=3,
        )
        return dataset
    reread = _read_entry(entry, name)
    return dataset if reread is None else reread


def _entry_key(name: str, sources: Sequence[Path], options: dict[str, Any], digests: Path) -> str:
    described = {
        "name": name,
        "options": sorted(options.items()),
        # A file's folder is part of its role (FEMNIST's train/ and test/), the rest of its path is not.
        "sources": [[f"{Path(s).parent.name}/{Path(s).name}", _content_digest(Path(s), digests)] for s in sources],
        "code": _code_digest(),
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:32]


def _content_digest(path: Path, digests: Path) -> str:
    """sha256 of the file's bytes, remembered under its identity and times (module docstring: why that is safe)."""
    stat = path.stat()
    identity = [str(path.resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]
    memo = digests / hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:32]
    try:
        remembered = memo.read_text()
        if len(remembered) == 64:
            return remembered
    except OSError:
        pass
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    try:
        _replace_atomically(memo, lambda f: f.write(digest.encode()))
    except OSError:
        pass  # an unwritable cache warns once the entry cannot be written either
    return digest


@functools.cache
def _code_digest() -> str:
    """sha256 of fedbench/data's source: an edited decoder never reads arrays the old one wrote."""
    content = hashlib.sha256()
    for module in sorted(Path(__file__).parent.glob("*.py")):
        content.update(module.name.encode() + b"\0" + module.read_bytes())
    return content.hexdigest()


def _read_entry(entry: Path, name: str) -> BaseDataset | None:
    """The cached dataset, memory-mapped; None when the entry is absent or any file of it does not load."""
    import pandas as pd

    try:
        manifest = json.loads((entry / MANIFEST).read_text())
        x, y = (_load(entry / f"{key}.npy", mmap=True) for key in ("x", "y"))
        meta = pd.DataFrame(
            {c: _load(entry / f"meta.{i}.npy", mmap=False) for i, c in enumerate(manifest["meta_columns"])}
        )
        return BaseDataset(name, x, y, meta, len(manifest["classes"]), tuple(manifest["classes"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _load(path: Path, mmap: bool) -> np.ndarray:
    """A read-only array; memory-mapped arrays as a plain ndarray view (np.memmap would pickle in band)."""
    array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    array = np.asarray(array)
    array.flags.writeable = False
    return array


def _write_entry(entry: Path, dataset: BaseDataset, options: dict[str, Any]) -> None:
    entry.mkdir(parents=True, exist_ok=True)
    meta = {column: _column_array(dataset.meta[column]) for column in dataset.meta.columns}
    arrays = {"x": dataset.x, "y": dataset.y, **{f"meta.{i}": a for i, a in enumerate(meta.values())}}
    for key, array in arrays.items():
        _replace_atomically(entry / f"{key}.npy", lambda f, a=array: np.save(f, a, allow_pickle=False))
    manifest = {"name": dataset.name, "options": options, "classes": list(dataset.classes), "meta_columns": list(meta)}
    _replace_atomically(entry / MANIFEST, lambda f: f.write(json.dumps(manifest, indent=1).encode()))


def _column_array(column: pd.Series) -> np.ndarray:
    """A meta column as numpy, strings as a fixed-width str array: `pd.DataFrame` builds the same column from it."""
    values = column.to_numpy()
    return values.astype(str) if values.dtype == object else values


def _replace_atomically(path: Path, write: Callable[[Any], object]) -> None:
    """Write a file under a temporary name beside it, then rename it into place: readers see all of it or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with open(temporary, "xb") as f:
            write(f)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
