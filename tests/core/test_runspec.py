"""The run's identity is derived from its dataclasses: every field counts, nothing else does."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from typing import Any, Literal

import pytest
import yaml

from fedbench.config import parse_run
from fedbench.core.errors import ConfigError
from fedbench.core.runspec import Component, Normalization, ResourceSpec, RunSpec
from tests.conftest import TINY

WITH_EVERYTHING = {
    **TINY,
    "dataset": {"name": "digits", "data_root": "/somewhere"},
    "scenario": {
        "partition": "dirichlet",
        "alpha": 0.5,
        "num_clients": 4,
        "drift_every": 2,
        "preset": "mine",
        "shifts": [{"name": "noise", "sigma": 0.5}, {"name": "rotation", "clusters": 2}],
        "test_clients": {"size": 20},
    },
    "local_steps": 5,
    "resources": {"num_workers": 2},
}
BASES = [
    parse_run({**WITH_EVERYTHING, "normalize": {"mode": "values", "mean": [0.5], "std": [0.5]}}),
    parse_run({**WITH_EVERYTHING, "normalize": "none"}),
]
NOT_IDENTITY = ("resources", "dataset.data_root", "run_name", "log_models")


def leaves(value: Any, annotation: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(dotted path, value, annotation) of every leaf field, walking dataclasses, components and their lists."""
    if isinstance(value, Component):
        yield f"{path}.name", value.name, str
        for key, item in value.params:
            yield f"{path}.{key}", item, type(item)
        hints = typing.get_type_hints(type(value))
        for f in dataclasses.fields(value):
            if f.name not in ("name", "params"):
                yield from leaves(getattr(value, f.name), hints[f.name], f"{path}.{f.name}")
    elif dataclasses.is_dataclass(value):
        hints = typing.get_type_hints(type(value))
        for f in dataclasses.fields(value):
            yield from leaves(getattr(value, f.name), hints[f.name], f"{path}.{f.name}".lstrip("."))
    elif isinstance(value, tuple) and value and isinstance(value[0], Component):
        for i, item in enumerate(value):
            yield from leaves(item, Component, f"{path}[{i}]")
    else:
        yield path, value, annotation


def alternatives(value: Any, annotation: Any) -> list[Any]:
    """Values other than `value` that a field of this type could hold."""
    options = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    if typing.get_origin(annotation) is Literal:
        return [a for a in typing.get_args(annotation) if a != value]
    out: list[Any] = []
    for kind in options:
        if typing.get_origin(kind) is Literal:
            out += [a for a in typing.get_args(kind) if a != value]
        elif value is None:
            out += [3, "x", 0.25]
        elif isinstance(value, bool):
            out.append(not value)
        elif isinstance(value, int):
            out.append(value + 1)
        elif isinstance(value, float):
            out.append(value / 2 if value else 0.25)
        elif isinstance(value, str):
            out.append(value + "x")
        elif isinstance(value, tuple):
            out += [value + value[:1] if value else (1,), tuple(v / 2 if isinstance(v, float) else v for v in value)]
    if type(None) in typing.get_args(annotation) and value is not None:
        out.append(None)
    return [v for v in out if v != value]


def with_leaf(spec: Any, path: str, value: Any) -> Any:
    """`spec` with the leaf at dotted `path` set to `value` (built through the types, so checks apply)."""
    head, _, rest = path.partition(".")
    name, _, index = head.partition("[")
    if isinstance(spec, Component) and name not in {f.name for f in dataclasses.fields(spec)}:
        return dataclasses.replace(spec, params=tuple((k, value if k == name else v) for k, v in spec.params))
    current = getattr(spec, name)
    if index:
        i = int(index.rstrip("]"))
        items = list(current)
        items[i] = with_leaf(items[i], rest, value)
        return dataclasses.replace(spec, **{name: tuple(items)})
    return dataclasses.replace(spec, **{name: with_leaf(current, rest, value) if rest else value})


