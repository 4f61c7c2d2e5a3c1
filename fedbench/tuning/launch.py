"""A task swept the one way, for `fedbench sweep` and `fedbench.sweep` alike: run on Ray Tune as planned
(`plan.plan_sweep`), and a search's best sample written as a task file."""

from __future__ import annotations

from fedbench.config.task import TaskSpec
from fedbench.runtime.checkpoint import CHECKPOINT_EVERY
from fedbench.tracking.paths import results_path, tracking_uri
from fedbench.tracking.sweep_report import report_sweep
from fedbench.tuning.best_task import write_best_task
from fedbench.tuning.plan import SweepPlan
from fedbench.tuning.study_plots import report_study
from fedbench.tuning.sweep import SweepOutcome, run_sweep


def execute_sweep(
    task: TaskSpec,
    plan: SweepPlan,
    max_concurrent: int | None = None,
    address: str | None = None,
    resume: bool = False,
    max_failures: int | None = None,
    checkpoint_every: int = CHECKPOINT_EVERY,
    skip_finished: bool = False,
) -> SweepOutcome:
    """Run `plan` (see `run_sweep`; `max_failures` None: the task's); a search's best sample is also written as a
    task file (`best_task`), and Optuna's views of its study go on the parent run beside the leaderboard."""
    restarts = task.max_failures if max_failures is None else max_failures
    outcome = run_sweep(
        plan,
        max_concurrent=max_concurrent,
        address=address,
        resume=resume,
        max_failures=restarts,
        checkpoint_every=checkpoint_every,
        skip_finished=skip_finished,
    )
    if outcome.best is not None:
        outcome.best_task = write_best_task(task, outcome.best, plan)
    if not outcome.interrupted:
        task_fields = {**task.base, "grid": task.grid_fields(), "seeds": list(task.seeds)}
        outcome.reported = report_sweep(
            tracking_uri(),
            task.name,
            outcome.parent_run_id,
            task_fields,
            task.description,
            results_path("plots", task.name),
        )
        if plan.space is not None:
            outcome.reported += report_study(
                tracking_uri(),
                task.name,
                outcome.parent_run_id,
                plan.name,
                results_path("plots", task.name, "optuna"),
                plan.metric or "",
            )
    return outcome
