"""The report's tables: one per `reference:` table in the paper's layout, and one of ours only for the task's
runs no published cell covers (so a suite without a reference still gets a report)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fedbench.config.reference import ReferenceTable
from fedbench.core import metrics as M
from fedbench.core.runspec import RunSpec
from fedbench.tracking.leaderboard import IGNORED
from fedbench.tracking.reproduction.cells import (
    RunState,
    TableResult,
    cost_means,
    make_cell,
    matches,
    sort_keys,
    value_order,
)

Flats = dict[str, dict[str, Any]]
"""Each run hash's flat fields (`RunSpec.flat`, computed once: it is the slow part of a big suite)."""


def reference_table(
    table: ReferenceTable, specs: Sequence[RunSpec], flats: Flats, states: dict[str, RunState]
) -> TableResult:
    """`table`'s cells, each with the task's runs its fields name; rows and columns in the grid's order."""
    order = value_order([flats[s.run_hash] for s in specs] + [dict(c.where) for c in table.cells])
    cells, members = {}, {}
    for ref in table.cells:
        where = dict(ref.where)
        row, column = tuple(where[f] for f in table.rows), tuple(where[f] for f in table.columns)
        mine = [s for s in specs if matches(flats[s.run_hash], ref.where)]
        cells[(row, column)] = make_cell(row, column, ref, mine, states, flats)
        members[(row, column)] = mine
    rows = sort_keys([r for r, _ in cells], table.rows, order)
    columns = sort_keys([c for _, c in cells], table.columns, order)
    return TableResult(
        table,
        rows,
        columns,
        cells,
        *_costs(members, states, rows),
        row_protocols=_protocols(members, rows, table.metric),
    )


def ours_only_table(
    specs: Sequence[RunSpec],
    flats: Flats,
    axes: Sequence[str],
    covered: set[str],
    states: dict[str, RunState],
    metric: str,
    scale: float,
) -> TableResult | None:
    """The task's runs no reference cell covers: a row per algorithm configuration, a column per point of the
    task's other grid `axes`; None when every run is covered."""
    rest = [s for s in specs if s.run_hash not in covered]
    if not rest:
        return None
    columns = [f for axis in axes if not axis.startswith("algorithm") for f in axis_fields(axis, list(flats.values()))]
    columns = columns + [f for f in varying_fields([flats[s.run_hash] for s in rest]) if f not in columns]
    columns = telling_columns(columns, [flats[s.run_hash] for s in rest])
    order = value_order([flats[s.run_hash] for s in specs])
    labels = algorithm_labels(rest, flats)
    cells, members = {}, {}
    for spec in rest:
        key = ((labels[spec.run_hash],), tuple(_plain(flats[spec.run_hash].get(f)) for f in columns))
        members.setdefault(key, []).append(spec)
    for (row, column), mine in members.items():
        cells[(row, column)] = make_cell(row, column, None, mine, states, flats)
    order["algorithm"] = list(dict.fromkeys(labels.values()))
    rows = sort_keys([r for r, _ in cells], ("algorithm",), order)
    column_keys = sort_keys([c for _, c in cells], columns, order)
    table = ReferenceTable(
        "Ours only: runs of the task no published number covers",
        "no published numbers",
        metric,
        scale,
        ("algorithm",),
        columns,
        (),
    )
    return TableResult(
        table,
        rows,
        column_keys,
        cells,
        *_costs(members, states, rows),
        ours_only=True,
        row_protocols=_protocols(members, rows, metric),
    )


