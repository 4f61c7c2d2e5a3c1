"""The published numbers a task file is compared with: its `reference:` block, checked when the task loads.

A reference is a list of tables, each laid out as the paper prints it. A cell names the runs it stands for
by field values (dotted RunSpec fields, as `--set` writes them; `algorithm`, `dataset` and `model` mean
their `.name`) and gives the published value, or null where the paper prints none:

    reference:
      - title: Test-time accuracy, MNIST label skew
        source: 002 Table 2, p. 8
        metric: final.acc_test_time
        scale: 100                      # the paper prints percent; ours x 100
        where: {dataset: mnist}         # every cell of the table also matches these
        rows: [algorithm]
        columns: [scenario.preset, scenario.drift_every]
        cells:
          - {algorithm: feroma, scenario.preset: feroma/label_skew/medium, scenario.drift_every: 2,
             value: 97.94, std: 2.01}

A cell may give the published `std` (over the paper's seeds); a table whose cells do says how many seeds each
published mean is over (`seeds: 5`), so the report's verdict can compare means (tracking/reproduction/verdict.py).
`note` is free text the report lists under the table.

A table may name a `cost` (compute_s, wall_s, mb_up or mb_down): the report's line plot along a numeric
column (clients, K) draws it per run on a second axis, as 002 Fig. 4 draws wall time beside accuracy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError

SHORTHANDS = {"algorithm": "algorithm.name", "dataset": "dataset.name", "model": "model.name"}
"""Component fields a cell may name by the component alone."""

TABLE_KEYS = {"title", "source", "metric", "scale", "where", "rows", "columns", "cells", "cost", "seeds"}
COSTS = ("compute_s", "wall_s", "startup_s", "mb_up", "mb_down")
"""Costs a table may plot beside its metric (the leaderboard's cost columns)."""
CELL_KEYS = {"value", "std", "note"}


@dataclass(frozen=True)
class ReferenceCell:
    where: tuple[tuple[str, Any], ...]
    """(dotted RunSpec field, value) pairs the runs of this cell have, the table's `where` included."""
    value: float | None
    """The published number; None where the paper prints none."""
    note: str = ""
    std: float | None = None
    """The published std over the paper's seeds; None where it prints none."""
    seeds: int | None = None
    """How many seeds the published mean is over (the table's `seeds`); None where the paper does not say."""


@dataclass(frozen=True)
class ReferenceTable:
    title: str
    source: str
    """Where the numbers are printed: paper, table or figure, page."""
    metric: str
    """The MLflow metric of ours that the published numbers measure."""
    scale: float
    """Ours times `scale` is on the paper's scale (100 when it prints percent)."""
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    cells: tuple[ReferenceCell, ...]
    cost: str | None = None
    """A cost (of COSTS) to draw per run beside the metric along a numeric column; None for none."""


def field_path(name: str) -> str:
    """A cell's field as a dotted RunSpec field: `algorithm` -> `algorithm.name`."""
    return SHORTHANDS.get(name, name)


def parse_reference(raw: Any, known_fields: Iterable[str] | None) -> tuple[ReferenceTable, ...]:
    """The `reference:` block as tables; a field no run of the task has (a typo) is refused here. With
    `known_fields` None (a smaller profile, whose runs need not have every field the paper's tables name)
    only the block's shape is checked: the paper profile checks the fields.

    Raises:
        ConfigError: naming the entry (`reference[0].cells[3].algorithm`), its value and what is allowed.
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("reference", raw, "a list of tables (title, source, metric, rows, columns, cells)")
    known = None if known_fields is None else set(known_fields)
    return tuple(_table(entry, f"reference[{i}]", known) for i, entry in enumerate(raw))


def _table(raw: Any, where: str, known: set[str] | None) -> ReferenceTable:
    if not isinstance(raw, dict):
        raise ConfigError(where, raw, "a mapping with title, source, metric, rows, columns and cells")
    unknown = set(raw) - TABLE_KEYS
    if unknown:
        raise ConfigError(
            f"{where}.{sorted(unknown)[0]}", raw[sorted(unknown)[0]], f"one of the keys {sorted(TABLE_KEYS)}"
        )
    for key in ("title", "source", "metric"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise ConfigError(f"{where}.{key}", raw.get(key), "a non-empty string")
    scale = raw.get("scale", 1)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0:
        raise ConfigError(f"{where}.scale", scale, "a number > 0 (100 when the paper prints percent)")
    cost = raw.get("cost")
    if cost is not None and cost not in COSTS:
        raise ConfigError(f"{where}.cost", cost, f"one of {', '.join(COSTS)}, or no entry")
    seeds = raw.get("seeds")
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1):
        raise ConfigError(f"{where}.seeds", seeds, "a whole number >= 1 (how many seeds each published mean is over)")
    layout = {key: _fields(raw.get(key), f"{where}.{key}", known) for key in ("rows", "columns")}
    common = _values(raw.get("where") or {}, f"{where}.where", known)
    cells = raw.get("cells")
    if not isinstance(cells, list) or not cells:
        raise ConfigError(f"{where}.cells", cells, "a non-empty list of {field: value, ..., value: number or null}")
    parsed = tuple(
        dataclasses.replace(
            _cell(cell, f"{where}.cells[{i}]", known, common, layout["rows"] + layout["columns"]), seeds=seeds
        )
        for i, cell in enumerate(cells)
    )
    with_std = next((i for i, c in enumerate(parsed) if c.std is not None), None)
    if with_std is not None and seeds is None:
        raise ConfigError(
            f"{where}.seeds", None, f"how many seeds each published mean is over: cells[{with_std}] gives a std"
        )
    return ReferenceTable(
        raw["title"],
        raw["source"],
        M.canonical(raw["metric"]),
        float(scale),
        layout["rows"],
        layout["columns"],
        parsed,
        cost,
    )


def _fields(raw: Any, where: str, known: set[str] | None) -> tuple[str, ...]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw or not all(isinstance(f, str) for f in raw):
        raise ConfigError(
            where, raw, "a field or a list of fields (e.g. [algorithm] or [scenario.preset, scenario.drift_every])"
        )
    for name in raw:
        _check_known(name, where, known)
    return tuple(field_path(f) for f in raw)


def _values(raw: Any, where: str, known: set[str] | None) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ConfigError(where, raw, "a mapping of fields to values")
    for name in raw:
        _check_known(name, f"{where}.{name}", known)
    return {field_path(name): value for name, value in raw.items()}


def _cell(
    raw: Any, where: str, known: set[str] | None, common: dict[str, Any], layout: tuple[str, ...]
) -> ReferenceCell:
    if not isinstance(raw, dict) or "value" not in raw:
        raise ConfigError(
            where, raw, "a mapping of fields to values with a `value` (a number, or null where the paper has none)"
        )
    value = raw["value"]
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ConfigError(f"{where}.value", value, "a number, or null where the paper prints none")
    std = raw.get("std")
    if std is not None and (
        isinstance(std, bool) or not isinstance(std, (int, float)) or not math.isfinite(std) or std < 0
    ):
        raise ConfigError(f"{where}.std", std, "a number >= 0 (the published std over the paper's seeds), or no entry")
    fields = {**common, **_values({k: v for k, v in raw.items() if k not in CELL_KEYS}, where, known)}
    missing = [f for f in layout if f not in fields]
    if missing:
        raise ConfigError(f"{where}.{missing[0]}", None, "a value: every cell names its row and column fields")
    return ReferenceCell(
        tuple(sorted(fields.items())),
        None if value is None else float(value),
        str(raw.get("note", "")),
        None if std is None else float(std),
    )


def _check_known(name: str, where: str, known: set[str] | None) -> None:
    if known is not None and field_path(name) not in known:
        raise ConfigError(
            where,
            name,
            "a field the task's runs have (dotted, as --set writes it; algorithm, dataset and model mean their name)",
        )