def test_changing_any_single_field_changes_the_run_hash_except_where_it_runs():
    changed: dict[str, bool] = {}
    for base in BASES:
        for path, value, annotation in leaves(base, RunSpec):
            for other in alternatives(value, annotation):
                try:
                    variant = with_leaf(base, path, other)
                except (ConfigError, TypeError):
                    continue  # a value the type refuses (e.g. mode 'none' beside explicit means)
                assert variant != base
                identity = not path.startswith(NOT_IDENTITY)
                assert (variant.run_hash != base.run_hash) == identity, (path, value, other)
                changed[path] = True
    walked = {path for base in BASES for path, _, _ in leaves(base, RunSpec)}
    assert walked == set(changed), f"fields no valid change was found for: {sorted(walked - set(changed))}"
    # the walk reached nested fields of every kind
    for path in (
        "scenario.shifts[1].clusters",
        "scenario.partition.alpha",
        "scenario.test_clients.size",
        "normalize.mean",
        "optimizer.schedule",
        "model.hidden",
        "resources.client_gpus",
        "dataset.data_root",
        "algorithm.name",
    ):
        assert path in walked, path


def test_resources_alone_never_change_the_hash():
    base = BASES[0]
    for resources in (ResourceSpec(backend="ray"), ResourceSpec(client_cpus=2, client_gpus=0.25, num_workers=7)):
        assert base.replace(resources=resources).run_hash == base.run_hash


def test_a_spec_survives_its_own_serialisation():
    for spec in BASES:
        again = parse_run(yaml.safe_load(spec.to_yaml()))
        assert again == spec and again.run_hash == spec.run_hash


def test_every_serialised_field_is_an_mlflow_param():
    flat = BASES[0].flat()
    for path, _, _ in leaves(BASES[0], RunSpec):
        if "[" not in path:  # shifts are logged as one list-valued param
            # the partition's name and parameters sit in the scenario's section, as a task writes them
            key = path.replace("scenario.partition.name", "scenario.partition").replace(
                "scenario.partition.", "scenario."
            )
            assert key in flat, path
    assert flat["normalize.mode"] == "values" and flat["normalize.mean"] == [0.5]


@pytest.mark.parametrize(
    "raw, field",
    [
        ({"mode": "values", "mean": [0.5]}, "normalize.std"),
        ({"mode": "values", "mean": [0.5, 0.5], "std": [0.5, 0.5]}, "normalize.mean"),
        ({"mode": "values", "mean": [0.5], "std": [0.0]}, "normalize.std"),
        ({"mean": [0.5], "std": [0.5]}, "normalize.mean"),
        ("zscore", "normalize.mode"),
        (3, "normalize"),
    ],
)
def test_bad_normalisation_names_its_field(raw, field):
    with pytest.raises(ConfigError) as info:
        parse_run({**TINY, "normalize": raw})
    assert info.value.field == field, str(info.value)


def test_normalisation_shorthand():
    assert parse_run({**TINY, "normalize": "none"}).normalize == Normalization("none")
    assert parse_run(TINY).normalize == Normalization("dataset")


def test_a_parameter_left_to_its_variant_is_no_change_and_names_no_run():
    """CFL's warmup_rounds and FedDRM's lam default to None (the variant picks the value): leaving them unset is
    the default, so run names and leaderboard labels do not show them; a variant chosen explicitly is shown."""
    from fedbench.core.runspec import changed_params
    from tests.conftest import tiny_spec

    assert changed_params(tiny_spec(algorithm="cfl").algorithm) == {}
    released = tiny_spec(algorithm={"name": "cfl", "variant": "released"}).algorithm
    assert changed_params(released) == {"variant": "released"}
    assert changed_params(tiny_spec(algorithm={"name": "cfl", "warmup_rounds": 3}).algorithm) == {"warmup_rounds": 3}


def test_resources_refuse_nan_and_infinity_before_the_run():
    """NaN compares False with everything, so `client_cpus: .nan` passed `<= 0` and failed mid-run converting it to
    a thread count (issue 32, item 4)."""
    from tests.conftest import tiny_spec

    for field, value in (
        ("client_cpus", float("nan")),
        ("client_cpus", float("inf")),
        ("client_gpus", float("nan")),
        ("client_gpus", float("inf")),
    ):
        with pytest.raises(ConfigError, match="a finite number") as err:
            tiny_spec(resources={field: value})
        assert err.value.field == f"resources.{field}"
