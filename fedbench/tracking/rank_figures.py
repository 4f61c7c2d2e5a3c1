"""Figures of a ranking across scenarios (`fedbench.tracking.ranking`): the critical-difference diagram, and the
aggregate score and probabilities of improvement with their intervals.

Drawn on an Agg canvas without pyplot, as every fedbench figure is, so no backend is switched.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedbench.tracking.plots import colours, fitted
from fedbench.tracking.ranking import ALPHA, Ranking

DPI = 150


def cd_diagram(ranking: Ranking, path: Path, title: str) -> Path:
    """Demšar's critical-difference diagram: each method at its average rank on an axis from 1 (left, best) to k,
    names half on each side, and a thick bar under each group of methods no Holm-corrected Wilcoxon test tells
    apart (no bar for a method that differs from every other)."""
    from matplotlib.figure import Figure

    methods = ranking.methods
    ranks = dict(zip(ranking.aggregate["method"], ranking.aggregate["average_rank"], strict=True))
    k = len(methods)
    cliques = [c for c in ranking.cliques() if len(c) > 1]
    left = methods[: (k + 1) // 2]
    right = methods[(k + 1) // 2 :][::-1]  # the worst on the top row, so that no line crosses another
    rows = max(len(left), len(right))
    bars = 0.22 * len(cliques)  # the names start below the bars
    height = 1.3 + 0.3 * rows + 0.3 * bars
    fig = Figure(figsize=(8, height))
    ax = fig.add_axes((0.02, 0.02, 0.96, 0.80))
    top = 0.0
    ax.set_xlim(0.5 - 0.6 * k / 2, k + 0.5 + 0.6 * k / 2)
    ax.set_ylim(-(rows + 0.5) - bars, 0.8)
    ax.axis("off")
    ax.hlines(top, 1, k, color="black", linewidth=1)
    for tick in range(1, k + 1):
        ax.vlines(tick, top, top + 0.2, color="black", linewidth=1)
        ax.text(tick, top + 0.3, str(tick), ha="center", va="bottom", fontsize=9)
    for half in range(2 * k - 1):
        ax.vlines(1 + half / 2, top, top + 0.1, color="black", linewidth=0.6)
    palette = dict(zip(methods, colours(k), strict=True))
    for i, method in enumerate(left):
        y = -(i + 1) - bars
        ax.plot([ranks[method], ranks[method], 0.5], [top, y, y], color=palette[method])
        ax.text(0.5, y, f"{method} ({ranks[method]:.2f})", ha="right", va="center", fontsize=9)
    for i, method in enumerate(right):
        y = -(i + 1) - bars
        ax.plot([ranks[method], ranks[method], k + 0.5], [top, y, y], color=palette[method])
        ax.text(k + 0.5, y, f"({ranks[method]:.2f}) {method}", ha="left", va="center", fontsize=9)
    for j, clique in enumerate(cliques):
        y = -0.25 - 0.22 * j
        low, high = ranks[clique[0]], ranks[clique[-1]]
        ax.plot([low - 0.03, high + 0.03], [y, y], color="black", linewidth=4, solid_capstyle="butt")
    scope = f"{len(ranking.scenarios)} scenarios, {k} methods, {ranking.metric} ({ranking.mode} is better)"
    friedman = ranking.friedman
    test = f"Friedman p = {friedman.p_value:.3g}" if friedman else "two methods: Wilcoxon only"
    ax.set_title(
        fitted(
            f"{title}: average rank over {scope}; {test}; bars join methods no Wilcoxon signed-rank test tells "
            f"apart (Holm, α = {ALPHA})",
            fig,
        ),
        fontsize=9,
        pad=22,  # above the rank numbers
    )
    return save(fig, path)


def aggregate_figure(ranking: Ranking, path: Path, title: str) -> Path:
    """Two panels: each method's IQM of the normalised score with its 95% stratified-bootstrap interval, and
    each pair's probability of improvement with its interval (0.5: no better than a coin)."""
    from matplotlib.figure import Figure

    aggregate = ranking.aggregate
    pairs = ranking.improvement
    rows = max(len(aggregate), len(pairs))
    fig = Figure(figsize=(11, 1.4 + 0.28 * rows))
    left = fig.add_subplot(1, 2, 1)
    right = fig.add_subplot(1, 2, 2)
    palette = dict(zip(ranking.methods, colours(len(ranking.methods)), strict=True))
    y = np.arange(len(aggregate))[::-1]
    for yi, row in zip(y, aggregate.itertuples(index=False), strict=True):
        left.plot([row.low, row.high], [yi, yi], color=palette[row.method], linewidth=6, alpha=0.45)
        left.plot([row.iqm], [yi], marker="|", markersize=14, color=palette[row.method])
    left.set_yticks(y, list(aggregate["method"]), fontsize=8)
    left.set_xlabel("IQM of the normalised score (0 = the scenario's worst mean, 1 its best)", fontsize=8)
    left.set_xlim(min(-0.05, aggregate["low"].min() - 0.02), max(1.05, aggregate["high"].max() + 0.02))
    left.grid(axis="x", alpha=0.3)
    y = np.arange(len(pairs))[::-1]
    for yi, row in zip(y, pairs.itertuples(index=False), strict=True):
        right.plot([row.low, row.high], [yi, yi], color=palette[row.a], linewidth=6, alpha=0.45)
        right.plot([row.probability], [yi], marker="|", markersize=14, color=palette[row.a])
    right.axvline(0.5, color="grey", linestyle="--", linewidth=1)
    right.set_yticks(y, [f"P({row.a} > {row.b})" for row in pairs.itertuples(index=False)], fontsize=7)
    right.set_xlabel("probability of improvement (a seed of a beats a seed of b in a scenario)", fontsize=8)
    right.set_xlim(-0.05, 1.05)
    right.grid(axis="x", alpha=0.3)
    fig.suptitle(
        fitted(
            f"{title}: {ranking.metric} over {len(ranking.scenarios)} scenarios, 95% stratified-bootstrap intervals "
            "(seeds resampled within each scenario)",
            fig,
        ),
        fontsize=9,
    )
    fig.tight_layout()
    return save(fig, path)


def save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    return path
