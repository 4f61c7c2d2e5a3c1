"""Figures of drift, as a reader of a drift paper looks for them: accuracy aligned on drift events (rounds since the
drift on the x axis, one line per method, the 95% interval of its mean over clients and seeds), and the rounds
where clients drifted, for the accuracy-per-round curves to mark.

Drift events are read from the runs' per-client rows by `fedbench.core.drift`, as the runs' drift metrics are.
Drawn on an Agg canvas without pyplot, as every fedbench figure is.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedbench.core.drift import drift_events
from fedbench.tracking.intervals import mean_interval
from fedbench.tracking.plots import colours, fitted, panel_grid

BEFORE = -1
"""The x of a client's accuracy at its last evaluated round before the drift."""
MIN_DRIFTS = 3
"""Fewest drifts behind a point of the aligned figure: few clients hold a distribution for long, and the mean of one
or two of them at a late offset (whose interval cannot be drawn) would read as firmly as the rest."""


def aligned_on_drifts(table: pd.DataFrame) -> pd.DataFrame:
    """Every drift event's accuracies by rounds since the drift (-1: before it, 0: the round it drifted, then each
    evaluated round while the client held the new distribution), with its run's group and configuration: one row per
    (event, offset). Empty where no run's clients drifted (or the runs kept no distribution ids)."""
    rows = []
    if "distribution" not in table:
        return pd.DataFrame(columns=["group", "configuration", "run_hash", "offset", "accuracy"])
    for (run, group, configuration), run_rows in table.groupby(["run_hash", "group", "configuration"], sort=True):
        for event in run_events(run_rows):
            for offset, accuracy in enumerate((event.before, *event.since), start=BEFORE):
                rows.append((group, configuration, run, offset, accuracy))
    return pd.DataFrame(rows, columns=["group", "configuration", "run_hash", "offset", "accuracy"])


def drift_rounds(table: pd.DataFrame) -> dict[str, list[int]]:
    """Group -> the rounds at which some client of some run of it drifted."""
    aligned = {}
    if "distribution" not in table:
        return aligned
    for (group, _), run_rows in table.groupby(["group", "run_hash"], sort=True):
        aligned.setdefault(group, set()).update(e.round for e in run_events(run_rows))
    return {group: sorted(rounds) for group, rounds in aligned.items() if rounds}


def run_events(rows: pd.DataFrame) -> list:
    """One run's drift events from its rows of the long per-client table (a missing distribution reads as -1)."""
    arrays = {c: rows[c].to_numpy() for c in ("round", "client", "distribution", "acc_local")}
    arrays["distribution"] = np.nan_to_num(arrays["distribution"].astype(float), nan=-1).astype(int)
    return drift_events(arrays)


def draw_aligned(aligned: pd.DataFrame, title: str):
    """One panel per group, one line per configuration: the mean accuracy of the drifted clients at each number of
    rounds since their drift that at least `MIN_DRIFTS` drifts reach (every drift where there are fewer), shaded over
    the 95% interval of that mean over drifts (every client and seed: `intervals.mean_interval`); the dashed line at
    0 is the round of the drift. The y axis spans the data, where the differences between methods are."""
    from matplotlib.ticker import MaxNLocator

    groups = sorted(aligned["group"].unique())
    configurations = sorted(aligned["configuration"].unique())
    palette = dict(zip(configurations, colours(len(configurations)), strict=True))
    fig, axes, cols = panel_grid(len(groups), len(configurations))
    lowest = 1.0
    for ax, group in zip(axes, groups, strict=False):
        panel = aligned[aligned["group"] == group]
        for configuration in configurations:
            line = panel[panel["configuration"] == configuration]
            if line.empty:
                continue
            by_offset = line.groupby("offset")["accuracy"]
            counts = by_offset.size()
            x = np.array(sorted(counts.index[counts >= min(MIN_DRIFTS, counts.max())]))
            means = by_offset.mean().loc[x].to_numpy()
            bounds = [mean_interval(by_offset.get_group(offset).tolist(), bounds=(0.0, 1.0)) for offset in x]
            low = np.array([b.low if np.isfinite(b.low) else m for b, m in zip(bounds, means, strict=True)])
            high = np.array([b.high if np.isfinite(b.high) else m for b, m in zip(bounds, means, strict=True)])
            ax.plot(x, means, marker="o", markersize=3, color=palette[configuration], label=configuration)
            ax.fill_between(x, low, high, color=palette[configuration], alpha=0.2, linewidth=0)
            lowest = min(lowest, float(np.nanmin(low)))
        ax.axvline(0, color="grey", linestyle="--", linewidth=1)
        ax.set_title(group, fontsize=9)
        ax.set_xlabel("rounds since the drift (-1: before it)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    for ax in axes[: len(groups)]:
        ax.set_ylim(max(0.0, lowest - 0.05 * (1.0 - lowest) - 0.01), 1.005)
    for ax in axes[len(groups) :]:
        ax.set_visible(False)
    for ax in axes[::cols]:
        ax.set_ylabel("local test accuracy of drifted clients")
    legend = {}
    for ax in axes:  # every configuration, whichever panels it appears in
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(name, handle)
    fig.legend(list(legend.values()), list(legend), loc="outside lower center", fontsize=8, ncols=min(4, len(legend)))
    fig.suptitle(fitted(title, fig), fontsize=10)
    return fig


def mark_drifts(fig, groups: list[str], rounds: dict[str, list[int]]) -> None:
    """Dotted vertical lines at each panel's drift rounds, on a figure with one panel per group in `groups`'
    order (`plots.draw_curves`)."""
    for ax, group in zip(fig.axes, groups, strict=False):
        for round in rounds.get(group, []):
            ax.axvline(round, color="black", linestyle=":", linewidth=0.8, alpha=0.6)
