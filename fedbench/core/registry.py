"""Registries by name: `@register_model("lenet5")` and friends.

Each registry knows the package whose modules register into it and imports them on first lookup, so a
name is found without every caller importing every module (and core never imports upward statically).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable, TypeVar

from fedbench.core.errors import UnknownNameError

T = TypeVar("T")


class Registry:
    """A name -> object mapping for one kind of thing (dataset, model, algorithm, partition)."""

    def __init__(self, kind: str, package: str):
        self.kind = kind
        self.package = package
        self._entries: dict[str, Any] = {}
        self._loaded = False

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator registering a class or factory under `name`; a name may be registered once."""

        def decorate(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = obj
            return obj

        return decorate

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        pkg = importlib.import_module(self.package)
        for module in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"{self.package}.{module.name}")

    def get(self, name: str, field: str | None = None) -> Any:
        """The entry called `name`; an unknown name raises an error listing the known ones."""
        self._load()
        if name not in self._entries:
            raise UnknownNameError(self.kind, name, self._entries, field=field)
        return self._entries[name]

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        self._load()
        return name in self._entries


DATASETS = Registry("dataset", "fedbench.data")
MODELS = Registry("model", "fedbench.models")
ALGORITHMS = Registry("algorithm", "fedbench.algorithms")
PARTITIONS = Registry("partition", "fedbench.scenarios")
SHIFTS = Registry("shift", "fedbench.scenarios")

register_dataset = DATASETS.register
register_model = MODELS.register
register_algorithm = ALGORITHMS.register
register_partition = PARTITIONS.register
register_shift = SHIFTS.register
