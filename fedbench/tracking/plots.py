"""Result plots from the store: a metric per round (the mean over seeds and its 95% interval), a configuration ×
group heatmap and, where runs kept per-client results, how accuracy spreads over clients
(`fedbench.tracking.client_plots`).

Runs are read back as the leaderboard reads them (`fedbench_runs`, through the store interface), and a
configuration and a group mean the same thing here as there (`group_and_configuration`). Per-round values are each
metric's history in the store (runs log them with step = round); the heatmap shows `final.<metric>`.
Only FINISHED runs are drawn; the others are returned apart so the caller can say how many were left out.
The PNGs are also logged as artifacts (folder `plots`) of the experiment's most recent sweep parent run,
when it has one.

matplotlib is imported inside the drawing functions and draws on an Agg canvas without pyplot (as
`fedbench.scenarios.plot` does), so no global backend is switched and no window ever opens.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from rich.markup import escape
from rich.table import Table

from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.tracking.intervals import mean_interval, natural_bounds
from fedbench.tracking.leaderboard import (
    TIE_ALPHA,
    failed_runs,
    fedbench_runs,
    group_and_configuration,
    latest_finished,
    readable,
    seed_stats,
    varying_params,
    versus_best,
)
from fedbench.tracking.store import RUN_ID, RunStore, is_metric, metric_columns

DEFAULT_METRIC = M.ACC_LOCAL_MEAN
ARTIFACT_FOLDER = "plots"


@dataclass
class Plots:
    """What `plot_experiment` drew and where it went.

    Attributes:
        curves: one row per (group, configuration, round): mean, std (ddof 1, 0 for one seed) and n over seeds.
        heatmap: configurations (rows) × groups (columns), the mean over seeds of `heatmap_metric`.
        heatmap_metric: `final.<metric>`, or the bare metric's last logged value when no run reports a final one.
        failed: the runs left out (not FINISHED): run name, status and reason.
        files: the PNGs written.
        parent_run_id: the sweep parent run the PNGs were logged under, None when there is none.
    """

    curves: pd.DataFrame
    heatmap: pd.DataFrame
    heatmap_metric: str
    failed: pd.DataFrame
    files: list[Path] = field(default_factory=list)
    parent_run_id: str | None = None


FORMATS = ("png", "pdf", "svg")
"""Figure formats: PNG to look at, PDF and SVG for papers."""


def plot_experiment(
    experiment: str,
    uri: str,
    out: Path,
    metric: str = DEFAULT_METRIC,
    group_by: Sequence[str] = ("scenario",),
    log_artifacts: bool = True,
    formats: Sequence[str] = ("png",),
    dpi: int = 110,
) -> Plots:
    """Draw the curves and the heatmap of `experiment` into folder `out`, and log them under its latest sweep run.

    Args:
        formats: file formats to write each figure in (of FORMATS).
        dpi: resolution of raster formats.

    Raises:
        ConfigError: unknown experiment, no finished run, a metric no finished run reports per round, or a
            group-by name that is no RunSpec field.
    """
    from fedbench.tracking.drift_plots import MIN_DRIFTS, aligned_on_drifts, draw_aligned, drift_rounds, mark_drifts
    from fedbench.tracking.mlflow_store import MlflowStore

    store = MlflowStore(uri)
    runs = fedbench_runs(store, experiment)
    finished = latest_finished(runs) if len(runs) else runs
    if finished.empty:
        raise ConfigError(
            "--experiment",
            experiment,
            f"an experiment with finished fedbench runs (it has {len(runs)} fedbench runs, none FINISHED)",
        )
    metric = M.canonical(metric).removeprefix(M.FINAL_PREFIX)
    check_metric(finished, metric)
    group, configuration = group_and_configuration(finished, group_by)
    fields = varying_params(finished)
    labels = pd.DataFrame(
        {
            "run_id": finished[RUN_ID],
            "group": for_figures(group, fields),
            "configuration": for_figures(configuration, fields),
        }
    )
    histories = {run_id: metric_history(store, run_id, metric) for run_id in labels["run_id"]}
    curves = curve_table(labels, histories, metric)
    heatmap_metric = M.FINAL_PREFIX + metric
    if heatmap_metric not in finished or finished[heatmap_metric].isna().all():
        heatmap_metric = metric
    values = finished[heatmap_metric].astype(float)
    heatmap = heatmap_table(labels, values)
    low, high = (heatmap_table(labels, values, bound) for bound in interval_bounds(heatmap_metric))
    plots = Plots(curves, heatmap, heatmap_metric, failed_runs(runs))
    out.mkdir(parents=True, exist_ok=True)
    clients = per_client_table(store, experiment, group_by)
    drifted = drift_rounds(clients)
    curves_figure = draw_curves(
        curves,
        f"{M.display_name(metric)} per round, mean over seeds (band: its 95% interval)"
        + ("; dotted: rounds where clients drifted" if drifted else ""),
        M.display_name(metric),
        M.value_range(metric),
    )
    mark_drifts(curves_figure, list(dict.fromkeys(curves["group"])), drifted)
    plots.files = save(curves_figure, out / f"curves_{metric}", formats, dpi)
    if len(heatmap.columns) > 1:  # one group is one column: the leaderboard says it better than a strip of colour
        versus = versus_best(labels.assign(value=values.to_numpy()), M.better(heatmap_metric))
        marks = {key: v.mark for key, v in versus.items()}
        heatmap_figure = draw_heatmap(
            heatmap,
            (low, high),
            f"{M.display_name(heatmap_metric)}, mean over seeds [its 95% interval]",
            xlabel=", ".join(dict.fromkeys(g.split("=")[0] for g in heatmap.columns)),
            marks=marks,
        )
        plots.files += save(heatmap_figure, out / f"heatmap_{heatmap_metric.replace('.', '_')}", formats, dpi)
    plots.files += client_figures(clients, out, formats, dpi)
    aligned = aligned_on_drifts(clients)
    if not aligned.empty:
        figure = draw_aligned(
            aligned,
            "local test accuracy of the clients that drifted, by rounds since their drift: mean over drifts (every "
            f"client and seed), band: its 95% interval; a point where {MIN_DRIFTS}+ drifts reach it (all, if fewer)",
        )
        plots.files += save(figure, out / "drift_aligned_acc_local", formats, dpi)
    parent = store.sweep_parent(experiment)
    plots.parent_run_id = parent.run_id if parent is not None else None
    if log_artifacts and plots.parent_run_id is not None:
        store.attach(plots.parent_run_id, plots.files, ARTIFACT_FOLDER)
    return plots


def per_client_table(store: RunStore, experiment: str, group_by: Sequence[str]) -> pd.DataFrame:
    """The runs' per-client rows, their groups and configurations named as the figures name them (empty where the
    runs kept none)."""
    from fedbench.tracking.per_client import store_per_client

    runs = store_per_client(store, experiment, group_by)
    table = runs.table
    if table.empty:
        return table
    return table.assign(
        group=for_figures(table["group"], runs.fields), configuration=for_figures(table["configuration"], runs.fields)
    )


def client_figures(table: pd.DataFrame, out: Path, formats: Sequence[str], dpi: int) -> list[Path]:
    """The per-client figures (`fedbench.tracking.client_plots`), where the runs kept per-client results."""
    from fedbench.tracking.client_plots import draw_client_distribution, draw_client_map

    if table.empty:
        return []
    seeds = table.groupby(["group", "configuration"])["run_hash"].nunique().max()
    over = f"{seeds} seeds pooled" if seeds > 1 else "one seed"
    distribution = draw_client_distribution(
        table, f"each client's local test accuracy at the final round ({over}; a dot per client)"
    )
    clients_map = draw_client_map(
        table, "each client's local test accuracy per round" + (", mean over seeds" if seeds > 1 else "")
    )
    return [
        *save(distribution, out / "clients_final_acc_local", formats, dpi),
        *save(clients_map, out / "clients_by_round_acc_local", formats, dpi),
    ]


def heatmap_console_table(plots: Plots, title: str) -> Table:
    """The heatmap's numbers for the console: configurations (rows) × groups, "-" where one did not run."""
    table = Table(title=title)
    table.add_column("configuration")
    for group in plots.heatmap.columns:
        table.add_column(escape(str(group)), justify="right")
    names = readable([str(c) for c in plots.heatmap.index])  # a sampled tau=0.11236203565420874 reads 0.112
    for name, (_, row) in zip(names, plots.heatmap.iterrows(), strict=True):
        table.add_row(escape(name), *("-" if math.isnan(value) else f"{value:.4f}" for value in row))
    return table


