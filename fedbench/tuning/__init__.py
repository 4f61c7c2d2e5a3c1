"""Sweeps: every RunSpec of a task (or every Optuna sample of a search space) as one Ray Tune trial, its
client actors inside the trial's placement group.

The names below are imported from their modules on first use, so that planning a sweep (`fedbench sweep
--dry-run`, which imports `tuning.plan`) loads neither Ray Tune, Optuna nor MLflow.
"""

from __future__ import annotations

import importlib
from typing import Any

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


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
