"""Figures of per-client results (`fedbench.tracking.per_client`): how accuracy spreads over clients.

Two figures, drawn by `fedbench plot` beside the curves and the heatmap when the runs kept per-client results:
- the distribution of the final round's per-client accuracy per configuration (one panel per group; a box over
  every client of every seed, each client a dot), where the worst clients and the spread show;
- a clients x rounds map of each configuration's per-client accuracy (the mean over seeds), where a client that
  falls behind, or a drift that hits some clients, shows as a band.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fedbench.tracking.leaderboard import readable
from fedbench.tracking.plots import fitted

MAX_MAP_PANELS = 12
"""Configurations x groups drawn in the clients x rounds figure; the rest are named in its title as left out."""


def final_round_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Each run's rows at its last evaluated round."""
    last = table.groupby("run_hash")["round"].transform("max")
    return table[table["round"] == last]


def draw_client_distribution(table: pd.DataFrame, title: str):
    """One panel per group: a box per configuration over its clients' final accuracy (seeds pooled), dots on top."""
    from matplotlib.figure import Figure

    final = final_round_rows(table)
    groups = sorted(set(final["group"]))  # in the curves' and the client map's order (their groupby sorts)
    configurations = sorted(final["configuration"].unique())
    shown = readable(configurations)
    slanted = len(configurations) > 3 or max(map(len, shown)) > 14  # labels that would run into each other
    cols = min(3, len(groups))
    rows = math.ceil(len(groups) / cols)
    fig = Figure(figsize=(max(4.5, 0.9 + 0.75 * len(configurations)) * cols, 3.8 * rows + 0.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, sharey=True, squeeze=False)).ravel()
    jitter = np.random.default_rng(0)  # where the dots sit across their box only; the values are the clients'
    for ax, group in zip(axes, groups, strict=False):
        panel = final[final["group"] == group]
        values = [panel.loc[panel["configuration"] == c, "acc_local"].to_numpy() for c in configurations]
        present = [i for i, v in enumerate(values) if len(v)]
        ax.boxplot([values[i] for i in present], positions=present, widths=0.55, showfliers=False)
        for i in present:
            ax.scatter(i + jitter.uniform(-0.18, 0.18, len(values[i])), values[i], s=8, alpha=0.5, color="tab:blue")
        ax.set_xticks(
            range(len(configurations)),
            shown,
            rotation=25 if slanted else 0,
            ha="right" if slanted else "center",
            fontsize=8,
        )
        ax.set_title(group, fontsize=9)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(axis="y", alpha=0.3)
    for ax in axes[len(groups) :]:
        ax.set_visible(False)
    for ax in axes[::cols]:
        ax.set_ylabel("local test accuracy of a client")
    fig.suptitle(fitted(title, fig), fontsize=10)  # one panel is narrower than the title
    return fig


def draw_client_map(table: pd.DataFrame, title: str):
    """Clients (rows) x evaluated rounds (columns), per configuration and group, coloured by accuracy (mean over
    seeds), one shared colour scale from 0 to 1."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    panels = list(table.groupby(["group", "configuration"], sort=True).groups)
    left_out = len(panels) - MAX_MAP_PANELS
    panels = panels[:MAX_MAP_PANELS]
    cols = min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    clients = table["client"].nunique()
    fig = Figure(figsize=(3.4 * cols + 0.8, (1.2 + min(6.0, 0.12 * clients + 0.8)) * rows + 0.5), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    names = dict(
        zip(sorted(table["configuration"].unique()), readable(sorted(table["configuration"].unique())), strict=True)
    )
    image = None
    for ax, (group, configuration) in zip(axes, panels, strict=False):
        mine = table[(table["group"] == group) & (table["configuration"] == configuration)]
        grid = mine.pivot_table(index="client", columns="round", values="acc_local", aggfunc="mean")
        image = ax.imshow(
            grid.to_numpy(dtype=float), aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest"
        )
        rounds = list(grid.columns)
        ticks = sorted(set(np.linspace(0, len(rounds) - 1, min(len(rounds), 6)).round().astype(int)))
        ax.set_xticks(ticks, [str(rounds[t]) for t in ticks], fontsize=7)
        ax.set_xlabel("round", fontsize=8)
        ax.set_ylabel("client", fontsize=8)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # client ids, not -0.5, 0.0, 0.5 ...
        ax.tick_params(axis="y", labelsize=7)
        ax.set_title(f"{names[configuration]}\n{group}", fontsize=8)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    if image is not None:
        fig.colorbar(image, ax=axes[: len(panels)].tolist(), shrink=0.8, label="local test accuracy")
    more = f" ({left_out} more configurations not drawn)" if left_out > 0 else ""
    fig.suptitle(fitted(title + more, fig), fontsize=10)
    return fig