SECTIONED = re.compile(r"\b(?:scenario|dataset|model|optimizer)\.([A-Za-z0-9_]+)=")
"""A field named with its section in a label (`scenario.alpha=`); algorithm parameters are already bare."""


def for_figures(labels: pd.Series, fields: Sequence[str]) -> pd.Series:
    """`labels` as a figure names them: each field without its section (`scenario.alpha=0.1` -> `alpha=0.1`), unless
    another varying field has the same bare name (APFL's `alpha` beside `scenario.alpha`), which keeps both whole.
    Tables and exports keep the full names, which say where a field lives in a task file."""
    bare = [f.rsplit(".", 1)[-1] for f in fields]
    clashing = {name for name in bare if bare.count(name) > 1}
    return labels.map(
        lambda text: SECTIONED.sub(lambda m: m.group(0) if m.group(1) in clashing else f"{m.group(1)}=", str(text))
    )


def check_metric(finished: pd.DataFrame, metric: str) -> None:
    """`metric` must be logged per round by some finished run; the error lists those that are."""
    if not is_metric(metric) or metric not in finished or finished[metric].isna().all():
        known = sorted(c for c in metric_columns(finished) if not M.is_summary(c) and finished[c].notna().any())
        raise ConfigError("--metric", metric, "a per-round metric the finished runs report: " + ", ".join(known))


