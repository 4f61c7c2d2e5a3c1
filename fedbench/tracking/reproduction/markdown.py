"""report.md: each table in the paper's layout, a cell reading `ours ± std (n=..) vs published: Δ [95% interval]`
with its verdict's mark, cost columns per row, the figures, then the cell notes, the cells beyond and not testable,
the rows and columns whose differences all have one sign, and the failed runs."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from fedbench.core import metrics as M
from fedbench.tracking.leaderboard import COSTS, MISSING
from fedbench.tracking.reproduction.cells import Cell, TableResult
from fedbench.tracking.reproduction.verdict import BEYOND, CONFIDENCE, NOT_TESTABLE, Verdict, one_sign_patterns

FLAG = "⚠"
"""Marks a cell whose difference from the published mean is beyond the tolerance at 95%."""
UNTESTED = "?"
"""Marks a cell whose seeds are too few (or too spread) to test anything: its interval is wider than the resolution."""
MARKS = {BEYOND: FLAG, NOT_TESTABLE: UNTESTED}

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


def signed(cell: Cell, value: float | None = None) -> str:
    """ours − published (or `value`), to the published value's places."""
    value = cell.diff if value is None else value
    return f"{value:+.1f}" if abs(cell.published) >= 10 else f"{value:+.3f}"


def interval_text(cell: Cell, verdict: Verdict) -> str:
    """The 95% interval of the difference of means, `[lo, hi]`; `[no spread]` where none is known."""
    if math.isinf(verdict.half_width):
        return "[no spread]"
    low, high = verdict.interval
    return f"[{signed(cell, low)}, {signed(cell, high)}]"


def key_text(key: tuple[Any, ...]) -> str:
    return ", ".join(str(v) for v in key) or "all"


def cell_text(cell: Cell | None, tolerance: float, resolution: float, compared: bool = True) -> str:
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
    verdict = cell.verdict(tolerance, resolution)
    if verdict is not None:
        text += f": {signed(cell)} {interval_text(cell, verdict)}"
        if verdict.kind in MARKS:
            text += f" {MARKS[verdict.kind]}"
    return text.replace("|", "/")


def render_table(result: TableResult, tolerance: float, resolution: float, figures: Iterable[str]) -> list[str]:
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
            cell_text(result.cells.get((row, column)), tolerance, resolution, not result.ours_only)
            for column in result.column_keys
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
    judged = [(c, v) for c in _cells(result) if (v := c.verdict(tolerance, resolution)) is not None]
    for kind, title in (
        (BEYOND, f"Beyond the tolerance at 95% ({FLAG})"),
        (NOT_TESTABLE, f"Not testable ({UNTESTED})"),
    ):
        lines += _listed(
            title,
            [
                (
                    c,
                    f"ours {fmt(c.mean)} ± {fmt(c.std, c.mean)} (n={c.n}) vs {published_text(c)}, Δ {signed(c)} "
                    f"{interval_text(c, v)}" + (f"; {c.note}" if c.note else ""),
                )
                for c, v in judged
                if v.kind == kind
            ],
        )
    lines += one_sign_lines(result, [c for c, _ in judged])
    lines += _listed("Failed runs", [(c, reason) for c in _cells(result) for reason in c.failed])
    return lines


def one_sign_lines(result: TableResult, compared: list[Cell]) -> list[str]:
    """The rows and columns whose compared differences all have one sign: a systematic pattern no single cell's
    verdict shows, with a sign test's p-value (few cells of one sign happen by chance)."""
    lines: dict[tuple[str, str], list[float]] = {}
    for c in compared:
        lines.setdefault(("row", key_text(c.row)), []).append(c.mean - c.published)
        lines.setdefault(("column", key_text(c.column)), []).append(c.mean - c.published)
    patterns = one_sign_patterns(lines)
    if not patterns:
        return []
    out = ["Rows and columns whose differences all have one sign (two-sided sign test p; p < 0.05 is systematic):", ""]
    for p in patterns:
        direction = "above" if p.sign > 0 else "below"
        systematic = ", systematic" if p.p_value < 0.05 else ""
        out.append(
            f"- {p.axis} {p.key}: all {p.count} {direction} the paper (mean Δ {p.mean_diff:+.3g}; p = {p.p_value:.3f}"
            f"{systematic})"
        )
    return out + [""]


def _cells(result: TableResult) -> list[Cell]:
    return [result.cells[(r, c)] for r in result.row_keys for c in result.column_keys if (r, c) in result.cells]


def _listed(title: str, items: list[tuple[Cell, str]]) -> list[str]:
    if not items:
        return []
    return [f"{title}:", ""] + [f"- {key_text(c.row)} @ {key_text(c.column)}: {text}" for c, text in items] + [""]


def how_to_read(tolerance: float, resolution: float) -> str:
    """The report's legend: what a cell reads and the rule its verdict follows (`verdict.compare`)."""
    level = f"{CONFIDENCE:.0%}"
    return (
        f"Each cell: ours as mean ± sample std over seeds (ddof 1, 0 for one seed) with n, `vs` the published "
        f"mean (± its std over the paper's seeds where it prints one; {MISSING} where it prints no value), then the "
        f"difference of means ours − published and its {level} interval in brackets: Welch's interval for a "
        "difference of two means (t with Welch-Satterthwaite degrees of freedom, each side's variance of its mean "
        "= std² / seeds, the paper's seeds from the table's `seeds`). With one seed of ours, ours' spread is taken to "
        "be the paper's; with neither spread known, `[no spread]`. The verdict compares means, not single draws: "
        f"{FLAG} beyond: the whole interval lies outside ± a tolerance of {tolerance:g} on the metric's own scale "
        f"(times the table's scale: 2 points of a percentage for 0.02; it stands in for rounding); {UNTESTED} not "
        f"testable: not beyond, but the interval is wider than ± {resolution:g} (the resolution, on the same scale): "
        "these seeds cannot tell a reproduction from a method that far off, so the cell is not counted as within; "
        "unmarked: within. Under each table, the rows and columns whose differences all have one sign (a "
        "systematic pattern no single cell shows), with a sign test. `no run yet`: the task has the run, the "
        "store does not; `not in this task`: the task (or its profile) does not run that configuration; "
        "`ambiguous`: the cell's fields match several configurations (nothing pooled); `failed (reason)`: every "
        "run of the cell failed; `not reported`: the runs finished without the metric."
    )
