"""A task's plain mapping -> the spec types of `fedbench.core.runspec`, field by field, from their annotations.

One idiom for every check: a type validates its own values (`__post_init__`, a registry entry's `Config`)
and names fields relative to itself; this parser knows where each section sits in the task and fills in
the path (`ConfigError.under`), so a message names exactly what the user wrote: `scenario.shifts[1].sigma`.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import typing
from collections.abc import Iterator
from typing import Any

from fedbench.core.errors import ConfigError
from fedbench.core.fields import coerce, resolve_params, type_hints, without_later_defaults
from fedbench.core.registry import ALGORITHMS
from fedbench.core.runspec import INLINE, REGISTERED_NAME, Component, DatasetSpec, RunSpec, plain


def parse_run(raw: Any) -> RunSpec:
    """Validate a plain mapping (as written in a task file) into a RunSpec; errors name the field."""
    spec = parse_spec(RunSpec, raw, "")
    method = ALGORITHMS.get(spec.algorithm.name)
    method.Config(**spec.algorithm.kwargs).check_run(spec)  # refused here, not mid-run
    method.check_spec(spec)
    return spec


def parse_dataset(raw: Any) -> DatasetSpec:
    """The `dataset:` section alone: a name or a mapping of the loader's options (and `data_root`)."""
    return _parse_component(_field(RunSpec, "dataset"), DatasetSpec, raw, "dataset")


def parse_spec(cls: type, raw: Any, path: str) -> Any:
    """A dataclass `cls` from a mapping (or its shorthand, a string for the field `cls.SHORTHAND`).

    Keys must be fields of `cls`, except for a type with an inline component (the scenario's partition),
    which takes the keys it does not know as that component's parameters.
    """
    section = _mapping(cls, raw, path)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = type_hints(cls)
    inline = next((f for f in fields.values() if f.metadata.get(INLINE)), None)
    if inline is not None:
        extra = {k: v for k, v in section.items() if k not in fields}
        if "name" in extra:  # it would silently replace the component's own name
            raise ConfigError(
                _join(path, "name"),
                extra["name"],
                f"no such field: write {inline.name}: {extra['name']} to choose the {inline.name}",
            )
        own = {k: v for k, v in section.items() if k in fields and k != inline.name}
        own[inline.name] = {**_section(section.get(inline.name, _default(inline)), _join(path, inline.name)), **extra}
        section = own
    for key, value in section.items():
        if key not in fields:
            owner = f"fields of {path}" if path else "top-level fields"
            raise ConfigError(_join(path, key), value, f"{owner} are: " + ", ".join(fields))
    values = {}
    for name, f in fields.items():
        where = _join(path, name)
        if name in section:
            values[name] = _parse_value(f, hints[name], section[name], where)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(where, None, "a value is required")
        elif "registry" in f.metadata:  # a default component gets its parameters' defaults filled in too
            values[name] = _parse_value(f, hints[name], _default(f), where)
    try:
        return cls(**values)
    except ConfigError as exc:
        raise exc.under(path) from None


def _parse_value(f: dataclasses.Field, annotation: Any, value: Any, path: str) -> Any:
    if REGISTERED_NAME in f.metadata:
        name = coerce(path, value, str)
        f.metadata[REGISTERED_NAME].get(name, field=path)  # an unknown name: the error lists the known ones
        return name
    if "registry" in f.metadata:
        if typing.get_origin(annotation) is tuple:
            if not isinstance(value, (list, tuple)):
                raise ConfigError(
                    path, value, f"a list of {f.metadata['registry'].kind} names or mappings with a 'name' key"
                )
            item_type = typing.get_args(annotation)[0]
            return tuple(_parse_component(f, item_type, item, f"{path}[{i}]") for i, item in enumerate(value))
        return _parse_component(f, annotation, value, path)
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return parse_spec(annotation, value, path)
    return coerce(path, value, annotation)


_parsed_components: contextvars.ContextVar[dict[tuple, Component] | None] = contextvars.ContextVar(
    "parsed_components", default=None
)
"""While `components_parsed_once` is open (in this thread or task): each component parsed so far, by field, place
and text."""


@contextlib.contextmanager
def components_parsed_once() -> Iterator[None]:
    """Parse a component written the same way at the same place once while open: a task's runs repeat the same
    few (a 2,340-run grid holds 13 algorithms), and each parse builds its Config to check it. Components are
    frozen, so the runs share them. Kept for one task's expansion only, so a registry changed later is read again."""
    token = _parsed_components.set(_parsed_components.get() or {})  # nested: the outer one's
    try:
        yield
    finally:
        _parsed_components.reset(token)


def _parse_component(f: dataclasses.Field, cls: type, raw: Any, path: str) -> Component:
    """A registered component: its name looked up, its parameters checked against what the entry declares
    (a registered function's signature or an algorithm's `Config`), defaults filled in.

    An inline component's parameters sit in its parent's section, so they are named under the parent
    (`scenario.alpha`) and its name under the field (`scenario.partition`).
    """
    parsed = _parsed_components.get()
    if parsed is None:
        return _parse_new_component(f, cls, raw, path)
    key = (f.name, f.metadata["registry"].kind, cls, path, repr(raw))
    if key not in parsed:
        parsed[key] = _parse_new_component(f, cls, raw, path)
    return parsed[key]


def _parse_new_component(f: dataclasses.Field, cls: type, raw: Any, path: str) -> Component:
    registry, skip = f.metadata["registry"], f.metadata["skip"]
    section = _section(raw, path)
    params_path = path.rpartition(".")[0] if f.metadata.get(INLINE) else path
    name_path = path if f.metadata.get(INLINE) else f"{path}.name"
    hints = type_hints(cls)
    own = {
        k: coerce(_join(path, k), section.pop(k), hints[k])
        for k in [x.name for x in dataclasses.fields(cls) if x.name not in ("name", "params")]
        if k in section
    }
    name = coerce(name_path, section.pop("name"), str)
    entry = registry.get(name, field=name_path)
    target = getattr(entry, "Config", entry)
    params = resolve_params(params_path, f"{registry.kind} {name}", section, target, skip)
    params = without_later_defaults(params, entry, skip)
    if dataclasses.is_dataclass(target):
        try:
            target(**dict(params))  # runs the Config's own range checks (__post_init__)
        except ConfigError as exc:
            raise exc.under(params_path) from None
    return cls(name, params, **own)


def _field(cls: type, name: str) -> dataclasses.Field:
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def _default(f: dataclasses.Field) -> Any:
    """A field's default as a task would write it (a component's default is parsed like user input)."""
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    return plain(default)


def _mapping(cls: type, raw: Any, path: str) -> dict[str, Any]:
    shorthand = getattr(cls, "SHORTHAND", None)
    if shorthand is not None and isinstance(raw, str):
        return {shorthand: raw}
    if not isinstance(raw, dict):
        allowed = f"a mapping, or a {shorthand} alone" if shorthand else "a mapping"
        raise ConfigError(path or "run", raw, allowed)
    return dict(raw)


def _section(raw: Any, path: str) -> dict[str, Any]:
    """A component's section: a bare name, or a mapping with a 'name' key."""
    if isinstance(raw, str):
        return {"name": raw}
    if not isinstance(raw, dict):
        raise ConfigError(path, raw, "a name or a mapping with a 'name' key")
    if "name" not in raw:
        raise ConfigError(f"{path}.name", None, "a value is required")
    return dict(raw)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
