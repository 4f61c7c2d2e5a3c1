"""A report's figures per table: ours (filled, ± std) beside the published values (hollow) per column, and
along a numeric column field (clients, K, sparsity) a line per row, with a cost per run on a second axis
when the table names one (002 Fig. 4's client scaling with wall time). Drawn as `fedbench.tracking.plots`
draws: matplotlib's Figure on Agg, no pyplot, the same colours and title fitting."""

from __future__ import annotations

import collections
import math
from pathlib import Path
from typing import Any

import numpy as np

from fedbench.tracking.plots import colours, fitted, save
from fedbench.tracking.reproduction.cells import TableResult
from fedbench.tracking.reproduction.markdown import COST_HEADERS, key_text


def draw_table(result: TableResult, stem: Path, dpi: int = 110) -> list[Path]:
    """The comparison figure of `result`, and its line figure when a column field is numeric; the PNGs
    (none while no cell has a value of ours: an empty frame says nothing the table does not)."""
    if not any(cell.values for cell in result.cells.values()):
        return []
    suffix = "_ours" if result.ours_only else "_vs_published"
    files = save(comparison_figure(result), stem.with_name(stem.name + suffix), ("png",), dpi)
    axis = numeric_axis(result)
    if axis is not None:
        files += save(line_figure(result, axis), stem.with_name(stem.name + "_lines"), ("png",), dpi)
    return files


def numeric_axis(result: TableResult) -> int | None:
    """The numeric column field a line runs along: of the fields whose values are all numbers, the one whose
    panels (the other fields fixed) hold the most points, the last on a tie; None where no panel would hold
    two (a field that only follows another, as the clients follow K at one sparsity, draws single points)."""
    best, most = None, 1
    for j in range(len(result.reference.columns)):
        values = {key[j] for key in result.column_keys}
        if len(values) < 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            continue
        points = max(collections.Counter(key[:j] + key[j + 1 :] for key in result.column_keys).values())
        if points >= most and points > 1:
            best, most = j, points
    return best


def comparison_figure(result: TableResult):
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    ref, rows, columns = result.reference, result.row_keys, result.column_keys
    palette = colours(len(rows))
    fig = Figure(
        figsize=(
            min(22.0, max(6.0, 1.0 + 0.75 * len(columns) * max(1, len(rows)) ** 0.5)),
            4.6 + 0.05 * max((len(key_text(c)) for c in columns), default=0),
        ),
        layout="constrained",
    )
    ax = fig.subplots()
    width = 0.8 / max(1, len(rows))
    for i, row in enumerate(rows):
        x = np.arange(len(columns)) - 0.4 + width * (i + 0.5)
        cells = [result.cells.get((row, c)) for c in columns]
        mean = [c.mean if c is not None else math.nan for c in cells]
        std = [c.std if c is not None else math.nan for c in cells]
        ax.errorbar(x, mean, yerr=std, fmt="o", color=palette[i], markersize=5, capsize=2, label=key_text(row))
        published = [c.published if c is not None and c.published is not None else math.nan for c in cells]
        ax.plot(
            x,
            published,
            linestyle="none",
            marker="D",
            markersize=7,
            markerfacecolor="none",
            markeredgecolor=palette[i],
            markeredgewidth=1.4,
        )
    slanted = len(columns) > 3 or max((len(key_text(c)) for c in columns), default=0) > 14
    ax.set_xticks(
        range(len(columns)),
        [key_text(c) for c in columns],
        rotation=30 if slanted else 0,
        ha="right" if slanted else "center",
        fontsize=8,
    )
    for boundary in np.arange(len(columns) - 1) + 0.5:  # which points share a column
        ax.axvline(boundary, color="grey", alpha=0.15, linewidth=0.8)
    ax.set_xlim(-0.5, len(columns) - 0.5)
    ax.set_xlabel(", ".join(ref.columns))
    ax.set_ylabel(_ylabel(result))
    ax.grid(alpha=0.3, axis="y")
    handles, names = ax.get_legend_handles_labels()
    if not result.ours_only:
        handles += [
            Line2D([], [], color="grey", marker="o", linestyle="none"),
            Line2D([], [], color="grey", marker="D", markerfacecolor="none", linestyle="none"),
        ]
        names += ["ours (mean ± std)", "published"]
    fig.legend(handles, names, loc="outside lower center", fontsize=8, ncols=legend_columns(fig, len(names)))
    fig.suptitle(fitted(heading(result), fig), fontsize=10)  # the figure's width: a legend beside it would cover it
    return fig


