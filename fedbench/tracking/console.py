"""Console output: a per-run progress bar (only on a terminal), a line per finished run, and the tables of
what a task runs and how its runs ended."""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fedbench.core import metrics as M
from fedbench.core.callbacks import RESUMED_TAG, Callback, RoundRecord, RunResult
from fedbench.core.runspec import RunSpec, changed_params

PLAIN_EVERY_S = 10.0
"""Where the output is not a terminal (a log file, CI), a plain line says the round a run is in, at most this often:
a log of hours of runs neither stays silent for minutes nor gets a line per millisecond round."""


class ProgressCallback(Callback):
    """A progress bar over rounds with the latest accuracy while stderr is a terminal; where `plain` (a console whose
    output is not a terminal), a line every PLAIN_EVERY_S at most with the round and the latest accuracy."""

    def __init__(self, console: Console | None = None, position: str = "", plain: Console | None = None):
        self.console = console or Console(stderr=True)
        self.position = position
        self.enabled = sys.stderr.isatty()
        self.progress: Progress | None = None
        self.plain = plain if plain is not None and not plain.is_terminal else None
        self.said = time.monotonic()

    def on_run_start(self, spec: RunSpec) -> None:
        if not self.enabled:
            return
        self.progress = Progress(
            TextColumn(f"{self.position}[bold]{spec.label}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self.progress.start()
        self.task = self.progress.add_task("rounds", total=spec.rounds, status="")

    def on_round_end(self, spec: RunSpec, record: RoundRecord) -> None:
        acc = record.get(M.ACC_LOCAL_MEAN)
        if self.progress is not None:
            self.progress.update(self.task, advance=1, status=f"acc {acc:.3f}" if acc is not None else "")
        if self.plain is not None and time.monotonic() - self.said >= PLAIN_EVERY_S:
            self.said = time.monotonic()
            latest = f" {M.ACC_LOCAL_MEAN}={acc:.4f}" if acc is not None else ""
            self.plain.print(f"{self.position}{escape(spec.label)}: round {int(record[M.ROUND])}/{spec.rounds}{latest}")

    def on_run_end(self, result: RunResult) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class ResultLine(Callback):
    """One line per finished run, whether or not there is a terminal: its label, final local accuracy and
    status (with the reason when it failed)."""

    def __init__(self, console: Console, position: str = ""):
        self.console = console
        self.position = position

    def on_run_end(self, result: RunResult) -> None:
        acc = result.final.get(M.FINAL_PREFIX + M.ACC_LOCAL_MEAN, float("nan"))
        status = "[green]ok" if result.status == "FINISHED" else f"[red]FAILED: {escape(result.reason)}"
        resumed = (
            f" (went on from its round-{result.tags[RESUMED_TAG]} checkpoint)" if RESUMED_TAG in result.tags else ""
        )
        self.console.print(f"{self.position}{result.spec.label}: {M.ACC_LOCAL_MEAN}={acc:.4f} {status}[/]{resumed}")


DRY_RUN_ROWS = 60
"""Rows a dry run lists before it elides the middle (the first 50 and the last 10): a paper suite's 2,340 rows
read no better in a terminal and take seconds to lay out; `--all` lists every one."""
TAIL_ROWS = 10


def configurations_table(specs: Sequence[RunSpec], rows: int | None = None) -> Table:
    """What a task expands to, one row per RunSpec (`fedbench sweep --dry-run`); with `rows`, a longer list
    keeps its first `rows - 10` and last 10 and says how many lie between."""
    table = Table(title=f"{len(specs)} configurations")
    for column in ("#", "run (what varies)", "algorithm", "dataset", "scenario", "rounds", "seed"):
        table.add_column(column)
    shown = list(enumerate(specs))
    if rows is not None and len(specs) > rows:
        head, tail = shown[: rows - TAIL_ROWS], shown[len(specs) - TAIL_ROWS :]
        omitted = len(specs) - len(head) - len(tail)
        shown = [*head, (None, f"... {omitted} more (--all lists every run)"), *tail]
    for i, spec in shown:
        if i is None:
            table.add_row("...", spec, style="dim")
            continue
        scenario = spec.scenario.preset or spec.scenario.partition.name
        if spec.scenario.drift_every:
            scenario += f", drift every {spec.scenario.drift_every}"
        algorithm = " ".join([spec.algorithm.name] + [f"{k}={v}" for k, v in changed_params(spec.algorithm).items()])
        table.add_row(
            str(i),
            escape(spec.label),
            escape(algorithm),
            spec.dataset.name,
            escape(scenario),
            str(spec.rounds),
            str(spec.seed),
        )
    return table


def varying_fields(specs: Sequence[RunSpec]) -> list[str]:
    """Flattened RunSpec fields (other than the seed) whose value differs between the given runs."""
    flats = [s.flat() for s in specs]
    keys = [k for k in flats[0] if k not in ("seed", "run_name") and not k.startswith("resources.")]
    return [k for k in keys if len({str(f.get(k)) for f in flats}) > 1] or ["algorithm.name"]


def results_table(
    results: Sequence[RunResult],
    metric: str = M.FINAL_PREFIX + M.ACC_LOCAL_MEAN,
    mode: str = "max",
    references: Sequence[str] = (),
) -> Table:
    """One row per configuration, named as leaderboards name it (`feroma tau=0.047 warmup_rounds=3`; an algorithm
    in `references`, a search's reference, says so), best first by `metric`: its mean ± std over seeds and the
    mean's 95% interval, the worst client's accuracy, the costs and n. A run hash counts once."""
    import pandas as pd  # not for a dry run's tables

    from fedbench.tracking.intervals import mean_interval, natural_bounds
    from fedbench.tracking.leaderboard import INTERVAL_NOTE, STD_NOTE, label_runs, readable, varying_params

    finished = list({r.spec.run_hash: r for r in results if r.status == "FINISHED"}.values())
    frame = pd.DataFrame([{k: str(v) for k, v in r.spec.flat().items() if v is not None} for r in finished])
    labels = label_runs(frame, varying_params(frame)) if len(frame) else pd.Series(dtype=str)
    labels = [
        f"{label} (reference)" if r.spec.algorithm.name in references else label
        for label, r in zip(labels, finished, strict=True)
    ]
    groups: dict[str, list[RunResult]] = defaultdict(list)
    for label, r in zip(labels, finished, strict=True):
        groups[label].append(r)
    table = Table(title="fedbench results: final round, mean ± std over seeds", caption=f"{STD_NOTE}\n{INTERVAL_NOTE}")
    table.add_column("configuration", overflow="fold")  # wrapped, never cut: its end may be what tells rows apart
    for col in (f"{metric.removeprefix(M.FINAL_PREFIX)} mean [95%]", "acc min", "compute s", "MB up", "MB down", "n"):
        table.add_column(col, justify="right")

    def values(runs: list[RunResult], key: str, scale: float = 1.0) -> np.ndarray:
        return np.array([r.final.get(key, np.nan) for r in runs], dtype=float) * scale

    def stat(runs: list[RunResult], key: str, scale: float = 1.0, digits: int = 3) -> str:
        found = values(runs, key, scale)
        return (
            f"{found.mean():.{digits}f} ± {found.std(ddof=1):.{digits}f}"
            if len(found) > 1
            else f"{found[0]:.{digits}f}"
        )

    def ranked_stat(runs: list[RunResult]) -> str:
        """The ranked metric's mean ± std and, below it, its mean's 95% interval."""
        interval = mean_interval(list(values(runs, metric)), bounds=natural_bounds(metric))
        bounds = "" if np.isnan(interval.low) else f"\n[{interval.low:.3f}, {interval.high:.3f}]"
        return stat(runs, metric) + bounds

    sign = -1 if mode == "max" else 1
    ranked = sorted(
        groups.items(), key=lambda kv: sign * np.nan_to_num(values(kv[1], metric).mean(), nan=-sign * np.inf)
    )
    for label, (_, runs) in zip(readable([label for label, _ in ranked]), ranked, strict=True):
        table.add_row(
            escape(label),
            ranked_stat(runs),
            stat(runs, M.FINAL_PREFIX + M.ACC_LOCAL_MIN),
            stat(runs, M.TOTAL_PREFIX + M.TIME_CLIENT_COMPUTE_S, digits=1),
            stat(runs, M.TOTAL_PREFIX + M.COMM_UP_BYTES, 1e-6, 2),
            stat(runs, M.TOTAL_PREFIX + M.COMM_DOWN_BYTES, 1e-6, 2),
            str(len(runs)),
        )
    return table


def failures_table(results: Sequence[RunResult]) -> Table | None:
    failed = [r for r in results if r.status == "FAILED"]
    if not failed:
        return None
    table = Table(title="failed runs", style="red")
    table.add_column("run", overflow="fold")
    table.add_column("reason", overflow="fold")
    for r in failed:
        table.add_row(r.spec.label, r.reason)
    return table
