"""`fedbench report TASK.yaml`: the task's runs beside the published numbers of its `reference:` block, as
report.md plus PNGs, logged under the experiment's latest sweep parent run when it has one."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from fedbench.config.task import PAPER_PROFILE, TaskSpec
from fedbench.core import metrics as M
from fedbench.core.callbacks import NUMERICS_TAG
from fedbench.core.errors import ConfigError
from fedbench.core.runspec import RunSpec
from fedbench.tracking.leaderboard import DEFAULT_METRIC, fedbench_runs
from fedbench.tracking.paths import shown_uri
from fedbench.tracking.rank_report import CD_DIAGRAM, MARKDOWN, bounds, friedman_text, write_ranking
from fedbench.tracking.ranking import rank_runs
from fedbench.tracking.reproduction.cells import TableResult, run_states, same
from fedbench.tracking.reproduction.figures import draw_table
from fedbench.tracking.reproduction.markdown import how_to_read, render_table
from fedbench.tracking.reproduction.tables import covered_hashes, ours_only_table, reference_table
from fedbench.tracking.reproduction.verdict import BEYOND, NOT_TESTABLE, WITHIN
from fedbench.tracking.store import FIXED, RUN_HASH, RunStore, tag

DEFAULT_TOLERANCE = 0.02
"""On the metric's own scale (two points of accuracy), times each table's scale."""
DEFAULT_RESOLUTION = 0.10
"""On the metric's own scale (ten points of accuracy): a cell whose 95% interval is wider than this is not testable."""
ARTIFACT_FOLDER = "report"


@dataclass
class Report:
    """What `write_report` made: the tables, the files written and the sweep parent run they were logged on."""

    tables: list[TableResult]
    tolerance: float
    resolution: float
    not_run: list[str] = field(default_factory=list)
    """Titles of the reference tables the task's profile runs no cell of (left out of the report)."""
    unreachable: list[str] = field(default_factory=list)
    """Why no run of the task can be a published cell (`unreachable_fields`); empty where some can."""
    numerics: dict[str, int] = field(default_factory=dict)
    """The runs' `clients.numerics` tags (threads, device, dtype) -> how many runs had each: one number per RunSpec
    needs one, and a report must say which it was."""
    profile: str = PAPER_PROFILE
    outside_profile: int = 0
    """The paper's cells a smaller profile does not run (left out of its tables, counted in the summary)."""
    path: Path | None = None
    files: list[Path] = field(default_factory=list)
    parent_run_id: str | None = None

    def summary(self) -> dict[str, int]:
        """The paper's cells: compared with their published number (within, beyond or not testable), without runs,
        failed, and not in this task, or outside a smaller profile (so a profile's report never makes the paper's
        cells vanish); then the task's runs no cell covers ("ours only")."""
        outside = "not in this task" if self.profile == PAPER_PROFILE else f"not in profile {self.profile}"
        counts = dict.fromkeys(
            ["compared", WITHIN, BEYOND, NOT_TESTABLE, "no run yet", "failed", outside, "ours only"], 0
        )
        counts[outside] = self.outside_profile
        for table in self.tables:
            scale = table.reference.scale
            for cell in table.cells.values():
                if table.ours_only:
                    counts["ours only"] += 1
                    continue
                verdict = cell.verdict(self.tolerance * scale, self.resolution * scale)
                counts["compared"] += verdict is not None
                if verdict is not None:
                    counts[verdict.kind] += 1
                counts["no run yet"] += cell.state == "no run yet"
                counts[outside] += cell.state == "not in this task"
                counts["failed"] += bool(cell.failed)
        return counts


