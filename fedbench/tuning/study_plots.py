"""Optuna's own views of a search: optimisation history, parameter importances, parallel coordinates and slices.

They are drawn from the study the search keeps (`study_journal`), so they show what TPE saw: every sample and its
score, failed samples left out. A finished search logs them on its parent run (`plots/optuna/`), and `fedbench
plot` draws the latest search of an experiment beside the other figures. A view that would say nothing (importances
from fewer than two scores) is skipped with a warning naming why, never an error.

Optuna draws through pyplot, and restyles matplotlib globally as it does: every view is drawn inside
`rc_context` (the style is undone) and closed once saved, on Agg unless this process already chose a backend.
"""

from __future__ import annotations

import glob
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from fedbench.tracking.paths import results_path
from fedbench.tracking.sweep_runs import SweepRuns

if TYPE_CHECKING:
    import optuna
    from matplotlib.figure import Figure

VIEWS = {
    "optimization_history": "optimisation history",
    "param_importances": "parameter importances",
    "parallel_coordinate": "parallel coordinates",
    "slice": "slices",
}
"""Optuna's views by name (drawn by `optuna.visualization.matplotlib.plot_<name>`, written as `<name>.<format>`),
with their titles."""
ARTIFACT_FOLDER = "plots/optuna"


def study_journal(sweep: str) -> Path:
    """Where search `sweep` keeps its Optuna study (a JournalStorage file; the study has the sweep's name), so that
    a resumed search goes on with what TPE learnt and the views can be drawn after it."""
    return results_path("optuna", f"{sweep}.log")


@dataclass
class StudyPlots:
    """The views of study `study` written (`files`), and those skipped with why (`skipped`: view -> reason)."""

    study: str
    files: list[Path] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def plot_study(
    sweep: str, out: Path, metric: str | None = None, formats: Sequence[str] = ("png",), dpi: int = 110
) -> StudyPlots:
    """Draw the views of search `sweep`'s study into folder `out`; `metric` (what the search optimised) is recorded
    in the study, so that a later `fedbench plot` names the axis the same way."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    from optuna.trial import TrialState

    study = optuna.load_study(study_name=sweep, storage=JournalStorage(JournalFileBackend(str(study_journal(sweep)))))
    if metric is not None and study.metric_names != [metric]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([metric])
    target = study.metric_names[0] if study.metric_names else "objective"
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    scores = [t.value for t in complete if t.value is not None]  # a complete trial has its value
    plots = StudyPlots(sweep)
    for view, title in VIEWS.items():
        why = _skip(view, scores)
        if why is not None:
            plots.skipped[view] = why
            for fmt in formats:  # an earlier search's figure left in `out` would pass for this one's
                (out / f"{view}.{fmt}").unlink(missing_ok=True)
            warnings.warn(f"Optuna's {title} of {sweep} not drawn: {why}", stacklevel=2)
        else:
            plots.files += _draw(study, view, target, f"{sweep}: {title} of {target}", out / view, formats, dpi)
    return plots


def report_study(uri: str, experiment: str, parent_run_id: str, sweep: str, out: Path, metric: str) -> list[str]:
    """After search `sweep` of `metric`: its views drawn into `out` and logged on its parent run; their artifact
    paths (what the sweep reports)."""
    plots = plot_study(sweep, out, metric)
    return SweepRuns(uri, experiment).log_files(parent_run_id, plots.files, ARTIFACT_FOLDER)


def plot_latest_search(
    uri: str, experiment: str, out: Path, formats: Sequence[str] = ("png",), dpi: int = 110
) -> StudyPlots | None:
    """For `fedbench plot`: the views of `experiment`'s latest search whose study is here, drawn into `out` and
    logged on that search's parent run (which need not be the latest sweep: a grid may have followed it); None
    when the experiment has no such search."""
    latest = latest_search(uri, experiment)
    if latest is None:
        return None
    runs, parent, sweep = latest
    plots = plot_study(sweep, out, formats=formats, dpi=dpi)
    runs.log_files(parent.run_id, plots.files, ARTIFACT_FOLDER)
    return plots


def latest_search(uri: str, experiment: str) -> tuple[SweepRuns, Any, str] | None:
    """The sweeps of `experiment`, and the parent run and name of its latest search whose study is here; None when
    it has none (the store is not read, nor the experiment made, where no study of it is here)."""
    pattern = f"{glob.escape(experiment)}-*.log"  # a sweep is named <task>-<digest>
    journals = list(results_path("optuna").glob(pattern))
    if not journals:
        return None
    runs = SweepRuns(uri, experiment)
    searches = [(parent, j.stem) for j in journals if (parent := runs.latest_parent(j.stem)) is not None]
    if not searches:
        return None
    parent, sweep = max(searches, key=lambda search: search[0].start_time)
    return runs, parent, sweep


def searched_metric(uri: str, experiment: str) -> str | None:
    """The metric `experiment`'s latest search optimised (as its study records it); None without a search."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    latest = latest_search(uri, experiment)
    if latest is None:
        return None
    storage = JournalStorage(JournalFileBackend(str(study_journal(latest[2]))))
    names = optuna.load_study(study_name=latest[2], storage=storage).metric_names
    return names[0] if names else None


