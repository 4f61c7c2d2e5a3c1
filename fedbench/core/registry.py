"""Registries by name: `@register_model("lenet5")` and friends.

Each registry knows the package whose modules register into it and imports them on first lookup, so a
name is found without every caller importing every module (and core never imports upward statically).

Things from outside the package are found two more ways, so a user's method needs no edit to fedbench:
a `module:attribute` name (`algorithm: {name: mypkg.mymethod:MyAlgo}`) is imported where it is looked up,
and installed packages can declare entry points in the group `fedbench.<kind>s` (`fedbench.algorithms`,
`fedbench.models`, `fedbench.datasets`, ...), read once with the package's own modules. A run records the
name as it was written, so the same name finds the same object when the run is repeated.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import os
import pkgutil
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from fedbench.core.errors import ConfigError, UnknownNameError

T = TypeVar("T")


class Registry:
    """A name -> object mapping for one kind of thing (dataset, model, algorithm, partition, backend).

    Args:
        kind: what the entries are, in messages (`algorithm`); the entry-point group is `fedbench.<kind>s`.
        package: the package whose modules register the built-in entries.
        base: `module:Class` that an entry from outside the package must subclass; None: any callable.
    """

    def __init__(self, kind: str, package: str, base: str | None = None):
        self.kind = kind
        self.package = package
        self.base = base
        self._entries: dict[str, Any] = {}
        self._plugins: dict[str, importlib.metadata.EntryPoint] = {}
        self._imported: dict[str, Any] = {}
        self._loaded = False

    @property
    def group(self) -> str:
        """The entry-point group installed packages declare entries of this registry in."""
        return f"fedbench.{self.kind}s"

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
        for entry_point in importlib.metadata.entry_points(group=self.group):
            if entry_point.name not in self._entries:  # a built-in name keeps its built-in meaning
                self._plugins.setdefault(entry_point.name, entry_point)

    def get(self, name: str, field: str | None = None) -> Any:
        """The entry called `name`: registered, declared by an entry point, or a `module:attribute` to import.

        Raises:
            UnknownNameError: an unknown plain name (the message lists the known ones).
            ConfigError: an entry point or `module:attribute` that does not import or is not of this kind,
                naming `field` and what was tried.
        """
        self._load()
        if name in self._entries:
            return self._entries[name]
        if name not in self._imported:
            if name in self._plugins:
                self._imported[name] = self._checked(name, field, self._plugins[name].value, self._plugins[name].load)
            elif isinstance(name, str) and ":" in name:
                self._imported[name] = self._checked(name, field, name, lambda: import_attribute(name))
            else:
                raise UnknownNameError(self.kind, name, self.names(), field=field)
        return self._imported[name]

    def _checked(self, name: str, field: str | None, target: str, load: Callable[[], Any]) -> Any:
        """What `load` imports for `name`, if it is of this registry's kind; else a ConfigError saying what was
        tried."""
        allowed = f"a known {self.kind} ({', '.join(self.names())}) or an importable module:attribute"
        try:
            obj = load()
        except Exception as exc:  # an import runs the user's module: any error it raises is a bad name
            raise ConfigError(
                field or self.kind, name, f"{allowed}; importing {target} failed: {type(exc).__name__}: {exc}"
            ) from exc
        problem = self._kind_problem(obj)
        if problem:
            raise ConfigError(field or self.kind, name, f"{allowed}; {target} {problem}")
        return obj

    def _kind_problem(self, obj: Any) -> str | None:
        if self.base is None:
            return None if callable(obj) else f"is a {type(obj).__name__}, not a callable"
        base = import_attribute(self.base)
        if inspect.isclass(obj) and issubclass(obj, base):
            return None
        what = f"the class {obj.__qualname__}" if inspect.isclass(obj) else f"a {type(obj).__name__}"
        return f"is {what}, not a subclass of {base.__module__}.{base.__qualname__}"

    def names(self) -> list[str]:
        """Registered names and those entry points declare (`module:attribute` names are not listed)."""
        self._load()
        return sorted({*self._entries, *self._plugins})

    def __contains__(self, name: str) -> bool:
        try:
            self.get(name)
        except ConfigError:
            return False
        return True


def import_attribute(target: str) -> Any:
    """The object `module:attribute` names (the attribute may be dotted), importing the module as
    `python -m` would: with the working directory on `sys.path`, so a user's own module next to the task is found."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{target!r} is not of the form module:attribute")
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    obj = importlib.import_module(module_name)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


DATASETS = Registry("dataset", "fedbench.data")
MODELS = Registry("model", "fedbench.models")
ALGORITHMS = Registry("algorithm", "fedbench.algorithms", base="fedbench.algorithms.base:Algorithm")
PARTITIONS = Registry("partition", "fedbench.scenarios", base="fedbench.scenarios.partition:Partition")
SHIFTS = Registry("shift", "fedbench.scenarios", base="fedbench.scenarios.shifts:Shift")
BACKENDS = Registry("backend", "fedbench.runtime.backends")

register_dataset = DATASETS.register
register_model = MODELS.register
register_algorithm = ALGORITHMS.register
register_partition = PARTITIONS.register
register_shift = SHIFTS.register
register_backend = BACKENDS.register
