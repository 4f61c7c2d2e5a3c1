"""A reproduction table's cells: the task's runs each published number stands for, read back from the store.

A cell's runs are the task's RunSpecs whose fields match the cell's (`ReferenceCell.where`), found in the
store by run hash, so a cell is "no run yet" exactly when the task would run it and has not, and "not in
this task" when the task (or its profile) has no such run at all. Ours is on the paper's scale (the metric
times the table's `scale`); std is the sample std over seeds (ddof 1, 0 for one seed), as leaderboards say.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from fedbench.config.reference import ReferenceCell, ReferenceTable
from fedbench.core.runspec import RunSpec
from fedbench.tracking.leaderboard import COSTS, IGNORED, latest_finished, run_costs
from fedbench.tracking.reproduction.verdict import Verdict, compare
from fedbench.tracking.store import FAILED, RUN_HASH, START_TIME, STATUS, is_metric, tag
from fedbench.tracking.tags import FAILURE_REASON_TAG


@dataclass(frozen=True)
class RunState:
    """What the store says about one RunSpec: its metric (None: no finished run), costs, or why it failed."""

    value: float | None = None
    costs: dict[str, float] = field(default_factory=dict)
    failed: str | None = None
    finished: bool = False


@dataclass(frozen=True)
class Cell:
    row: tuple[Any, ...]
    column: tuple[Any, ...]
    published: float | None
    note: str = ""
    published_std: float | None = None
    """The paper's std over its seeds; None where it prints none."""
    published_seeds: int | None = None
    """How many seeds the published mean is over; None where the paper does not say."""
    values: tuple[float, ...] = ()
    """Ours on the paper's scale, one per finished seed that reports the metric."""
    specs: int = 0
    """The task's runs (seeds) this cell stands for."""
    finished: int = 0
    failed: tuple[str, ...] = ()
    """The reasons of the cell's failed runs."""
    configurations: int = 0
    """How many configurations (seeds pooled) the cell's fields match: more than one is ambiguous."""

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return float(np.mean(self.values)) if self.values else math.nan

    @property
    def std(self) -> float:
        return float(np.std(self.values, ddof=1)) if self.n > 1 else (0.0 if self.n else math.nan)

    @property
    def diff(self) -> float | None:
        return None if self.published is None or not self.values else self.mean - self.published

    def verdict(self, tolerance: float, resolution: float) -> Verdict | None:
        """Ours against the published mean (`verdict.compare`; `tolerance` and `resolution` on the paper's scale);
        None when there is nothing to compare."""
        if self.published is None or not self.values:
            return None
        return compare(self.values, self.published, self.published_std, self.published_seeds, tolerance, resolution)

    @property
    def state(self) -> str:
        """ours, not in this task, ambiguous, no run yet, failed, not reported (finished runs without the metric)."""
        if self.configurations > 1:
            return f"ambiguous: {self.configurations} configurations match (name more fields)"
        if self.values:
            return "ours"
        if not self.specs:
            return "not in this task"
        if self.failed:
            return "failed"
        if self.finished:
            return "not reported"
        return "no run yet"


@dataclass
class TableResult:
    """A table in the paper's layout: rows x columns of cells, with cost per run averaged over each row."""

    reference: ReferenceTable
    row_keys: list[tuple[Any, ...]]
    column_keys: list[tuple[Any, ...]]
    cells: dict[tuple[tuple[Any, ...], tuple[Any, ...]], Cell]
    row_costs: dict[tuple[Any, ...], dict[str, float]]
    column_costs: dict[tuple[Any, ...], dict[tuple[Any, ...], dict[str, float]]]
    """Per row, per column: each cost's mean per finished run (for plots along a numeric column)."""
    ours_only: bool = False
    row_protocols: dict[tuple[Any, ...], str] = dataclasses.field(default_factory=dict)
    """Per row, how its test-time clients got their models (`test_time_protocol`), for a test-time metric."""
    left_out_columns: int = 0
    """Columns of the paper's table left out because the task runs none of their cells (`in_task`)."""

    def in_task(self) -> TableResult | None:
        """The rows and columns holding a cell the task runs; None when it runs none of the table. What a
        smaller profile's report shows: its few columns, not the paper's dozens of `not in this task`."""
        ran = [key for key, cell in self.cells.items() if cell.specs]
        if not ran:
            return None
        rows = [r for r in self.row_keys if any(r == row for row, _ in ran)]
        columns = [c for c in self.column_keys if any(c == column for _, column in ran)]
        return dataclasses.replace(
            self,
            row_keys=rows,
            column_keys=columns,
            cells={(r, c): cell for (r, c), cell in self.cells.items() if r in rows and c in columns},
            left_out_columns=self.left_out_columns + len(self.column_keys) - len(columns),
        )