def metric_history(store: RunStore, run_id: str, metric: str) -> pd.Series:
    """The run's values of `metric` indexed by step (= round); a step logged twice keeps its latest value."""
    history = sorted(store.metric_history(run_id, metric), key=lambda m: (m.step, m.timestamp))
    return pd.Series({m.step: m.value for m in history}, dtype=float)


def curve_table(labels: pd.DataFrame, histories: dict[str, pd.Series], metric: str) -> pd.DataFrame:
    """Mean, std, n and the mean's interval over a configuration's seeds, per group and round, of `metric`."""
    rows = [
        {"group": r.group, "configuration": r.configuration, "round": int(step), "value": value}
        for r in labels.itertuples(index=False)
        for step, value in histories[r.run_id].items()
    ]
    frame = pd.DataFrame(rows, columns=["group", "configuration", "round", "value"])
    return seed_stats(frame.groupby(["group", "configuration", "round"], sort=True), metric)


def heatmap_table(labels: pd.DataFrame, values: pd.Series, statistic="mean") -> pd.DataFrame:
    """Configurations × groups, the mean over seeds of `values` (or another `statistic`: a pandas aggregation's
    name or a function of a cell's values), NaN where one did not run."""
    frame = labels.assign(value=values.to_numpy())
    return frame.pivot_table(
        index="configuration", columns="group", values="value", aggfunc=statistic, sort=True, dropna=False
    )


