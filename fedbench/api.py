"""fedbench from Python (a notebook): `run`, `sweep`, `leaderboard` and `report`, doing what the commands of the same
names do, through the same functions, and returning the results instead of printing tables.

Overrides are `--set`'s: `overrides=["optimizer.lr=0.01"]` (values parsed as YAML), or keyword arguments
with `__` for the dots, `optimizer__lr=0.01` (values taken as they are). Heavy imports (torch, Ray, MLflow)
happen inside the calls, so importing fedbench stays cheap.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from fedbench.config.task import Override, TaskSpec, load_task, parse_overrides, resolve_run, set_path, task_from_dict
from fedbench.core import metrics as M
from fedbench.core.callbacks import RunResult
from fedbench.core.errors import ConfigError
from fedbench.core.runspec import RunSpec

if TYPE_CHECKING:
    import pandas as pd

    from fedbench.tracking.reproduction import Report
    from fedbench.tuning.search_space import SearchSpace
    from fedbench.tuning.sweep import SweepOutcome

TaskLike = str | os.PathLike | Mapping[str, Any] | TaskSpec
"""A task file's path, a task's mapping (as a task file writes it) or a TaskSpec."""


def run(task_or_spec: TaskLike | RunSpec, *, overrides: Sequence[str] = (), backend: str | None = None,
        track: bool = True, **fields: Any) -> list[RunResult] | RunResult:
    """Run every RunSpec of a task one after another, as `fedbench run` does.

    Each run gets the callbacks `fedbench run` gives it: recorded in MLflow (in the experiment named after
    the task), a progress bar and a result line.

    Args:
        task_or_spec: a task file path, a task mapping, a TaskSpec, or a single RunSpec.
        overrides: `key.path=value` texts, as `fedbench run --set` takes them.
        backend: `serial` or `ray` (`resources.backend`); None keeps the task's.
        track: False runs without recording to MLflow.
        **fields: overrides as keyword arguments, `__` for the dots: `optimizer__lr=0.01`, `seeds=[0, 1]`.

    Returns:
        One RunResult per run, in order (a failed run is reported in its result and the others go on);
        a RunSpec gives its one RunResult.

    Raises:
        ConfigError: bad input, naming the field, the value and what is allowed; nothing has run then.

    Example:
        >>> results = fedbench.run("tasks/quickstart.yaml", rounds=3, seeds=[0])
    """
    from rich.console import Console

    from fedbench.runtime.session import run_specs
    from fedbench.tracking.run_callbacks import run_callbacks

    changes = [*overrides, *keyword_overrides(fields), *([("resources.backend", backend)] if backend else [])]
    if isinstance(task_or_spec, RunSpec):
        specs = [with_overrides(task_or_spec, changes)]
    else:
        specs = as_task(task_or_spec, changes).expand()
    results = run_specs(specs, run_callbacks(len(specs), Console(), track))
    return results[0] if isinstance(task_or_spec, RunSpec) else results


def sweep(task: TaskLike, *, search: str | os.PathLike | SearchSpace | None = None, num_samples: int | None = None,
          metric: str | None = None, mode: str = "max", scheduler: str | None = None,
          max_concurrent: int | None = None, address: str | None = None, resume: bool = False,
          max_failures: int | None = None, overrides: Sequence[str] = (), **fields: Any) -> SweepOutcome:
    """Sweep a task's RunSpecs (or Optuna samples of a search space) as Ray Tune trials, as `fedbench sweep` does.

    Args:
        task: a task file path, a task mapping or a TaskSpec.
        search: an Optuna search space or its YAML file (`search_spaces/feroma_tau.yaml`); None sweeps the grid.
        num_samples: Optuna samples to run (with `search`).
        metric: the metric to optimise (with `search` or `scheduler`), e.g. `final/acc_test_time`.
        mode: `max` or `min`, whether larger metric values are better.
        scheduler: `asha` stops poor trials early (needs a per-round `metric`).
        max_concurrent: trials at once (default: as resources allow).
        address: a Ray cluster (`auto` or HOST:PORT); None starts a local Ray.
        resume: continue the interrupted sweep of this task and configuration.
        max_failures: restarts of a trial whose process died (None: the task's `max_failures`, default 1).
        overrides: `key.path=value` texts, as `--set` takes them.
        **fields: overrides as keyword arguments, `__` for the dots.

    Returns:
        The sweep's MLflow parent run, Tune folder, this call's RunResults and, for a search, the best sample
        with its task file (`best_task`); `interrupted` is set when not every trial ended.

    Raises:
        ConfigError: bad input (checked before any trial starts).
    """
    from fedbench.tuning.launch import execute_sweep
    from fedbench.tuning.plan import plan_sweep

    spec = as_task(task, [*overrides, *keyword_overrides(fields)])
    plan = plan_sweep(spec, search, num_samples, metric, mode, scheduler)
    return execute_sweep(spec, plan, max_concurrent=max_concurrent, address=address, resume=resume,
                         max_failures=max_failures)


def leaderboard(task_or_experiment: TaskLike, *, metric: str = M.FINAL_PREFIX + M.ACC_LOCAL_MEAN,
                group_by: str | Sequence[str] = ("dataset", "scenario"), mode: str = "max",
                uri: str | None = None) -> pd.DataFrame:
    """Rank configurations from the runs recorded in MLflow, as `fedbench leaderboard` does.

    Args:
        task_or_experiment: an MLflow experiment name, or a task (file path, mapping or TaskSpec) whose
            experiment to read; a string naming an existing file or ending in `.yaml` is a task file.
        metric: the metric to rank by.
        group_by: fields whose values form the groups configurations compete in (`dataset`, `scenario`,
            or dotted fields such as `scenario.alpha`), as a list or comma-separated.
        mode: `max` or `min`, whether larger metric values are better.
        uri: the MLflow tracking URI; None: where `fedbench run` records (`MLFLOW_TRACKING_URI`, else
            `results/mlflow.db`).

    Returns:
        One row per configuration: group, rank (1 = best), configuration, mean, std and n over seeds, and
        the cost columns. `attrs["failed"]` holds the runs that did not finish, with their reasons.

    Raises:
        ConfigError: an unknown experiment, metric or group-by field.
    """
    from fedbench.tracking.leaderboard import build_leaderboard, read_runs
    from fedbench.tracking.paths import tracking_uri

    experiment = experiment_name(task_or_experiment)
    fields = group_by.split(",") if isinstance(group_by, str) else list(group_by)
    board = build_leaderboard(read_runs(experiment, uri or tracking_uri()), metric, fields, mode)
    board.table.attrs.update(failed=board.failed, metric=board.metric)
    return board.table


def report(task: TaskLike, *, out: str | os.PathLike | None = None, tolerance: float | None = None,
           uri: str | None = None, overrides: Sequence[str] = (), **fields: Any) -> Report:
    """Write the task's reproduction report, as `fedbench report` does: its runs beside the published numbers
    of its `reference:` block (report.md and PNGs), logged under the experiment's latest sweep parent run.

    Args:
        task: a task file's path, mapping or TaskSpec; `profile="reduced"` (a keyword) picks a profile.
        out: the folder to write; None: `results/reports/<task>`.
        tolerance: how far (on the metric's own scale) ours may be from a published value and still agree;
            None: the command's default, 0.02.
        uri: the MLflow tracking URI; None: where `fedbench run` records.

    Returns:
        The Report: its tables (cells with ours, the published value and the difference), `path` of
        report.md, `files` (the PNGs) and `parent_run_id` where it was logged.
    """
    from fedbench.tracking.paths import results_path, tracking_uri
    from fedbench.tracking.reproduction import DEFAULT_TOLERANCE, write_report

    spec = as_task(task, [*overrides, *keyword_overrides(fields)])
    folder = Path(out) if out is not None else results_path("reports", spec.name)
    return write_report(spec, uri or tracking_uri(), folder, DEFAULT_TOLERANCE if tolerance is None else tolerance)


def keyword_overrides(fields: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Keyword arguments as (dotted path, value) overrides: `optimizer__lr=0.01` -> `("optimizer.lr", 0.01)`."""
    return [(name.replace("__", "."), value) for name, value in fields.items()]


def as_task(task: TaskLike, overrides: Sequence[Override]) -> TaskSpec:
    """A TaskSpec from any task-like input, with `overrides` applied after the task's own."""
    if isinstance(task, TaskSpec):
        return task.with_overrides(overrides)
    if isinstance(task, Mapping):
        return task_from_dict(dict(task), overrides)
    if isinstance(task, (str, os.PathLike)):
        return load_task(task, overrides)
    raise ConfigError("task", task, "a task file path, a task mapping or a TaskSpec")


def with_overrides(spec: RunSpec, overrides: Sequence[Override]) -> RunSpec:
    """`spec` with RunSpec-field overrides, checked again as a task's run is."""
    if not overrides:
        return spec
    raw = spec.to_dict()
    for path, value in parse_overrides(overrides):
        set_path(raw, path, value)
    return resolve_run(raw)


def experiment_name(task_or_experiment: TaskLike) -> str:
    """The MLflow experiment a task records into, or the experiment name given."""
    if isinstance(task_or_experiment, str) and not is_task_file(task_or_experiment):
        return task_or_experiment
    return as_task(task_or_experiment, ()).name


def is_task_file(text: str) -> bool:
    return text.endswith((".yaml", ".yml")) or Path(text).is_file()
