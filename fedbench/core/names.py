"""Names that become file and folder names (a task's, a search space's), checked when they are loaded.

A task's name names its MLflow experiment, its leaderboards, plots, scenario PNGs, best-task files, its Tune
folder and its Optuna journal, all under `results/`: a name such as `../../x` or `/tmp/x` would write
outside it, so only a plain slug is accepted.
"""

from __future__ import annotations

import re
from typing import Any

from fedbench.core.errors import ConfigError

SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
SAFE_NAME_ALLOWED = (
    "letters, digits, '.', '_' and '-', starting with a letter or digit, at most 100 characters "
    "(it names files and folders under results/)"
)


def check_name(field: str, value: Any) -> str:
    """`value` if it is a safe slug; else a ConfigError naming `field`."""
    if not isinstance(value, str) or not SAFE_NAME.fullmatch(value):
        raise ConfigError(field, value, SAFE_NAME_ALLOWED)
    return value