def run_states(specs: Sequence[RunSpec], runs: pd.DataFrame, metric: str, scale: float) -> dict[str, RunState]:
    """Each spec's run hash -> its latest finished run (metric x scale, costs), or its failure, or nothing."""
    states: dict[str, RunState] = {}
    finished = latest_finished(runs) if len(runs) else runs
    by_hash = finished.set_index(RUN_HASH) if len(finished) else None
    costs_by_hash = run_costs(by_hash) if by_hash is not None else None
    failed = runs[runs[STATUS] == FAILED].sort_values(START_TIME) if len(runs) else runs
    reason = tag(FAILURE_REASON_TAG)
    reasons = (
        dict(zip(failed[RUN_HASH], failed[reason] if reason in failed else [None] * len(failed), strict=True))
        if len(failed)
        else {}
    )
    column = metric if is_metric(metric) else ""
    for spec in specs:
        key = spec.run_hash
        if by_hash is not None and key in by_hash.index:
            row = by_hash.loc[key]
            value = row.get(column, math.nan)
            costs = {name: float(value) for name, value in costs_by_hash.loc[key].items()}
            states[key] = RunState(None if pd.isna(value) else float(value) * scale, costs, finished=True)
        elif key in reasons:
            states[key] = RunState(failed="no reason recorded" if pd.isna(reasons[key]) else str(reasons[key]))
    return states


def configuration_key(flat: dict[str, Any]) -> tuple:
    """What a configuration is: every field of a run's `flat` that tells runs apart, the seed left out."""
    return tuple(sorted((k, str(v)) for k, v in flat.items() if k not in IGNORED and not k.startswith("resources.")))


def matches(flat: dict[str, Any], where: Sequence[tuple[str, Any]]) -> bool:
    return all(name in flat and same(flat[name], value) for name, value in where)


def same(ours: Any, theirs: Any) -> bool:
    """Field values as a task file writes them: numbers equal as numbers (2 == 2.0), the rest as text."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (ours, theirs))
    return float(ours) == float(theirs) if numbers else str(ours) == str(theirs)


def make_cell(
    row,
    column,
    reference: ReferenceCell | None,
    specs: list[RunSpec],
    states: dict[str, RunState],
    flats: dict[str, dict[str, Any]],
) -> Cell:
    """The cell at (row, column) of the published `reference` (None in a table of ours only) and its runs `specs`."""
    found = [states.get(s.run_hash, RunState()) for s in specs]
    configurations = len({configuration_key(flats[s.run_hash]) for s in specs})
    published = (
        (reference.value, reference.note, reference.std, reference.seeds)
        if reference is not None
        else (None, "", None, None)
    )
    return Cell(
        row,
        column,
        *published,  # runs of several configurations are never pooled into one value
        values=tuple(st.value for st in found if st.value is not None) if configurations <= 1 else (),
        specs=len(specs),
        finished=sum(st.finished for st in found),
        failed=tuple(st.failed for st in found if st.failed),
        configurations=configurations,
    )


def value_order(flats: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    """Per field, its values as text keys that compare as `same` does, in the order they first appear in
    `flats` (the expanded runs first: the order the task's grid lists them; then the values only cells name),
    except that numbers keep the direction the grid gives them: K = 2, 3, 5, 10 where the grid runs 2, 5 and a
    reference cell names 3 and 10; drift every 4, 2, 1 where the grid lists it so, as 002 prints it."""
    values: dict[str, dict[str, Any]] = {}
    for flat in flats:
        for name, value in flat.items():
            values.setdefault(name, {}).setdefault(order_key(value), value)
    return {
        name: _numeric_order(seen) if all(map(_is_number, seen.values())) else list(seen)
        for name, seen in values.items()
    }


def _numeric_order(seen: dict[str, Any]) -> list[str]:
    """`seen`'s keys sorted by value, descending where its first two values come in descending order."""
    first = list(seen.values())[:2]
    return sorted(seen, key=lambda text: float(seen[text]), reverse=len(first) == 2 and first[0] > first[1])


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def order_key(value: Any) -> str:
    return repr(float(value)) if _is_number(value) else str(value)


def sort_keys(keys, fields: Sequence[str], order: dict[str, list[str]]) -> list[tuple]:
    def position(key):
        return tuple(
            order.get(f, []).index(order_key(v)) if order_key(v) in order.get(f, []) else len(order.get(f, []))
            for f, v in zip(fields, key, strict=True)
        )

    return sorted(dict.fromkeys(keys), key=position)


def cost_means(specs: list[RunSpec], states: dict[str, RunState]) -> dict[str, float]:
    """Each cost's mean per finished run of `specs` (NaN where none finished)."""
    finished = [states[s.run_hash].costs for s in specs if s.run_hash in states and states[s.run_hash].finished]
    return {
        name: float(np.nanmean([c[name] for c in finished]))
        if finished and not all(math.isnan(c[name]) for c in finished)
        else math.nan
        for name in COSTS
    }
