"""Sweeps: every RunSpec of a task (or every Optuna sample of a search space) as one Ray Tune trial, its
client actors inside the trial's placement group.

The names below are imported from their modules on first use, so that planning a sweep (`fedbench sweep
--dry-run`, which imports `tuning.plan`) loads neither Ray Tune, Optuna nor MLflow.
"""

from __future__ import annotations

from fedbench.core.lazy import lazy_exports

_MODULE_OF = {
    "SearchSpace": "search_space",
    "SweepOutcome": "sweep",
    "SweepPlan": "plan",
    "execute_sweep": "launch",
    "load_search_space": "search_space",
    "make_plan": "plan",
    "plan_sweep": "plan",
    "run_sweep": "sweep",
    "write_best_task": "best_task",
}

__all__ = sorted(_MODULE_OF)
__getattr__, __dir__ = lazy_exports(__name__, {name: f"{__name__}.{module}" for name, module in _MODULE_OF.items()})