def line_figure(result: TableResult, axis: int):
    """One panel per value of the other column fields; x the numeric field, a line per row."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    ref, rows = result.reference, result.row_keys
    panels = list(dict.fromkeys(_others(c, axis) for c in result.column_keys))
    palette = colours(len(rows))
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(5.2 * cols, 3.6 * nrows + 1.2 + 0.2 * math.ceil(len(rows) / 4)), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, cols, squeeze=False)).ravel()
    cost = ref.cost
    for ax, panel in zip(axes, panels, strict=False):
        keys = sorted((c for c in result.column_keys if _others(c, axis) == panel), key=lambda c: c[axis])
        x = [c[axis] for c in keys]
        twin = ax.twinx() if cost else None
        for i, row in enumerate(rows):
            cells = [result.cells.get((row, c)) for c in keys]
            mean = np.array([c.mean if c is not None else math.nan for c in cells])
            std = np.array([c.std if c is not None else math.nan for c in cells])
            ax.errorbar(x, mean, yerr=std, color=palette[i], marker="o", markersize=4, capsize=2, label=key_text(row))
            published = [c.published if c is not None and c.published is not None else math.nan for c in cells]
            if not all(math.isnan(p) for p in published):
                ax.plot(x, published, color=palette[i], linestyle="--", marker="D", markerfacecolor="none", alpha=0.8)
            if twin is not None:
                spent = [result.column_costs[row].get(c, {}).get(cost, math.nan) for c in keys]
                twin.plot(x, spent, color=palette[i], linestyle=":", marker="x", markersize=4, alpha=0.7)
        if twin is not None:
            twin.set_ylabel(f"{COST_HEADERS[cost]} per run (dotted)", fontsize=8)
        ax.set_title(key_text(panel) if panel else "", fontsize=9)
        ax.set_xlabel(ref.columns[axis])
        if x and min(x) > 0 and max(x) / min(x) > 100:  # lr, sparsity over decades
            ax.set_xscale("log")
        ax.set_xticks(sorted(set(x)), [f"{v:g}" for v in sorted(set(x))])
        ax.grid(alpha=0.3)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    for ax in axes[::cols]:
        ax.set_ylabel(_ylabel(result))
    handles, names = axes[0].get_legend_handles_labels()
    styles = [("-", "o", "full", "ours (mean ± std)")]
    styles += [] if result.ours_only else [("--", "D", "none", "published")]
    styles += [(":", "x", "full", f"{COST_HEADERS[cost]} per run (right axis)")] if cost else []
    handles += [Line2D([], [], color="grey", linestyle=ls, marker=m, fillstyle=f) for ls, m, f, _ in styles]
    names += [name for *_, name in styles]
    fig.legend(handles, names, loc="outside lower center", fontsize=8, ncols=legend_columns(fig, len(names)))
    fig.suptitle(fitted(f"{heading(result)} along {ref.columns[axis]}", fig), fontsize=10)
    return fig


def legend_columns(fig, entries: int) -> int:
    """As many legend entries side by side as the figure's width holds (about 1.6 inches each)."""
    return max(1, min(entries, int(fig.get_figwidth() / 1.6)))


def heading(result: TableResult) -> str:
    """The table's title, with where the published numbers are printed when there are any."""
    ref = result.reference
    return ref.title if result.ours_only else f"{ref.title} ({ref.source})"


def _others(key: tuple[Any, ...], axis: int) -> tuple[Any, ...]:
    return key[:axis] + key[axis + 1 :]


def _ylabel(result: TableResult) -> str:
    ref = result.reference
    return ref.metric + (f" × {ref.scale:g}" if ref.scale != 1 else "")
