"""report.md: each table in the paper's layout, a cell reading `ours ± std (n=..) vs published: Δ`, cost
columns per row, the figures, then the cell notes, the cells beyond the spread and the failed runs."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from fedbench.core import metrics as M
from fedbench.tracking.leaderboard import COSTS, MISSING
from fedbench.tracking.reproduction.cells import SPREAD, Cell, TableResult

FLAG = "⚠"
"""Marks a cell whose ours is beyond the spread from the published number."""

COST_HEADERS = {
    "compute_s": "compute s",
    "wall_s": "wall s",
    "startup_s": "start-up s",
    "mb_up": "MB up",
    "mb_down": "MB down",
}


def fmt(value: float, like: float | None = None) -> str:
    """A number as reports print it: 1 place from 10 up (percent), 3 below (by `like`'s size when given, so
    a std reads to its mean's places), MISSING for NaN."""
    if value is None or math.isnan(value):
        return MISSING
    size = abs(value if like is None or math.isnan(like) else like)
    return f"{value:.1f}" if size >= 10 else f"{value:.3f}"


def published_text(cell: Cell) -> str:
    """The published value, with the paper's std where it prints one."""
    if cell.published is None:
        return MISSING
    return fmt(cell.published) + (
        f" ± {fmt(cell.published_std, cell.published)}" if cell.published_std is not None else ""
    )


def signed(cell: Cell) -> str:
    """ours − published, to the published value's places."""
    return f"{cell.diff:+.1f}" if abs(cell.published) >= 10 else f"{cell.diff:+.3f}"


def key_text(key: tuple[Any, ...]) -> str:
    return ", ".join(str(v) for v in key) or "all"


def cell_text(cell: Cell | None, tolerance: float, compared: bool = True) -> str:
    """What one cell of the table reads (without `vs published` in a table of ours only)."""
    if cell is None:
        return ""
    state = cell.state
    if state == "failed":
        text = f"failed ({cell.failed[0][:80]})" + (f" +{len(cell.failed) - 1} more" if len(cell.failed) > 1 else "")
    elif state != "ours":
        text = state
    else:
        seeds = f"n={cell.n}" + (f" of {cell.specs}" if cell.n < cell.specs else "")  # some not run, or failed
        text = f"{fmt(cell.mean)} ± {fmt(cell.std, cell.mean)} ({seeds})"
        if cell.failed:
            text += f", {len(cell.failed)} failed"
    if not compared:
        return text.replace("|", "/")
    text += f" vs {published_text(cell)}"
    if cell.diff is not None:
        text += f": {signed(cell)}"
        if not cell.agrees(tolerance):
            text += f" {FLAG}"
    return text.replace("|", "/")


def render_table(result: TableResult, tolerance: float, figures: Iterable[str]) -> list[str]:
    """The markdown of one table: heading, what it measures, the grid of cells, its figures and notes."""
    ref = result.reference
    lines = [f"## {ref.title}", ""]
    measured = f"`{ref.metric}`" + (f" × {ref.scale:g}" if ref.scale != 1 else "")
    lines += [
        f"Source: {ref.source}. Ours: {measured} ({M.display_name(ref.metric)}), mean ± std over seeds (n). "
        f"Rows: {', '.join(ref.rows)}; columns: {', '.join(ref.columns) or '(one)'}.",
        "",
    ]
    protocol = ["test-time model"] if result.row_protocols else []
    header = [*ref.rows, *(key_text(c) for c in result.column_keys), *protocol, *COST_HEADERS.values()]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in result.row_keys:
        cells = [
            cell_text(result.cells.get((row, column)), tolerance, not result.ours_only) for column in result.column_keys
        ]
        cells += [result.row_protocols.get(row) or MISSING] if protocol else []
        costs = [fmt(result.row_costs[row][name]) for name in COSTS]
        lines.append("| " + " | ".join([*(str(v) for v in row), *cells, *costs]) + " |")
    left_out = (
        f" {result.left_out_columns} more columns of the paper's table are not in this profile."
        if result.left_out_columns
        else ""
    )
    lines += [
        "",
        "Cost columns: mean per finished run of the row (client compute seconds, wall seconds less the "
        "workers' start-up, that start-up, MB sent up and down)." + left_out,
        "",
    ]
    if protocol:
        lines += [
            "Test-time model: how the row's test-time clients got a model (`test_time` in the task): known "
            "association = the personal model of the training client whose last distribution the test client "
            "holds (002 App. E's protocol for its baselines); same-index client = the personal model of the "
            "training client with the test client's index, whatever distribution it holds (what 002's baseline "
            "code scored); own match = the method picks one from what the test client tells (FEROMA's "
            "profile, FedDRM's routes, the Oracle's distribution id); own rule = "
            "the size-weighted ensemble of a clustered method's models (002 App. I.3) or the global model.",
            "",
        ]
    lines += [f"![{ref.title}]({name})" for name in figures] or ["(No figure: no finished run of ours yet.)"]
    lines += [""]
    lines += _listed("Notes from the task file", [(c, c.note) for c in _cells(result) if c.note])
    lines += _listed(
        f"Beyond the spread ({FLAG})",
        [
            (
                c,
                f"ours {fmt(c.mean)} ± {fmt(c.std, c.mean)} (n={c.n}) vs "
                f"{published_text(c)}, Δ {signed(c)}" + (f"; {c.note}" if c.note else ""),
            )
            for c in _cells(result)
            if c.agrees(tolerance) is False
        ],
    )
    lines += _listed("Failed runs", [(c, reason) for c in _cells(result) for reason in c.failed])
    return lines


def _cells(result: TableResult) -> list[Cell]:
    return [result.cells[(r, c)] for r in result.row_keys for c in result.column_keys if (r, c) in result.cells]


def _listed(title: str, items: list[tuple[Cell, str]]) -> list[str]:
    if not items:
        return []
    return [f"{title}:", ""] + [f"- {key_text(c.row)} @ {key_text(c.column)}: {text}" for c, text in items] + [""]


def how_to_read(tolerance: float, published_std: bool = False) -> str:
    """The report's legend; `published_std`: some cell gives the paper's std, which the verdict then counts."""
    spread = (
        f"a difference beyond {SPREAD:g} × the combined std (√(ours' std² + the published std²), the spread "
        "of the difference of two independent draws; ours' alone where the paper prints no std)"
        if published_std
        else f"a difference beyond {SPREAD:g} × ours' std"
    )
    tolerance_for = (
        "rounding and the spread of published numbers printed without a std"
        if published_std
        else "the spread of the published number, which the reference does not record"
    )
    return (
        f"Each cell: ours as mean ± sample std over seeds (ddof 1, 0 for one seed) with n, `vs` the published "
        f"value{' (± its std over the paper’s seeds where it prints one)' if published_std else ''} "
        f"({MISSING} where the paper prints none), then the difference ours − published. {FLAG} marks "
        f"{spread} + a tolerance of {tolerance:g} on the metric's own scale "
        f"(times the table's scale: 2 points of a percentage for 0.02). The tolerance stands in for "
        f"{tolerance_for}; with one seed only the tolerance applies"
        f"{' besides the published std' if published_std else ''}. `no run yet`: the task has the run, the store "
        "does not; `not in this task`: the task (or "
        "its profile) does not run that configuration; `ambiguous`: the cell's fields match several "
        "configurations (nothing pooled); `failed (reason)`: every run of the cell failed; "
        "`not reported`: the runs finished without the metric."
    )