def _skip(view: str, scores: list[float]) -> str | None:
    """Why `view` would say nothing about these scores (of the complete trials); None when it is worth drawing."""
    if not scores:
        return "the study has no complete trial"
    if view == "param_importances" and len(scores) < 2:
        return f"importances need at least 2 complete trials, the study has {len(scores)}"
    if view == "param_importances" and len(set(scores)) == 1:
        return f"every complete trial scored {scores[0]}: no parameter made a difference"
    return None


def _pyplot() -> ModuleType:
    """pyplot, on Agg unless this process chose a backend before (switching would close a notebook's figures)."""
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def _draw(
    study: optuna.Study, view: str, target: str, title: str, stem: Path, formats: Sequence[str], dpi: int
) -> list[Path]:
    """Optuna's `view` of `study`, titled and saved as `stem.<format>`. What Optuna and matplotlib warn of while
    drawing (experimental API, a single value's axis widened) is theirs to fix, not the user's: silenced."""
    import optuna
    from matplotlib import rc_context

    plt = _pyplot()
    with rc_context(), plt.ioff(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        drawn = getattr(optuna.visualization.matplotlib, f"plot_{view}")(study, target_name=target)
        if view in SCORE_AXIS_VIEWS:
            _reference_lines(drawn, study, view)
        if view == "parallel_coordinate":
            _legible_lines(drawn)
        if view == "optimization_history":  # trials are counted: no half-trial ticks with a few of them
            from matplotlib.ticker import MaxNLocator

            drawn.xaxis.set_major_locator(MaxNLocator(integer=True))
        figure = _tidied(drawn, title)
        paths = _save(figure, stem, formats, dpi)
    plt.close(figure)
    return paths


REFERENCE_ATTR = "reference:"
"""A study's user attribute `reference:<algorithm>`: that reference's mean score over the seeds (set by the search)."""

SCORE_AXIS_VIEWS = ("optimization_history", "slice")
"""The views whose y axis is the score: a reference's score is a line across them."""


def _reference_lines(drawn: Any, study: optuna.Study, view: str) -> None:
    """A dashed line at each reference's mean score (`reference:<algorithm>` in the study, written by the search),
    so a sample is read against what the untuned method gets on the same seeds."""
    import numpy as np

    references = {
        k.removeprefix(REFERENCE_ATTR): v for k, v in study.user_attrs.items() if k.startswith(REFERENCE_ATTR)
    }
    for ax in np.atleast_1d(drawn).ravel():
        lines = [
            ax.axhline(score, linestyle="--", linewidth=1, color=f"C{3 + i}", label=f"{name} (reference)")
            for i, (name, score) in enumerate(sorted(references.items()))
        ]
        if lines:  # a slice panel's legend would list Optuna's empty "Infeasible Trial" too
            ax.legend(handles=lines if view == "slice" else None, loc="best", fontsize="small")


def _legible_lines(ax: Any) -> None:
    """Optuna colours the parallel coordinates' lines on Blues from white, so the lowest-scoring trials were all but
    invisible, and its colour bar sat on the last axis's labels: the lines start at a visible blue, the bar moves
    right of the labels."""
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.collections import LineCollection
    from matplotlib.colors import ListedColormap

    visible = ListedColormap(colormaps["Blues"](np.linspace(0.4, 1.0, 256)))
    for lines in ax.collections:
        if isinstance(lines, LineCollection) and lines.get_array() is not None:
            lines.set_cmap(visible)
            if lines.colorbar is not None:
                lines.colorbar.update_normal(lines)
                box = lines.colorbar.ax.get_position()
                lines.colorbar.ax.set_position((box.x0 + 0.12, box.y0, box.width, box.height))


def _tidied(drawn: Any, title: str) -> Figure:
    """The figure of what an Optuna view returned (one Axes, or an array of them for several slices), with `title`
    in place of Optuna's generic one ("Slice Plot"), and log axes labelled sparsely (matplotlib labels every minor
    tick of a log axis spanning a decade or so, and they overlap in a narrow slice panel)."""
    import numpy as np
    from matplotlib.ticker import LogLocator, NullFormatter, StrMethodFormatter

    axes = np.atleast_1d(drawn).ravel()
    figure = axes[0].figure
    for ax in axes:
        for loc in ("left", "center", "right"):
            ax.set_title("", loc=loc)
        low, high = ax.get_xlim()
        if ax.get_xscale() == "log" and high / low < 100:  # under two decades: label 1 and 3 times each
            ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 3.0)))
            ax.xaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
    if len(axes) == 1:
        axes[0].set_title(title)
    else:
        figure.suptitle(title)
    return figure


def _save(figure: Figure, stem: Path, formats: Sequence[str], dpi: int) -> list[Path]:
    """`figure` as `stem.<format>` for every format, cropped to what it draws (Optuna puts legends outside)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_name(f"{stem.name}.{fmt}") for fmt in formats]
    for path in paths:
        figure.savefig(path, dpi=dpi, bbox_inches="tight")
    return paths
