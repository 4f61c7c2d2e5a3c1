"""fedbench's writable folder, in core so that any layer finds it without importing the heavy ones."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """fedbench's writable folder (env `FEDBENCH_CACHE`, else ~/.cache/fedbench); never a user's data root."""
    return Path(os.environ.get("FEDBENCH_CACHE") or "~/.cache/fedbench").expanduser()