def save(figure, stem: Path, formats: Sequence[str], dpi: int) -> list[Path]:
    """Write `figure` as `stem.<format>` for every format; returns the paths."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_name(f"{stem.name}.{fmt}") for fmt in formats]
    for path in paths:
        figure.savefig(path, dpi=dpi)
    return paths


def draw_curves(curves: pd.DataFrame, title: str, ylabel: str, bounds: tuple[float, float] = (-np.inf, np.inf)):
    """One panel per group, one line per configuration (same colour in every panel), shaded over the mean's 95%
    interval (`fedbench.tracking.intervals`; none for one seed) clipped to the metric's `bounds` (with two seeds
    the interval of an accuracy near 0 reaches far below it)."""
    from matplotlib.ticker import MaxNLocator

    groups = list(dict.fromkeys(curves["group"]))
    configurations = list(dict.fromkeys(sorted(curves["configuration"])))
    shown = dict(zip(configurations, readable(configurations), strict=True))
    palette = colours(len(configurations))
    fig, axes, cols = panel_grid(len(groups), len(configurations))
    for ax, group in zip(axes, groups, strict=False):
        panel = curves[curves["group"] == group]
        for i, configuration in enumerate(configurations):
            line = panel[panel["configuration"] == configuration].sort_values("round")
            if line.empty:
                continue
            x, mean = line["round"].to_numpy(), line["mean"].to_numpy()
            low, high = line["ci_low"].to_numpy(dtype=float), line["ci_high"].to_numpy(dtype=float)
            ax.plot(
                x, mean, color=palette[i], marker="o" if len(x) < 15 else None, markersize=3, label=shown[configuration]
            )
            ax.fill_between(x, np.clip(low, *bounds), np.clip(high, *bounds), color=palette[i], alpha=0.2, linewidth=0)
        ax.set_title(group, fontsize=9)
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    for ax in axes[len(groups) :]:
        ax.set_visible(False)
    for ax in axes[::cols]:
        ax.set_ylabel(ylabel)
    handles, names = [], []
    for ax in axes[: len(groups)]:
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
            if name not in names:
                handles.append(handle)
                names.append(name)
    fig.legend(
        handles, names, loc="outside lower center", fontsize=8, ncols=1 if len(names) > 6 else min(2, len(names))
    )
    fig.suptitle(fitted(title, fig), fontsize=10)
    return fig


def panel_grid(panels: int, lines: int):
    """A figure of `panels` panels sharing their axes, three to a row, with room below for a legend of `lines`
    entries: (figure, the axes in reading order, columns)."""
    from matplotlib.figure import Figure

    cols = min(3, panels)
    rows = math.ceil(panels / cols)
    fig = Figure(figsize=(5.0 * cols, 3.6 * rows + 0.4 + 0.25 * lines), layout="constrained")
    return fig, np.atleast_1d(fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)).ravel(), cols


def draw_heatmap(
    heatmap: pd.DataFrame,
    interval: tuple[pd.DataFrame, pd.DataFrame],
    title: str,
    xlabel: str,
    marks: dict[tuple[str, str], str] | None = None,
):
    """Configurations (rows) × groups (columns), each cell annotated with its mean over seeds, the mean's 95% interval
    (`interval`: its lower and upper bounds, laid out as `heatmap`) and, from `marks`
    (the leaderboard's `versus_best`), ★ on each column's best and ≈ on those its seeds cannot tell from it."""
    from matplotlib.figure import Figure

    values = heatmap.to_numpy(dtype=float)
    n_rows, n_cols = values.shape
    rows = readable([str(r) for r in heatmap.index])
    fig = Figure(figsize=(2.4 + 1.9 * n_cols + 0.06 * max(map(len, rows)), 1.8 + 0.45 * n_rows), layout="constrained")
    ax = fig.subplots()
    finite = values[np.isfinite(values)]
    low, high = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
    image = ax.imshow(
        np.ma.masked_invalid(values), cmap="viridis", aspect="auto", vmin=low, vmax=high if high > low else low + 1e-9
    )
    slanted = n_cols > 3
    ax.set_xticks(
        range(n_cols),
        [str(c) for c in heatmap.columns],
        rotation=20 if slanted else 0,
        ha="right" if slanted else "center",
        fontsize=8,
    )
    ax.set_yticks(range(n_rows), rows, fontsize=8)
    middle = (low + high) / 2
    for i in range(n_rows):
        for j in range(n_cols):
            value = values[i, j]
            low_bound, high_bound = (bound.to_numpy(dtype=float)[i, j] for bound in interval)
            text = "-" if not np.isfinite(value) else short(value)
            if np.isfinite(value) and np.isfinite(low_bound):
                text += f"\n[{short(low_bound)}, {short(high_bound)}]"
            text += cell_mark((marks or {}).get((heatmap.columns[j], heatmap.index[i]), ""))
            ax.text(
                j,
                i,
                text,
                ha="center",
                va="center",
                fontsize=8,
                color="white" if np.isfinite(value) and value <= middle else "black",
            )
    fig.colorbar(image, ax=ax, shrink=0.8)
    if marks:
        xlabel += "\n" + fitted(
            f"★ best of its column; ≈ not distinguishable from it (Welch's t-test over seeds, Holm-corrected "
            f"p >= {TIE_ALPHA}); ? fewer than 2 seeds",
            fig,
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel("configuration")
    ax.set_title(fitted(title, fig), fontsize=10)
    return fig


def short(value: float) -> str:
    """A heatmap cell's number: 3 places, or 3 significant digits from 1000 up."""
    return f"{value:.3f}" if abs(value) < 1000 else f"{value:.3g}"


def interval_bounds(metric: str):
    """The functions of a cell's seed values giving its mean's 95% interval's lower and upper bounds, within
    `metric`'s natural bounds."""
    bounds = natural_bounds(metric)
    return (lambda v: mean_interval(list(v), bounds=bounds).low), (lambda v: mean_interval(list(v), bounds=bounds).high)


def cell_mark(mark: str) -> str:
    """A heatmap cell's suffix for its `versus_best` mark: ` ★` best, ` ≈` a tie with the best, ` ?` untested."""
    return {"best": " ★", "≈": " ≈", "?": " ?"}.get(mark.split(" ")[0], "")


def fitted(title: str, fig) -> str:
    """`title` broken into lines that fit the figure's width (a one-panel figure is narrower than its title)."""
    return textwrap.fill(title, width=max(30, int(fig.get_figwidth() * 11)))


def colours(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]
