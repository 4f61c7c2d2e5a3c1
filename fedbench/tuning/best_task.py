"""A search's best sample as a task file, so the winner can be run again over the task's seeds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from fedbench.config.task import TaskSpec
from fedbench.tracking.paths import results_path
from fedbench.tuning.plan import SweepPlan
from fedbench.tuning.search_space import apply


def write_best_task(task: TaskSpec, sample: dict[str, Any], plan: SweepPlan) -> Path:
    """The task's first configuration (`plan.base`) with the sampled fields, over the task's seeds, written to
    `results/best/<task>-best-<space>.yaml`; returns the path."""
    assert plan.base is not None and plan.space is not None, "only a search has a best sample"
    run = apply(plan.base, sample).to_dict()
    for key in ("task", "seed"):
        run.pop(key, None)
    name = f"{task.name}-best-{plan.space.name}"
    body = {
        "name": name,
        "description": f"best of {plan.num_samples} Optuna samples of {plan.space.name} ({plan.metric}, {plan.mode})",
        **run,
        "seeds": list(task.seeds),
    }
    path = results_path("best", f"{name}.yaml")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path
