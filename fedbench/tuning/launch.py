"""A task swept the one way, for `fedbench sweep` and `fedbench.sweep` alike: planned (its search space file
read), run on Ray Tune, and a search's best sample written as a task file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from fedbench.config.task import TaskSpec
from fedbench.tracking.paths import results_path, tracking_uri
from fedbench.tuning.plan import SweepPlan, make_plan
from fedbench.tuning.search_space import SearchSpace, load_search_space

if TYPE_CHECKING:  # running a sweep needs Ray Tune and MLflow; planning one (a dry run) needs neither
    from fedbench.tuning.sweep import SweepOutcome


def plan_sweep(task: TaskSpec, search: str | Path | SearchSpace | None = None, num_samples: int | None = None,
               metric: str | None = None, mode: str = "max", scheduler: str | None = None) -> SweepPlan:
    """The sweep of `task`: its grid, or `num_samples` Optuna samples of `search` (a space or its YAML file);
    every problem is reported now (see `make_plan`)."""
    space = load_search_space(search) if isinstance(search, (str, os.PathLike)) else search
    return make_plan(task, space, num_samples, metric, mode, scheduler)


def execute_sweep(task: TaskSpec, plan: SweepPlan, max_concurrent: int | None = None, address: str | None = None,
                  resume: bool = False, max_failures: int | None = None) -> SweepOutcome:
    """Run `plan` (see `run_sweep`; `max_failures` None: the task's); a search's best sample is also written as a
    task file (`best_task`)."""
    from fedbench.tracking.sweep_report import report_sweep
    from fedbench.tuning.best_task import write_best_task
    from fedbench.tuning.sweep import run_sweep

    restarts = task.max_failures if max_failures is None else max_failures
    outcome = run_sweep(plan, max_concurrent=max_concurrent, address=address, resume=resume, max_failures=restarts)
    if outcome.best is not None:
        outcome.best_task = write_best_task(task, outcome.best, plan)
    if not outcome.interrupted:
        task_fields = {**task.base, "grid": task.grid_fields(), "seeds": list(task.seeds)}
        outcome.reported = report_sweep(tracking_uri(), task.name, outcome.parent_run_id, task_fields, task.description,
                                        results_path("plots", task.name))
    return outcome