def build_tables(task: TaskSpec, specs: list[RunSpec], runs: pd.DataFrame) -> list[TableResult]:
    """One table per reference table, then ours-only tables (one per metric compared) for uncovered runs."""
    flats = {s.run_hash: s.flat() for s in specs}
    tables = [
        reference_table(ref, specs, flats, run_states(specs, runs, ref.metric, ref.scale)) for ref in task.reference
    ]
    covered = covered_hashes(task.reference, flats)
    metrics = dict.fromkeys((ref.metric, ref.scale) for ref in task.reference) or {(DEFAULT_METRIC, 1.0): None}
    for metric, scale in metrics:
        states = run_states(specs, runs, metric, scale)
        rest = ours_only_table(
            specs,
            flats,
            list(dict.fromkeys(axis for block in task.grid for axis, _ in block)),
            covered,
            states,
            metric,
            scale,
        )
        if rest is not None:
            tables.append(rest)
    return tables


def write_report(
    task: TaskSpec,
    uri: str,
    out: Path,
    tolerance: float = DEFAULT_TOLERANCE,
    log_artifacts: bool = True,
    resolution: float = DEFAULT_RESOLUTION,
) -> Report:
    """Write `out/report.md` and its PNGs, and log them under the latest sweep parent run of the task's
    experiment (folder `report/`) when there is one.

    Raises:
        ConfigError: a tolerance below 0, or a resolution not above it.
    """
    if tolerance < 0:
        raise ConfigError("--tolerance", tolerance, "a number >= 0 (on the metric's own scale, e.g. 0.02)")
    if resolution <= tolerance:
        raise ConfigError(
            "--resolution", resolution, f"a number above the tolerance {tolerance:g} (on the metric's scale, e.g. 0.1)"
        )
    from fedbench.tracking.mlflow_store import MlflowStore

    store = MlflowStore(uri)
    runs, specs = stored_runs(store, task.name), task.expand()
    tables, not_run, outside = build_tables(task, specs, runs), [], 0
    if task.profile != PAPER_PROFILE:  # a smaller profile's report shows what it runs, not the paper's whole grid
        not_run = [t.reference.title for t in tables if t.in_task() is None]
        outside = sum(cell.state == "not in this task" for t in tables if not t.ours_only for cell in t.cells.values())
        tables = [trimmed for t in tables if (trimmed := t.in_task()) is not None]
        outside -= sum(cell.state == "not in this task" for t in tables if not t.ours_only for cell in t.cells.values())
    report = Report(tables, tolerance, resolution, not_run, profile=task.profile, outside_profile=outside)
    report.unreachable = unreachable_fields(task, specs)
    numerics_column = tag(NUMERICS_TAG)
    if numerics_column in runs:
        report.numerics = {str(k): int(n) for k, n in runs[numerics_column].dropna().value_counts().items()}
    parent = sweep_parent(store, task.name)
    out.mkdir(parents=True, exist_ok=True)
    parts = []
    for i, table in enumerate(report.tables, 1):
        files = draw_table(table, out / f"table{i}_{slug(table.reference.title)}")
        report.files += files
        scale = table.reference.scale
        parts += render_table(table, tolerance * scale, resolution * scale, [f.name for f in files])
    metric = report.tables[0].reference.metric if report.tables else DEFAULT_METRIC
    lines, files = ranking_section(runs, metric, out / RANKING_FOLDER, task.name)
    report.files += files
    report.path = out / "report.md"
    report.path.write_text("\n".join(header(task, uri, report, len(runs), len(specs), parent) + parts + lines))
    if log_artifacts and parent is not None:
        store.attach(parent, [report.path, *report.files], ARTIFACT_FOLDER)
        report.parent_run_id = parent
    return report


RANKING_FOLDER = "ranking"


def ranking_section(runs: pd.DataFrame, metric: str, out: Path, title: str) -> tuple[list[str], list[Path]]:
    """The suite's methods ranked across its scenarios (`fedbench rank`'s files, written into `out`) as the report's
    last section, or a line saying why they cannot be."""
    lines = ["", "## Methods ranked across scenarios", ""]
    try:
        ranking = rank_runs(runs, metric, M.better(metric))
    except ConfigError as exc:
        return [*lines, f"Not ranked: {exc.allowed} ({exc.value})."], []
    files = write_ranking(ranking, out, title)
    aggregate = ranking.aggregate.itertuples(index=False)
    lines += [
        f"By `{metric}`; the tests, every pair and the scenario means: [{RANKING_FOLDER}/{MARKDOWN}]"
        f"({RANKING_FOLDER}/{MARKDOWN}). {friedman_text(ranking)}",
        "",
        f"![critical-difference diagram]({RANKING_FOLDER}/{CD_DIAGRAM})",
        "",
        "| method | average rank | IQM (normalised) [95% interval] |",
        "|---|---|---|",
        *(f"| {r.method} | {r.average_rank:.2f} | {r.iqm:.3f} {bounds(r.low, r.high, 3)} |" for r in aggregate),
    ]
    if ranking.left_out:
        lines += ["", "Not ranked: " + "; ".join(ranking.left_out) + "."]
    return lines, files


