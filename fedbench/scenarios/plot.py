"""A scenario as heatmaps: each client's class mix per round, its ground-truth distribution, the test clients.

matplotlib is imported inside `plot_scenario` (importing fedbench stays fast) and drawn on an Agg canvas
without pyplot, so no global backend is switched and no window ever opens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedbench.scenarios.artifact import Scenario
from fedbench.scenarios.report import class_histograms, test_client_histograms

DENSE = 40
"""Beyond this many rows a panel drops its per-row labels (client ids, sizes) but keeps the distribution ids."""


def _shares(counts: np.ndarray) -> np.ndarray:
    totals = counts.sum(axis=1, keepdims=True)
    return np.divide(counts, totals, out=np.zeros(counts.shape, dtype=np.float64), where=totals > 0)


def plot_scenario(
    labels: np.ndarray,
    scenario: Scenario,
    rounds: Sequence[int],
    num_classes: int,
    class_names: Sequence[str] | None,
    path: str | Path,
    title: str = "",
) -> Path:
    """Save a PNG with one heatmap per round in `rounds` (rows: clients, columns: classes, colour: the
    share of the client's training samples in that class, after its label map), each row marked at its
    right end with the client's ground-truth distribution id ('d3') and training-set size, plus a last
    panel for the test-time clients if there are any (unseen distributions marked). Returns the path."""
    from matplotlib.figure import Figure

    panels: list[tuple[str, np.ndarray, list[str], list[str], list[str | None]]] = []
    for r in rounds:
        counts = class_histograms(labels, scenario, r, num_classes)
        stage = f", stage {scenario.stage_of(r)}" if len(scenario.stages) > 1 else ""
        ids = [scenario.view(r, c).distribution_id for c in range(scenario.num_clients)]
        panels.append(
            (
                f"round {r}{stage}",
                counts,
                [f"c{c}" for c in range(scenario.num_clients)],
                [f"d{i}" for i in ids],
                [f"n={n}" for n in counts.sum(axis=1)],
            )
        )
    if scenario.test_clients:
        counts = test_client_histograms(labels, scenario, num_classes)
        unseen = sum(not tc.seen for tc in scenario.test_clients)
        panels.append(
            (
                f"test clients ({unseen} unseen)" if unseen else "test clients",
                counts,
                [f"t{i}" for i in range(len(counts))],
                [f"d{tc.view.distribution_id}" + ("" if tc.seen else " new") for tc in scenario.test_clients],
                [f"n={n}" for n in counts.sum(axis=1)],
            )
        )

    max_rows = max(len(p[1]) for p in panels)
    # Tall panels (many clients) go side by side; wide ones (many classes) two to a row.
    ncols = min(len(panels), 2 if num_classes > 20 else 6 if max_rows > DENSE else 4)
    nrows = math.ceil(len(panels) / ncols)
    panel_w = min(max(0.28 * num_classes + 2.2, 4.0), 11.0)
    panel_h = min(max(0.2 * max_rows + 1.2, 3.2), 18.0)
    shares = [_shares(p[1]) for p in panels]
    # One colour scale for every panel (the shared bar), up to the largest share present: with many classes
    # a fixed 0..1 scale would leave every cell dark.
    vmax = max(0.05, max(float(s.max(initial=0.0)) for s in shares))

    fig = Figure(figsize=(panel_w * ncols + 1.2, panel_h * nrows + (0.6 if title else 0.2)), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    image = None
    for ax, share, (name, counts, row_names, markers, sizes) in zip(axes.ravel(), shares, panels, strict=False):
        image = ax.imshow(share, aspect="auto", cmap="viridis", vmin=0.0, vmax=vmax, interpolation="nearest")
        ax.set_title(name, fontsize=10)
        n = len(counts)
        dense = n > DENSE
        row_pt = (panel_h - 1.0) * 72 / max(n, 1)  # height of one row in points
        font = max(3.5, min(8.0, 0.65 * row_pt))
        if dense:  # a client id every ~10 rows; the distribution ids stay on every row
            step = max(1, round(n / 10))
            ax.set_yticks(range(0, n, step), [row_names[i] for i in range(0, n, step)], fontsize=7)
        else:
            ax.set_yticks(range(n), row_names, fontsize=font)
        _class_ticks(ax, num_classes, class_names)
        for i in range(n):
            text = markers[i] if dense else f"{markers[i]}  {sizes[i]}"
            ax.annotate(
                text,
                xy=(1.01, i),
                xycoords=("axes fraction", "data"),
                ha="left",
                va="center",
                fontsize=font,
                family="monospace",
                annotation_clip=False,
                color="tab:red" if markers[i].endswith("new") else "black",
            )
    for ax in axes.ravel()[len(panels) :]:
        ax.set_axis_off()
    bar = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6, aspect=30)
    bar.set_label("share of the client's samples per class", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=120)
    return path


def _class_ticks(ax, num_classes: int, class_names: Sequence[str] | None) -> None:
    if class_names is not None and num_classes <= 20:
        names = [str(n) for n in class_names]
        long = max((len(n) for n in names), default=0) > 3
        ax.set_xticks(range(num_classes), names, fontsize=7, rotation=90 if long else 0)
    else:
        step = 1 if num_classes <= 20 else 5 if num_classes <= 50 else 10
        ax.set_xticks(range(0, num_classes, step), [str(k) for k in range(0, num_classes, step)], fontsize=7)
    ax.set_xlabel("class", fontsize=8)
