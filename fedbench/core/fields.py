"""Typed validation of free-form parameters against the signature that consumes them.

Algorithm `Config` dataclasses, model factories, dataset loaders and partition functions all declare their
parameters as typed keyword arguments with defaults. This module checks a user's mapping against such a
signature and fills in the defaults, so there is no second place where defaults live.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import typing
from collections.abc import Callable
from typing import Any, Literal

from fedbench.core.errors import ConfigError

ADDED_LATER = "options_added_later"
"""Attribute naming the options of a registered callable that were added after runs were recorded."""


def added_later(*names: str) -> Callable[[Any], Any]:
    """Mark options added to a registered loader or factory after runs of it were recorded: a spec leaves them
    out while they are at their default, so those runs keep their run hash and their scenario (whose seeds derive
    from the dataset's options)."""

    def mark(target: Any) -> Any:
        setattr(target, ADDED_LATER, names)
        return target

    return mark


def without_later_defaults(params: tuple[tuple[str, Any], ...], entry: Any, skip: int) -> tuple[tuple[str, Any], ...]:
    """`params` less the options `added_later` to `entry` that are at their default (an entry with a `Config`,
    an algorithm, declares its options there)."""
    later = getattr(entry, ADDED_LATER, ())
    if not later:
        return params
    options = getattr(entry, "Config", entry)
    defaults = {name: default for name, (_, default) in signature_fields(options, skip).items()}
    return tuple((k, v) for k, v in params if not (k in later and v == defaults[k]))


def signature_fields(target: Callable | type, skip: int = 0) -> dict[str, tuple[Any, Any]]:
    """{name: (annotation, default)} of the keyword parameters of a function or dataclass.

    Args:
        target: a function or a dataclass type.
        skip: leading positional parameters to leave out (e.g. `input_shape, num_classes` of a model).
    """
    return dict(_signature_fields(target, skip))


@functools.lru_cache(maxsize=1024)
def _signature_fields(target: Callable | type, skip: int) -> tuple[tuple[str, tuple[Any, Any]], ...]:
    """Cached: a sweep's dry run resolves thousands of configurations against the same few classes."""
    hints = type_hints(target.__init__ if isinstance(target, type) else target)  # type: ignore[misc]  # a class's
    params = list(inspect.signature(target).parameters.values())[skip:]
    return tuple(
        (p.name, (hints.get(p.name, Any), p.default)) for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    )


@functools.lru_cache(maxsize=1024)
def type_hints(target: Callable | type) -> dict[str, Any]:
    """`typing.get_type_hints(target)`, evaluated once per class or function (treat the result as read-only)."""
    return typing.get_type_hints(target)


def coerce(path: str, value: Any, annotation: Any) -> Any:
    """`value` converted to `annotation`'s type, or a ConfigError naming `path` and what is allowed."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is Any:
        return _freeze(value)
    if origin is Literal:
        if value not in args:
            raise ConfigError(path, value, "one of " + ", ".join(map(repr, args)))
        return value
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return coerce(path, value, option)
            except ConfigError as exc:
                errors.append(exc.allowed)
        raise ConfigError(path, value, " or ".join(errors))
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(path, value, "a list")
        item = args[0] if args else Any
        return tuple(coerce(f"{path}[{i}]", v, item) for i, v in enumerate(value))
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, value, "true or false")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, value, "an integer")
        return value
    if annotation is float:
        if isinstance(value, str):
            value = _float_literal(value)  # YAML 1.1 reads 1e-3 (no dot) as a string
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(path, value, "a number")
        if not math.isfinite(value):  # NaN passes every `<`/`>` range check; no field means anything by infinity
            raise ConfigError(path, value, "a finite number")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(path, value, "a string")
        return value
    return _freeze(value)


def _float_literal(text: str) -> float | str:
    """`text` as a float when it is written as one (`1e-3`, `5E+2`), else unchanged."""
    try:
        return float(text) if text.strip().lstrip("+-")[:1].isdigit() or text.strip()[:1] == "." else text
    except ValueError:
        return text


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        raise TypeError("nested mappings are not supported as parameter values")
    return value


def resolve_params(
    path: str, owner: str, params: dict[str, Any], target: Callable | type, skip: int = 0
) -> tuple[tuple[str, Any], ...]:
    """Validate `params` against `target`'s signature and return all fields, defaults filled, sorted.

    Args:
        path: dotted path of the section in the task (`algorithm`, `model`...), used in messages.
        owner: what the parameters belong to (e.g. `algorithm fedavg`), used in messages.
        params: the user's values.
        target: the function or dataclass whose signature declares the parameters.
        skip: leading positional parameters of `target` that are not user parameters.
    """
    fields = signature_fields(target, skip)
    unknown = sorted(set(params) - set(fields))
    if unknown:
        allowed = ", ".join(sorted(fields)) or "none"
        raise ConfigError(f"{path}.{unknown[0]}", params[unknown[0]], f"parameters of {owner} are: {allowed}")
    resolved = {}
    for name, (annotation, default) in fields.items():
        if name in params:
            resolved[name] = coerce(f"{path}.{name}", params[name], annotation)
        elif default is inspect.Parameter.empty or default is dataclasses.MISSING:
            raise ConfigError(f"{path}.{name}", None, f"a value is required for {owner}")
        else:
            resolved[name] = _freeze(default)
    return tuple(sorted(resolved.items()))