def header(task: TaskSpec, uri: str, report: Report, stored: int, planned: int, parent: str | None) -> list[str]:
    counts = report.summary()
    where = (
        f"attached to sweep parent run `{parent}` (artifacts under `{ARTIFACT_FOLDER}/`)"
        if parent
        else "not attached to any run: the experiment has no sweep parent run (plain `fedbench run` runs)"
    )
    return [
        f"# Reproduction report: {task.name}",
        "",
        *([task.description, ""] if task.description else []),
        f"Profile `{task.profile}`; experiment `{task.name}` in `{shown_uri(uri)}` ({stored} runs stored); "
        f"{planned} runs in the task; written {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {where}.",
        "",
        "Summary: " + ", ".join(f"{n} {what}" for what, n in counts.items()) + ".",
        "",
        *not_run_text(task, report),
        *([f"Nothing here can be compared: {'; '.join(report.unreachable)}.", ""] if report.unreachable else []),
        *([f"Clients computed with: {numerics_text(report.numerics)}.", ""] if report.numerics else []),
        how_to_read(report.tolerance, report.resolution),
        "",
    ]


def not_run_text(task: TaskSpec, report: Report) -> list[str]:
    """What a smaller profile leaves out of the paper's tables, so that no one reads the report as the whole paper."""
    if task.profile == PAPER_PROFILE:
        return []
    text = (
        f"Profile `{task.profile}` runs part of the paper's grid: each table below keeps the rows and columns it "
        "runs (the paper profile has the rest)."
    )
    if report.not_run:
        text += " Tables it runs no cell of, left out: " + "; ".join(report.not_run) + "."
    return [text, ""]


def unreachable_fields(task: TaskSpec, specs: list[RunSpec]) -> list[str]:
    """Each field whose every published value no run of `specs` has (`dataset.name is mnist in the paper's cells,
    synthetic_images in these runs`): why a profile's report compares nothing, said instead of a bare 0."""
    flats = [s.flat() for s in specs]
    needed: dict[str, set[str]] = {}
    for reference in task.reference:
        for cell in reference.cells:
            for name, value in cell.where:
                needed.setdefault(name, set()).add(str(value))
    said = []
    for name, values in needed.items():
        have = {str(f.get(name)) for f in flats}
        if not any(same(ours, theirs) for ours in have for theirs in values):
            said.append(
                f"{name} is {', '.join(sorted(values)[:4])}{' ...' if len(values) > 4 else ''} in the paper's cells, "
                f"{', '.join(sorted(have))} in these runs"
            )
    return said


def numerics_text(numerics: dict[str, int]) -> str:
    """`1 thread cpu float32 (135 runs)`, or each kind with its count where runs differ."""
    return "; ".join(f"{kind} ({n} runs)" for kind, n in numerics.items())


def stored_runs(store: RunStore, experiment: str) -> pd.DataFrame:
    """The experiment's fedbench runs, or none when the store or the experiment does not exist yet."""
    try:
        return fedbench_runs(store, experiment)
    except ConfigError:
        return pd.DataFrame(columns=[*FIXED, RUN_HASH])


def sweep_parent(store: RunStore, experiment: str) -> str | None:
    """The id of the experiment's latest sweep parent run; None when it has none (or there is no such store)."""
    run = store.sweep_parent(experiment)
    return run.run_id if run is not None else None


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", title.lower())[:40].strip("_")
