"""fedbench from Python (a notebook), and what every `fedbench` command does: `run`, `sweep`, `leaderboard`, `rank`,
`export`, `bundle`, `unbundle`, `plot`, `report`, `ui`, `listing` and `show_scenario` do the work and return their
results instead of printing tables. The command line only parses its arguments, calls these and prints what they
return, so a command and its Python twin cannot drift apart (both skip finished runs, both write the leaderboard
files).

Overrides are `--set`'s: `overrides=["optimizer.lr=0.01"]` (values parsed as YAML), or keyword arguments
with `__` for the dots, `optimizer__lr=0.01` (values taken as they are). Everything but fedbench's lightest
modules is imported inside the calls, so importing fedbench (and `fedbench --help`, `fedbench list`) stays cheap.
A bad argument is reported by the command's option name (`--dpi`, `--rounds`), as the layers below already
report theirs (`--metric`, `--experiment`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedbench.core import metrics as M
from fedbench.core import timeline
from fedbench.core.errors import ConfigError, DegenerateRunWarning, FedbenchError

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console

    from fedbench.catalog import Listed
    from fedbench.config.task import Override, TaskSpec
    from fedbench.core.callbacks import RunResult
    from fedbench.core.runspec import RunSpec
    from fedbench.data.base import BaseDataset
    from fedbench.scenarios.artifact import Scenario
    from fedbench.tracking.compare import Comparison
    from fedbench.tracking.cost import CostEstimate
    from fedbench.tracking.plots import Plots
    from fedbench.tracking.rank_report import RankedExperiment
    from fedbench.tracking.reproduction import Report
    from fedbench.tracking.run_bundle import Bundled, Unbundled
    from fedbench.tracking.seeds_question import SeedsQuestion
    from fedbench.tracking.ui import UiServer
    from fedbench.tuning.plan import SweepPlan
    from fedbench.tuning.search_space import SearchSpace
    from fedbench.tuning.sweep import SweepOutcome

    TaskLike = str | os.PathLike | Mapping[str, Any] | TaskSpec
    """A task file's path, a task's mapping (as a task file writes it) or a TaskSpec."""


def run(
    task_or_spec: TaskLike | RunSpec,
    *,
    overrides: Sequence[str] = (),
    backend: str | None = None,
    track: bool = True,
    rerun: bool = False,
    console: Console | None = None,
    checkpoint_every: int | None = None,
    **fields: Any,
) -> list[RunResult] | RunResult:
    """Run every RunSpec of a task one after another, as `fedbench run` does.

    Runs the tracking store already holds a finished run of are skipped (and the console says how many), so
    that running a task again after an interruption or an added grid value runs only what is missing. Each
    run gets the callbacks `fedbench run` gives it: recorded in MLflow (in the experiment named after the
    task), a progress bar and a result line.

    Args:
        task_or_spec: a task file path, a task mapping, a TaskSpec, or a single RunSpec.
        overrides: `key.path=value` texts, as `fedbench run --set` takes them.
        backend: a registered backend (`serial`, `ray`; `resources.backend`); None keeps the task's.
        track: False runs without recording to MLflow (and so skips nothing).
        rerun: run the finished runs again too (`--rerun`), every run from round 1; a single RunSpec always runs.
        checkpoint_every: rounds between two checkpoints of a run, under `results/checkpoints/<task>/<run hash>/`
            (the last 2 kept, removed when the run ends); a run killed before (Ctrl-C, a dead machine) goes on from
            its last one, with the numbers an uninterrupted run has. 0: no checkpoints; None: every 5 rounds.
        console: where the progress, the result lines and what was skipped go; None: a new rich Console.
        **fields: overrides as keyword arguments, `__` for the dots: `optimizer__lr=0.01`, `seeds=[0, 1]`.

    Returns:
        One RunResult per run it ran, in order (none when every run had finished before; a failed run is
        reported in its result and the others go on); a RunSpec gives its one RunResult.

    Raises:
        ConfigError: bad input, naming the field, the value and what is allowed; nothing has run then.

    Example:
        >>> results = fedbench.run("tasks/quickstart.yaml", rounds=3, seeds=[0])
    """
    from rich.console import Console

    from fedbench.core.runspec import RunSpec
    from fedbench.runtime.session import run_specs
    from fedbench.tracking.paths import tracking_uri
    from fedbench.tracking.run_callbacks import TRACKING_IMPORTS, check_tracking, run_callbacks

    console = console or Console()
    single = isinstance(task_or_spec, RunSpec)
    if single:
        specs = [with_overrides(task_or_spec, [*overrides, *keyword_overrides(fields), *backend_override(backend)])]
    else:
        specs = plan_run(task_or_spec, overrides=overrides, backend=backend, **fields).expand()
    started = time.time()  # before the store is read: a run another process ends after this is not trained again
    folders = checkpoint_folders(checkpoint_every, track, fresh=rerun)
    check_tracking(track)  # before the store is read
    if track and not rerun and not single:
        specs = unfinished(specs, console)
        if not specs:
            return []
    check_datasets(specs)
    callbacks = run_callbacks(len(specs), console, track)
    timeline.mark("tracking_ready")
    backends = ", ".join(sorted({s.resources.backend for s in specs}))
    console.print(
        f"task [bold]{specs[0].task}[/]: {len(specs)} runs, backend {backends}, "
        f"tracking {tracking_uri() if track else 'off'}"
    )
    claims = RunClaims(track, started, console)
    results = run_specs(specs, callbacks, folders, claims, prefetch=TRACKING_IMPORTS if track else ())
    if single and not results:
        raise FedbenchError(f"run {specs[0].label}: {claims.skipped[0]}")
    return results[0] if single else results


class RunClaims:
    """spec -> the context in which this process trains it (`runtime.run_lock`): False, and the console told why,
    where another process trains it now or ended it since `started`; untracked runs share nothing and are never
    skipped. `skipped` keeps the reasons."""

    def __init__(self, track: bool, started: float, console: Console):
        self.track, self.started, self.console, self.skipped = track, started, console, []

    @contextlib.contextmanager
    def __call__(self, spec: RunSpec) -> Iterator[bool]:
        from rich.markup import escape

        from fedbench.runtime.run_lock import claimed
        from fedbench.tracking.paths import results_path

        if not self.track:
            yield True
            return
        with claimed(results_path("locks", spec.task, spec.run_hash), self.started) as claim:
            if not claim.mine:
                self.skipped.append(claim.why_not())
                self.console.print(f"skipped {escape(spec.label)}: {claim.why_not()}")
            yield claim.mine


def compare(
    a: str,
    b: str,
    *,
    metric: str = M.FINAL_PREFIX + M.ACC_LOCAL_MEAN,
    mode: str = "max",
    a_where: Sequence[str] = (),
    b_where: Sequence[str] = (),
) -> Comparison:
    """Experiment `b` against experiment `a`, as `fedbench compare` shows them: each `NAME` (in the tracking store)
    or `NAME@STORE` (a results folder, or a tracking URI), narrowed to runs whose fields have the `FIELD=VALUE`s of
    `a_where` / `b_where` (two `--set` variants in one experiment). Configurations are paired by the fields that
    vary across both sides less those that tell the sides apart (`Comparison.change`); each row has both sides'
    mean, std and seeds, B - A with Welch's 95% interval, and whether B is better, worse or tied.

    Raises:
        ConfigError: a side without finished runs, a field it does not record, a metric the runs lack.
    """
    from fedbench.tracking.compare import Side
    from fedbench.tracking.compare import compare as compare_sides
    from fedbench.tracking.paths import tracking_uri

    if mode not in ("max", "min"):
        raise ConfigError("mode", mode, "max or min (whether larger values are better)")
    uri = tracking_uri()
    return compare_sides(Side.parse(a, uri, a_where), Side.parse(b, uri, b_where), metric, mode)


def dry_run_cost(specs: Sequence[RunSpec], *, skips_finished: bool = True, probe: bool = False) -> CostEstimate:
    """What `--dry-run` says of `specs` beyond their list: how many the tracking store already holds finished (which
    `fedbench run` skips, `skips_finished`), and the CPU- (and GPU-) hours of client compute the rest need, measured
    on the store's finished runs of each configuration; with `probe`, one serial round of each configuration the
    store never ran is timed (nothing is recorded)."""
    from fedbench.tracking.cost import estimate
    from fedbench.tracking.paths import store_missing, tracking_uri

    uri = tracking_uri()
    runs = None
    if specs and not store_missing(uri):  # reading a store that is not there would create it (and import MLflow)
        from fedbench.tracking.leaderboard import read_runs

        try:
            runs = read_runs(specs[0].task, uri)
        except ConfigError:  # no experiment of this task yet
            pass
    return estimate(specs, runs, skips_finished, probe_round if probe else None)


def seeds_for(
    specs: Sequence[RunSpec], difference: float, *, spread: float | None = None, metric: str | None = None
) -> SeedsQuestion:
    """How many seeds (and runs) the task's grid needs to tell two configurations apart whose means differ by
    `difference`, as `fedbench sweep --dry-run --detect` says: at 80% power by the leaderboard's own test.

    Args:
        specs: the task's RunSpecs (`plan_run(...).expand()`).
        difference: the difference of means to tell apart, on the metric's own scale (0.02: two points of accuracy).
        spread: the seed standard deviation of the metric; None: pooled over the configurations the task's store
            holds two finished seeds or more of.
        metric: the final metric (default final.acc_local_mean).

    Raises:
        ConfigError: a difference that is not a positive number, a negative spread, or no spread given where the
            store has none to measure.
    """
    from fedbench.tracking.paths import store_missing, tracking_uri
    from fedbench.tracking.seeds_question import pooled_spread, seeds_question

    metric = M.canonical(metric or M.FINAL_PREFIX + M.ACC_LOCAL_MEAN)
    if not difference > 0 or not math.isfinite(difference):
        raise ConfigError("--detect", difference, "a positive difference of means on the metric's scale, e.g. 0.02")
    if spread is not None:
        if not spread >= 0 or not math.isfinite(spread):
            raise ConfigError("--spread", spread, "a seed standard deviation >= 0 on the metric's scale, e.g. 0.01")
        return seeds_question(specs, metric, difference, spread, "as stated")
    measured = None
    uri = tracking_uri()
    if specs and not store_missing(uri):
        from fedbench.tracking.leaderboard import read_runs

        with contextlib.suppress(ConfigError):  # no experiment of this task yet
            measured = pooled_spread(read_runs(specs[0].task, uri), metric)
    if measured is None:
        raise ConfigError(
            "--spread",
            None,
            f"the seed standard deviation of {metric} (e.g. 0.01): the store holds no configuration of "
            f"{specs[0].task if specs else 'this task'} with two finished seeds to measure it from",
        )
    spread, configurations = measured
    return seeds_question(specs, metric, difference, spread, f"pooled over {configurations} stored configurations")


def probe_round(spec: RunSpec) -> float:
    """Seconds of client compute of one serial round of `spec`'s configuration (NaN where it cannot run one round:
    a method whose first phase is longer, say); untracked."""
    import dataclasses
    import math

    from fedbench.runtime import run_spec

    one = spec.replace(rounds=1, eval_every=1, resources=dataclasses.replace(spec.resources, backend="serial"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a one-round run of a method with a warm-up warns that it is degenerate
        result = run_spec(one)
    if result.status != "FINISHED" or not result.history:
        return math.nan
    return float(result.history[0].get(M.TIME_CLIENT_COMPUTE_S, math.nan))


def check_datasets(specs: Sequence[RunSpec]) -> None:
    """Load each distinct dataset of `specs` once, before any run starts, so that a missing or damaged file is one
    error (DataMissingError, DataCorruptError) before the work, not a failed run after run. A process loads a
    dataset once (`load_dataset`), so the runs of `fedbench run` then use the copy this loaded."""
    from fedbench.data import load_dataset

    for spec in dict(
        (json.dumps([s.dataset.name, s.dataset.data_root, s.dataset.kwargs], sort_keys=True, default=str), s)
        for s in specs
    ).values():
        load_dataset(spec.dataset.name, spec.dataset.data_root, **spec.dataset.kwargs)


def checkpoint_folders(every: int | None, track: bool, fresh: bool):
    """spec -> its checkpoint folder under `results/checkpoints/` (None without checkpoints); `fresh` forgets the
    checkpoints a killed run left, so it starts from round 1."""
    from fedbench.runtime.checkpoint import CheckpointFolder, checkpoint_interval
    from fedbench.tracking.paths import results_path

    every = checkpoint_interval("--checkpoint-every", every)

    def folder(spec: RunSpec) -> CheckpointFolder | None:
        if not every or not track:  # an untracked run's result goes nowhere a resumed run could continue
            return None
        checkpoints = CheckpointFolder(results_path("checkpoints", spec.task, spec.run_hash), every=every)
        if fresh:
            checkpoints.clear()
        return checkpoints

    return folder


def plan_run(task: TaskLike, *, overrides: Sequence[str] = (), backend: str | None = None, **fields: Any) -> TaskSpec:
    """The task `run` runs, every field checked and nothing run: `.expand()` lists its RunSpecs, finished ones
    included, as `fedbench run --dry-run` does (without reading the store, so that a plan is instant)."""
    loaded = as_task(task, [*overrides, *keyword_overrides(fields), *backend_override(backend)])
    timeline.mark("task_loaded")
    return loaded


def sweep(
    task: TaskLike,
    *,
    search: str | os.PathLike | SearchSpace | None = None,
    num_samples: int | None = None,
    metric: str | None = None,
    mode: str = "max",
    scheduler: str | None = None,
    max_concurrent: int | None = None,
    address: str | None = None,
    resume: bool = False,
    skip_finished: bool = False,
    max_failures: int | None = None,
    checkpoint_every: int | None = None,
    overrides: Sequence[str] = (),
    **fields: Any,
) -> SweepOutcome:
    """Sweep a task's RunSpecs (or Optuna samples of a search space) as Ray Tune trials, as `fedbench sweep` does.

    Args:
        task: a task file path, a task mapping or a TaskSpec.
        search: an Optuna search space or its YAML file (`search_spaces/feroma_tau.yaml`); None sweeps the grid.
        num_samples: Optuna samples to run (with `search`).
        metric: the metric to optimise (with `search` or `scheduler`), e.g. `final.acc_test_time`.
        mode: `max` or `min`, whether larger metric values are better.
        scheduler: `asha` stops poor trials early (needs a per-round `metric`).
        max_concurrent: trials at once (default: as resources allow).
        address: a Ray cluster (`auto` or HOST:PORT); None starts a local Ray.
        resume: continue the interrupted sweep of this task and configuration.
        skip_finished: leave out the grid's configurations the store holds a finished run of, whatever recorded it
            (another sweep, `run`, `unbundle`).
        max_failures: restarts of a trial whose process died (None: the task's `max_failures`, default 1).
        checkpoint_every: rounds between a trial's checkpoints, which Tune keeps and gives back to a trial it
            restarts (None: every 5; 0: none).
        overrides: `key.path=value` texts, as `--set` takes them.
        **fields: overrides as keyword arguments, `__` for the dots.

    Returns:
        The sweep's MLflow parent run, Tune folder, this call's RunResults and, for a search, the best sample
        with its task file (`best_task`); `interrupted` is set when not every trial ended.

    Raises:
        ConfigError: bad input (checked before any trial starts).
    """
    spec, plan = plan_sweep(
        task,
        search=search,
        num_samples=num_samples,
        metric=metric,
        mode=mode,
        scheduler=scheduler,
        max_concurrent=max_concurrent,
        max_failures=max_failures,
        checkpoint_every=checkpoint_every,
        skip_finished=skip_finished,
        overrides=overrides,
        **fields,
    )
    return execute_sweep(
        spec,
        plan,
        max_concurrent=max_concurrent,
        address=address,
        resume=resume,
        skip_finished=skip_finished,
        max_failures=max_failures,
        checkpoint_every=checkpoint_every,
    )


def plan_sweep(
    task: TaskLike,
    *,
    search: str | os.PathLike | SearchSpace | None = None,
    num_samples: int | None = None,
    metric: str | None = None,
    mode: str = "max",
    scheduler: str | None = None,
    max_concurrent: int | None = None,
    max_failures: int | None = None,
    checkpoint_every: int | None = None,
    skip_finished: bool = False,
    overrides: Sequence[str] = (),
    **fields: Any,
) -> tuple[TaskSpec, SweepPlan]:
    """The task and the sweep `sweep` would run (arguments as there), every input checked and no trial started:
    what `fedbench sweep --dry-run` shows. `max_concurrent`, `max_failures`, `checkpoint_every` and `skip_finished`
    are checked, not planned."""
    from fedbench.config.task import check_max_failures
    from fedbench.runtime.checkpoint import checkpoint_interval
    from fedbench.tuning.plan import check_skip_finished
    from fedbench.tuning.plan import plan_sweep as make_plan

    if max_concurrent is not None and max_concurrent < 1:
        raise ConfigError(
            "--max-concurrent", max_concurrent, "an integer >= 1, or leave it out for as many as resources allow"
        )
    if max_failures is not None:
        check_max_failures("--max-failures", max_failures)
    checkpoint_interval("--checkpoint-every", checkpoint_every)
    check_skip_finished(skip_finished, search is not None)
    with warnings.catch_warnings():
        if search is not None:  # a search trains its samples, never the task's own run, and refuses a degenerate one
            warnings.simplefilter("ignore", DegenerateRunWarning)
        spec = as_task(task, [*overrides, *keyword_overrides(fields)])
        return spec, make_plan(spec, search, num_samples, metric, mode, scheduler)


def execute_sweep(
    task: TaskSpec,
    plan: SweepPlan,
    *,
    max_concurrent: int | None = None,
    address: str | None = None,
    resume: bool = False,
    skip_finished: bool = False,
    max_failures: int | None = None,
    checkpoint_every: int | None = None,
) -> SweepOutcome:
    """Run what `plan_sweep` planned (options as in `sweep`): `sweep`'s second half, for a caller that shows the
    plan before its trials start, as the command does."""
    from fedbench.runtime.checkpoint import checkpoint_interval
    from fedbench.tuning.launch import execute_sweep as launch

    if address in (None, "local") and "RAY_ADDRESS" not in os.environ:  # a cluster's nodes may hold other files
        check_datasets(plan.specs or [plan.spec_of({})])
    return launch(
        task,
        plan,
        max_concurrent=max_concurrent,
        address=address,
        resume=resume,
        skip_finished=skip_finished,
        max_failures=max_failures,
        checkpoint_every=checkpoint_interval("--checkpoint-every", checkpoint_every),
    )


def leaderboard(
    task_or_experiment: TaskLike,
    *,
    metric: str = M.FINAL_PREFIX + M.ACC_LOCAL_MEAN,
    group_by: str | Sequence[str] = ("dataset", "scenario"),
    mode: str = "max",
    fmt: str | None = None,
    out: str | os.PathLike | None = None,
    uri: str | None = None,
) -> pd.DataFrame:
    """Rank configurations from the runs recorded in MLflow, as `fedbench leaderboard` does, and write the board
    where it writes it: `results/leaderboards/<experiment>.md` and `.parquet`.

    Args:
        task_or_experiment: an MLflow experiment name, or a task (file path, mapping or TaskSpec) whose
            experiment to read; a string naming an existing file or ending in `.yaml` is a task file.
        metric: the metric to rank by.
        group_by: fields whose values form the groups configurations compete in (`dataset`, `scenario`,
            or dotted fields such as `scenario.alpha`), as a list or comma-separated.
        mode: `max` or `min`, whether larger metric values are better.
        fmt: also write the board as `markdown`, `csv` or `parquet`, to `out` (default: beside the others).
        out: the path of `fmt`'s file.
        uri: the MLflow tracking URI; None: where `fedbench run` records (`MLFLOW_TRACKING_URI`, else
            `results/mlflow.db`).

    Returns:
        One row per configuration: group, rank (1 = best), configuration, mean, std and n over seeds, and
        the cost columns. `attrs["failed"]` holds the runs that did not finish, with their reasons,
        `attrs["metric"]` the metric ranked by and `attrs["files"]` the files written.

    Raises:
        ConfigError: an unknown experiment, metric or group-by field.
    """
    from fedbench.tracking.leaderboard import build_leaderboard, read_runs, write_leaderboard
    from fedbench.tracking.paths import results_path, tracking_uri

    experiment = experiment_name(task_or_experiment)
    board = build_leaderboard(read_runs(experiment, uri or tracking_uri()), metric, field_list(group_by), mode)
    written = [
        write_leaderboard(board, results_path("leaderboards", f"{experiment}.md"), "markdown"),
        write_leaderboard(board, results_path("leaderboards", f"{experiment}.parquet"), "parquet"),
    ]
    if fmt is not None:
        suffix = {"markdown": "md"}.get(fmt, fmt)
        path = Path(out) if out else results_path("leaderboards", f"{experiment}.{suffix}")
        written.append(write_leaderboard(board, path, fmt))
    board.table.attrs.update(failed=board.failed, metric=board.metric, files=list(dict.fromkeys(written)))
    return board.table


def rank(
    task_or_experiment: TaskLike,
    *,
    metric: str = M.FINAL_PREFIX + M.ACC_LOCAL_MEAN,
    mode: str = "max",
    across: str | Sequence[str] = ("dataset", "scenario"),
    out: str | os.PathLike | None = None,
    uri: str | None = None,
) -> RankedExperiment:
    """Rank the methods of an experiment across its scenarios, as `fedbench rank` does: average ranks, the
    Friedman test, every pair's Wilcoxon test (Holm-corrected), a critical-difference diagram, the aggregate score
    and each pair's probability of improvement with intervals (`fedbench.tracking.ranking` says how).

    Args:
        task_or_experiment: an MLflow experiment name or a task, as `leaderboard` takes it.
        metric: the final metric to rank by.
        mode: `max` or `min`, whether larger metric values are better.
        across: the fields whose values make a scenario (the rest, seeds aside, make a method), as a list or
            comma-separated.
        out: the folder for ranking.md and the PNGs; None: `results/rankings/<experiment>`.
        uri: the MLflow tracking URI; None: where `fedbench run` records.

    Returns:
        The ranking (its tables as DataFrames), the files written and the sweep parent run they were logged
        under (None where the experiment has none).

    Raises:
        ConfigError: an unknown experiment, metric or field, or fewer than two methods run in two scenarios.
    """
    from fedbench.tracking.paths import results_path, tracking_uri
    from fedbench.tracking.rank_report import rank_experiment

    if mode not in ("max", "min"):
        raise ConfigError("--mode", mode, "max or min")
    experiment = experiment_name(task_or_experiment)
    folder = Path(out) if out else results_path("rankings", experiment)
    return rank_experiment(experiment, uri or tracking_uri(), folder, metric, mode, field_list(across))


def export(
    task_or_experiment: TaskLike,
    *,
    fmt: str = "csv",
    group_by: str | Sequence[str] = ("dataset", "scenario"),
    out: str | os.PathLike | None = None,
    uri: str | None = None,
    per_client: bool = False,
) -> pd.DataFrame:
    """Every per-round metric of an experiment's finished runs as one long table, written as `fedbench export` does;
    with `per_client`, every client's numbers at every evaluated round instead.

    Args:
        task_or_experiment: an MLflow experiment name or a task, as `leaderboard` takes it.
        fmt: `csv` or `parquet`.
        group_by: the fields whose values form the `group` column, as a list or comma-separated.
        out: the file to write, as CSV or parquet by its suffix where it has one of those, else as `fmt`; None:
            `results/exports/<experiment>-rounds.<fmt>` (`-clients.<fmt>` per client).
        uri: the MLflow tracking URI; None: where `fedbench run` records.
        per_client: one row per (run, round, client): `acc_local`, `test_samples`, `train_samples` and
            `train_loss` (NaN where the client did not train that round).

    Returns:
        One row per (run, round, metric): run hash, seed, group, configuration, the varying fields, round,
        metric and value (per client: round, client and its numbers); `attrs["path"]` is the file written and,
        per client, `attrs["without"]` the finished runs recorded without per-client results.
    """
    from fedbench.tracking.export import long_metrics, write_table
    from fedbench.tracking.paths import results_path, tracking_uri
    from fedbench.tracking.per_client import per_client_runs

    experiment = experiment_name(task_or_experiment)
    if per_client:
        found = per_client_runs(experiment, uri or tracking_uri(), field_list(group_by))
        table, kind = found.table, "clients"
        table.attrs["without"] = found.without
    else:
        table, kind = long_metrics(experiment, uri or tracking_uri(), field_list(group_by)), "rounds"
    path = Path(out) if out else results_path("exports", f"{experiment}-{kind}.{fmt}")
    table.attrs["path"] = write_table(table, path, fmt)
    return table


def bundle(task_or_experiment: TaskLike, *, out: str | os.PathLike, uri: str | None = None) -> Bundled:
    """Write an experiment's finished runs to one file another store can take, as `fedbench bundle` does: a sweep
    run on a GPU machine or a cluster, brought home; a long sweep's finished runs, resumed on another machine.

    The bundle holds every FINISHED run and each sweep parent run with a FINISHED child, with their tags, params,
    whole metric histories and artifacts, and names no path of this machine (`fedbench.tracking.run_bundle`).

    Args:
        task_or_experiment: an MLflow experiment name or a task, as `leaderboard` takes it.
        out: the file to write, a name ending in `.tar.xz`.
        uri: the MLflow tracking URI to read; None: where `fedbench run` records.

    Returns:
        The file written, the experiment and how many runs it holds.

    Raises:
        ConfigError: `out` does not end in `.tar.xz`, no such store or experiment, or it has no finished run.
    """
    from fedbench.tracking.paths import tracking_uri
    from fedbench.tracking.run_bundle import write_bundle

    return write_bundle(experiment_name(task_or_experiment), uri or tracking_uri(), out)


def unbundle(path: str | os.PathLike, *, uri: str | None = None) -> Unbundled:
    """Add the runs of a bundle (`bundle`) to a store, as `fedbench unbundle` does, each run once.

    The experiment is created if needed; each run keeps its status, times, tags, params, metric histories and
    artifacts. A run the store already holds (bundled before, or a FINISHED run of a run hash it holds FINISHED) is
    left out; a sweep it already has keeps its latest parent run and gains the bundle's children, so that
    `fedbench sweep --resume` there runs only the trials neither store finished.

    Args:
        path: the bundle, a `.tar.xz` written by `bundle`.
        uri: the MLflow tracking URI to add to; None: where `fedbench run` records.

    Returns:
        The experiment, the store, and how many runs were added and how many were there already.

    Raises:
        ConfigError: no such file, or not a bundle (checked before the store is touched).
    """
    from fedbench.tracking.paths import tracking_uri
    from fedbench.tracking.run_bundle import add_bundle

    return add_bundle(path, uri or tracking_uri())


def plot(
    task_or_experiment: TaskLike,
    *,
    metric: str | None = None,
    group_by: str | Sequence[str] = ("scenario",),
    out: str | os.PathLike | None = None,
    formats: str | Sequence[str] = ("png",),
    dpi: int = 110,
    uri: str | None = None,
) -> Plots:
    """Draw a metric per round (mean ± std over seeds) and a final-metric heatmap, as `fedbench plot` does; the
    figures are also logged under the experiment's latest sweep parent run, when it has one. Where the experiment
    was searched (`sweep --search`), Optuna's views of its latest search are drawn too, into `optuna/`.

    Args:
        task_or_experiment: an MLflow experiment name or a task, as `leaderboard` takes it.
        metric: the per-round metric to plot; the heatmap shows `final.<metric>`. None: the metric the
            experiment's latest search optimised (its per-round name), else acc_local_mean.
        group_by: the fields whose values form the panels and heatmap columns, as a list or comma-separated.
        out: the folder for the figures; None: `results/plots/<experiment>`.
        formats: figure formats among png, pdf and svg, as a list or comma-separated.
        dpi: resolution of PNGs, 10 to 1200.
        uri: the MLflow tracking URI; None: where `fedbench run` records.

    Returns:
        The curves and heatmap tables, the runs left out (not finished), the files written (Optuna's views
        among them) and the parent run they were logged under.
    """
    from fedbench.tracking.paths import results_path, tracking_uri
    from fedbench.tracking.plots import plot_experiment
    from fedbench.tuning.study_plots import plot_latest_search, searched_metric

    if not 10 <= dpi <= 1200:
        raise ConfigError("--dpi", dpi, "a resolution from 10 to 1200 dots per inch")
    kinds = figure_formats(formats)
    experiment = experiment_name(task_or_experiment)
    folder = Path(out) if out else results_path("plots", experiment)
    uri = uri or tracking_uri()
    if metric is None:  # a search's figures rank by what it optimised, not by another metric
        metric = (searched_metric(uri, experiment) or M.ACC_LOCAL_MEAN).removeprefix(M.FINAL_PREFIX)
    plots = plot_experiment(experiment, uri, folder, metric, field_list(group_by), formats=kinds, dpi=dpi)
    search = plot_latest_search(uri, experiment, folder / "optuna", kinds, dpi)
    if search is not None:
        plots.files += search.files
    return plots


def report(
    task: TaskLike,
    *,
    out: str | os.PathLike | None = None,
    tolerance: float | None = None,
    resolution: float | None = None,
    uri: str | None = None,
    overrides: Sequence[str] = (),
    **fields: Any,
) -> Report:
    """Write the task's reproduction report, as `fedbench report` does: its runs beside the published numbers
    of its `reference:` block (report.md and PNGs), logged under the experiment's latest sweep parent run.

    Args:
        task: a task file's path, mapping or TaskSpec; `profile="reduced"` (a keyword) picks a profile.
        out: the folder to write; None: `results/reports/<task>`.
        tolerance: how far (on the metric's own scale) ours may be from a published mean and still agree (the
            verdict compares means: tracking/reproduction/verdict.py); None: the command's default, 0.02.
        resolution: the widest 95% interval of a difference (half-width, on the metric's scale) a cell may have
            and still be called within; None: the command's default, 0.1.
        uri: the MLflow tracking URI; None: where `fedbench run` records.

    Returns:
        The Report: its tables (cells with ours, the published value and the difference), `path` of
        report.md, `files` (the PNGs) and `parent_run_id` where it was logged.
    """
    from fedbench.tracking.paths import results_path, tracking_uri
    from fedbench.tracking.reproduction import DEFAULT_RESOLUTION, DEFAULT_TOLERANCE, write_report

    spec = as_task(task, [*overrides, *keyword_overrides(fields)])
    folder = Path(out) if out is not None else results_path("reports", spec.name)
    return write_report(
        spec,
        uri or tracking_uri(),
        folder,
        DEFAULT_TOLERANCE if tolerance is None else tolerance,
        resolution=DEFAULT_RESOLUTION if resolution is None else resolution,
    )


def ui(*, uri: str | None = None, port: int | None = None) -> UiServer:
    """Start MLflow's web UI over the results store, as `fedbench ui` does, on 127.0.0.1 (a free port unless
    `port`); returns the running server: its `url`, and `stop()` to end it.

    Args:
        uri: the store; None: where `fedbench run` records (`MLFLOW_TRACKING_URI`, else `results/mlflow.db`).
        port: the port to serve on; None: a free one.
    """
    from fedbench.tracking.ui import start_ui

    return start_ui(uri, port)


def ui_pages(server: UiServer, limit: int = 20) -> list[tuple[str, str]]:
    """(experiment, address) of the runs pages `fedbench ui` prints, each opening on a comparison of the experiment's
    runs (`fedbench.tracking.ui_views`): best first by the final metric (the one its latest search optimised, where
    it has one), the metrics and the fields that tell runs apart as columns, sweeps' children shown."""
    from fedbench.tracking.leaderboard import DEFAULT_METRIC
    from fedbench.tracking.ui_views import share_views
    from fedbench.tuning.study_plots import searched_metric

    def metric_of(experiment: str) -> str:
        return searched_metric(server.store, experiment) or DEFAULT_METRIC

    return share_views(server.store, server.url, metric_of, limit)


def listing(kind: str | None = None, name: str | None = None) -> dict[str, list[Listed]]:
    """What `fedbench list` shows: each kind's registered entries by name (datasets, models, algorithms,
    partitions, shifts), each with its parameters, their defaults and docs, then the scenario presets under
    `presets` (entries without parameters).

    Args:
        kind: that kind alone (plural or singular: `algorithm` is `algorithms`), without the presets.
        name: with `kind`, that one entry; an unknown name raises a ConfigError listing the known ones.
    """
    from fedbench import catalog

    kinds = [catalog.resolve_kind(kind)] if kind else list(catalog.KINDS)  # a bad kind fails before the catalog loads
    listed = catalog.load()
    if name and kind:
        entry = listed.entry(kinds[0], name)
        if kinds[0] == "datasets":
            from fedbench.core.data_files import files_status

            entry = dataclasses.replace(entry, files=files_status(entry.layouts))
        return {kinds[0]: [entry]}
    entries = {k: listed.entries(k) for k in kinds}
    if "datasets" in entries:  # where the files are is a fact of this machine, now: looked up, not cached
        from fedbench.core.data_files import files_status

        entries["datasets"] = [dataclasses.replace(e, files=files_status(e.layouts)) for e in entries["datasets"]]
    if not kind:
        entries["presets"] = [catalog.Listed(preset, text, ()) for preset, text in listed.presets]
    return entries


@dataclass(frozen=True)
class ScenarioView:
    """One run of a task and the federation it generates, as `fedbench scenario show` shows them."""

    task: str
    runs: int
    """How many runs the task has; `index` is one of them."""
    index: int
    spec: RunSpec
    dataset: BaseDataset
    scenario: Scenario
    rounds: list[int]
    """The rounds to look at: those asked for, else 1, the first of each of the first 4 drift stages, the last."""
    path: Path
    """The heatmap PNG of each client's class mix per round."""


def show_scenario(
    task: TaskLike,
    *,
    run_index: int = 0,
    rounds: str | Sequence[int] | None = None,
    out: str | os.PathLike | None = None,
    overrides: Sequence[str] = (),
    **fields: Any,
) -> ScenarioView:
    """Build one run's federation, as the run itself would, and save a heatmap PNG of its class mix, as
    `fedbench scenario show` does: a scenario is checked before compute is spent on it. Nothing is trained.

    Args:
        task: a task file path, a task mapping or a TaskSpec.
        run_index: which of the task's runs, 0-based.
        rounds: the rounds to look at, as a list or comma-separated (`"1,5,10"`); None: see `ScenarioView.rounds`.
        out: the PNG's path; None: `results/scenarios/<task>-<run hash>.png`.
        overrides: `key.path=value` texts, as `--set` takes them.
        **fields: overrides as keyword arguments, `__` for the dots.
    """
    from fedbench.data import load_dataset
    from fedbench.scenarios import build_scenario
    from fedbench.scenarios.plot import plot_scenario
    from fedbench.scenarios.report import default_rounds
    from fedbench.tracking.paths import results_path

    loaded = as_task(task, [*overrides, *keyword_overrides(fields)])
    specs = loaded.expand()
    if not 0 <= run_index < len(specs):
        raise ConfigError(
            "--run", run_index, f"a run index in 0..{len(specs) - 1} (the task has {runs_text(len(specs))})"
        )
    spec = specs[run_index]
    asked = scenario_rounds(rounds, spec.rounds) if rounds is not None else None  # checked before the data loads
    dataset = load_dataset(spec.dataset.name, spec.dataset.data_root, **spec.dataset.kwargs)
    scenario = build_scenario(dataset, spec.scenario, spec.seed, spec.rounds)
    shown = asked or default_rounds(scenario, spec.rounds)
    path = Path(out) if out else results_path("scenarios", f"{loaded.name}-{spec.run_hash}.png")
    title = (
        f"{loaded.name} run {run_index}: {spec.dataset.name}, {scenario.num_clients} clients, seed {spec.seed} "
        f"({spec.run_hash})"
    )
    path = plot_scenario(dataset.y, scenario, shown, dataset.num_classes, dataset.classes, path, title=title)
    return ScenarioView(loaded.name, len(specs), run_index, spec, dataset, scenario, shown, path)


def unfinished(specs: list[RunSpec], console: Console) -> list[RunSpec]:
    """`specs` less those whose run hash the tracking store already holds a finished run of (in the experiment
    of their task), saying on `console` how many it left out."""
    from rich.markup import escape

    from fedbench.tracking.paths import store_missing, tracking_uri

    uri = tracking_uri()
    if store_missing(uri):  # a new store holds no finished run; reading it would create it
        return specs
    from fedbench.tracking.leaderboard import finished_run_hashes  # pandas and MLflow: only for a store

    done = finished_run_hashes(specs[0].task, uri)
    todo = [s for s in specs if s.run_hash not in done]
    if len(todo) < len(specs):
        console.print(
            f"skipping {len(specs) - len(todo)} of {len(specs)} runs already finished in {escape(uri)} "
            "(--rerun, or rerun=True from Python, runs them again)"
        )
    return todo


def keyword_overrides(fields: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Keyword arguments as (dotted path, value) overrides: `optimizer__lr=0.01` -> `("optimizer.lr", 0.01)`."""
    return [(name.replace("__", "."), value) for name, value in fields.items()]


def backend_override(backend: str | None) -> list[tuple[str, Any]]:
    """`backend` as the override of `resources.backend`; none for None (the task's own)."""
    return [("resources.backend", backend)] if backend else []


def as_task(task: TaskLike, overrides: Sequence[Override]) -> TaskSpec:
    """A TaskSpec from any task-like input, with `overrides` applied after the task's own."""
    from fedbench.config.task import TaskSpec, load_task, task_from_dict

    if isinstance(task, TaskSpec):
        return task.with_overrides(overrides)
    if isinstance(task, Mapping):
        return task_from_dict(dict(task), overrides)
    if isinstance(task, (str, os.PathLike)):
        return load_task(task, overrides)
    raise ConfigError("task", task, "a task file path, a task mapping or a TaskSpec")


def with_overrides(spec: RunSpec, overrides: Sequence[Override]) -> RunSpec:
    """`spec` with RunSpec-field overrides, checked again as a task's run is."""
    from fedbench.config.task import parse_overrides, resolve_run, set_path

    if not overrides:
        return spec
    raw = spec.to_dict()
    for path, value in parse_overrides(overrides):
        set_path(raw, path, value)
    return resolve_run(raw)


def experiment_name(task_or_experiment: TaskLike, overrides: Sequence[str] = ()) -> str:
    """The MLflow experiment a task records into (after `overrides`, such as a profile's), or the experiment name
    given."""
    if isinstance(task_or_experiment, str) and not is_task_file(task_or_experiment):
        return task_or_experiment
    return as_task(task_or_experiment, overrides).name


def is_task_file(text: str) -> bool:
    return text.endswith((".yaml", ".yml")) or Path(text).is_file()


def field_list(fields: str | Sequence[str]) -> list[str]:
    """`"dataset,scenario"` or a list of names -> a list of names."""
    return fields.split(",") if isinstance(fields, str) else list(fields)


def figure_formats(formats: str | Sequence[str]) -> list[str]:
    """`"png,pdf"` or a list -> ['png', 'pdf'], each one of the figure formats (ConfigError naming `--format`)."""
    from fedbench.tracking.plots import FORMATS

    kinds = [f.strip().lower() for f in field_list(formats) if f.strip()]
    if not kinds or any(f not in FORMATS for f in kinds):
        raise ConfigError("--format", formats, "comma-separated figure formats among " + ", ".join(FORMATS))
    return kinds


def scenario_rounds(rounds: str | Sequence[int], last: int) -> list[int]:
    """`"1,5,10"` or a list -> [1, 5, 10], each checked against 1..last, each once (ConfigError naming `--rounds`)."""
    allowed = f"comma-separated round numbers in 1..{last} (the run has {last} rounds), e.g. --rounds 1,{last}"
    try:
        numbers = [int(part) for part in field_list(rounds) if str(part).strip()]
    except ValueError:
        raise ConfigError("--rounds", rounds, allowed) from None
    bad = [r for r in numbers if not 1 <= r <= last]
    if not numbers or bad:
        raise ConfigError("--rounds", bad[0] if bad else rounds, allowed)
    return list(dict.fromkeys(numbers))


def runs_text(n: int) -> str:
    """'1 run', '2 runs'."""
    return f"{n} run{'s' if n != 1 else ''}"
