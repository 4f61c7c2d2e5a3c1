"""Where a file-backed dataset's files are (`fedbench list datasets`), told from their layout alone.

A loader declares the files it reads as `DataFiles` (`with_files`): the layouts it accepts under a data root, each a
set of relative paths or glob patterns that must all be there (MNIST's four idx files, extracted or gzipped). The
catalog caches the layouts, so listing where the files are imports neither the loaders nor torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fedbench.core.cache import cache_dir


@dataclass(frozen=True)
class DataFiles:
    """The layouts a loader reads its files in: it finds them under a root where every pattern of one layout
    matches a file."""

    layouts: tuple[tuple[str, ...], ...]

    def found_in(self, root: Path) -> bool:
        return any(all(any(root.glob(pattern)) for pattern in layout) for layout in self.layouts)


def resolve_root(data_root: str | os.PathLike | None) -> Path:
    """Where dataset files are read from: `data_root`, else env `FEDBENCH_DATA`, else ~/.cache/fedbench/data.

    The default is the folder downloads go to when `FEDBENCH_CACHE` is unset, so a download is found again.
    """
    chosen = data_root or os.environ.get("FEDBENCH_DATA") or "~/.cache/fedbench/data"
    return Path(chosen).expanduser().resolve()


def files_status(layouts: Sequence[Sequence[str]]) -> str:
    """Where a dataset whose loader reads `layouts` has its files: found under the data root (`FEDBENCH_DATA`) or in
    the download cache, missing, or none of its own (no layouts: generated, shipped with a package, or made of other
    datasets, as a mixture reads its parts')."""
    if not layouts:
        return "none of its own"
    files = DataFiles(tuple(tuple(layout) for layout in layouts))
    root, cache = resolve_root(None), (cache_dir() / "data").resolve()
    if files.found_in(root):
        return f"found in {root}"
    if cache != root and files.found_in(cache):
        return f"found in the download cache {cache}"
    return f"missing from {root}" + ("" if os.environ.get("FEDBENCH_DATA") else " (FEDBENCH_DATA is not set)")