def telling_columns(fields: Sequence[str], flats: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """The `fields` that tell these runs apart, in order: each varies among them and is not fixed by the fields
    kept before it (a preset fixes its partition and alpha, which would only repeat it in every label)."""
    kept: list[str] = []
    for field in fields:
        seen: dict[tuple, set[str]] = {}
        for flat in flats:
            seen.setdefault(tuple(str(flat.get(k)) for k in kept), set()).add(str(flat.get(field)))
        if any(len(values) > 1 for values in seen.values()):
            kept.append(field)
    return tuple(kept)


def axis_fields(axis: str, flats: Sequence[dict[str, Any]]) -> list[str]:
    """The flat fields a grid axis sets: itself, a section's name or preset (`dataset` -> `dataset.name`), or
    else the section's fields that vary across the task."""
    for name in (axis, f"{axis}.name", f"{axis}.preset"):
        if any(name in flat for flat in flats):
            return [name]
    under = dict.fromkeys(k for flat in flats for k in flat if k.startswith(axis + "."))
    return [f for f in under if f not in IGNORED and len({str(flat.get(f)) for flat in flats}) > 1]


def varying_fields(flats: Sequence[dict[str, Any]]) -> list[str]:
    """Fields other than the algorithm's and the seed that differ between runs: what an axis that names no field
    of its own resolves into (a preset's `sparsity` sets `scenario.num_clients`)."""
    keys = dict.fromkeys(k for flat in flats for k in flat)
    return [
        k
        for k in keys
        if k not in IGNORED
        and not k.startswith(("algorithm", "resources."))
        and len({str(flat.get(k)) for flat in flats}) > 1
    ]


def algorithm_labels(specs: Sequence[RunSpec], flats: Flats) -> dict[str, str]:
    """Each run's algorithm: its name and the parameters that vary among the runs of that algorithm
    (`fedprox mu=0.1`), by run hash."""
    telling = {}
    for name in dict.fromkeys(s.algorithm.name for s in specs):
        mine = [flats[s.run_hash] for s in specs if s.algorithm.name == name]
        fields = dict.fromkeys(f for flat in mine for f in flat if f.startswith("algorithm.") and f != "algorithm.name")
        telling[name] = [f for f in fields if len({str(flat.get(f)) for flat in mine}) > 1]
    return {
        s.run_hash: " ".join(
            [
                s.algorithm.name,
                *(f"{f.removeprefix('algorithm.')}={flats[s.run_hash].get(f)}" for f in telling[s.algorithm.name]),
            ]
        )
        for s in specs
    }


def covered_hashes(tables: Sequence[ReferenceTable], flats: Flats) -> set[str]:
    """Run hashes of the runs some cell of some table stands for."""
    return {h for h, flat in flats.items() if any(matches(flat, c.where) for t in tables for c in t.cells)}


def _plain(value: Any) -> Any:
    return value if isinstance(value, (int, float, str)) or value is None else str(value)


def test_time_protocol(spec: RunSpec, metric: str = M.ACC_TEST_TIME) -> str:
    """How `spec`'s test-time clients get a model, in the report's words (`RunSpec.test_time`), for `metric`: the
    same-index reading (`acc_test_time_index`) of a run given the known association is read as its name says."""
    from fedbench.algorithms.capabilities import TestTimeAssignment, gets_given_association
    from fedbench.core.registry import ALGORITHMS

    method = ALGORITHMS.get(spec.algorithm.name, field="algorithm.name")
    if not issubclass(method, TestTimeAssignment):
        return "none (no test-time clients)"
    if gets_given_association(method, spec.test_time):
        if spec.test_time == "known" and metric != M.ACC_TEST_TIME_INDEX:
            return "known association (002 App. E)"
        return "same-index client (002's baseline code)"
    return "own match" if method.picks_by_description else "own rule (ensemble or global model)"


def _protocols(members: dict, rows: list, metric: str) -> dict[tuple[Any, ...], str]:
    """Per row, the test-time protocol of its runs (several joined where they differ); empty unless `metric` is
    a test-time one."""
    bare = M.canonical(metric).removeprefix(M.FINAL_PREFIX)
    if bare not in M.TEST_TIME:
        return {}
    return {
        r: " / ".join(
            dict.fromkeys(test_time_protocol(s, bare) for (row, _), m in members.items() if row == r for s in m)
        )
        for r in rows
    }


def _costs(members: dict, states: dict[str, RunState], rows: list) -> tuple[dict, dict]:
    row_costs = {r: cost_means([s for (row, _), m in members.items() if row == r for s in m], states) for r in rows}
    column_costs = {r: {c: cost_means(m, states) for (row, c), m in members.items() if row == r} for r in rows}
    return row_costs, column_costs
