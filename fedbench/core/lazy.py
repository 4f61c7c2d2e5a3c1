"""A package's names imported from their modules on first use (PEP 562), so that importing the package, or a
light module of it, does not load what those names need (torch, Ray Tune, MLflow)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, module_of: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's `__getattr__` and `__dir__`: `name` comes from module `module_of[name]` (absolute)."""

    def __getattr__(name: str) -> Any:
        if name in module_of:
            return getattr(importlib.import_module(module_of[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *module_of})

    return __getattr__, __dir__
