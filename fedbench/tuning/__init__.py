"""Sweeps: every RunSpec of a task (or every Optuna sample of a search space) as one Ray Tune trial, its
client actors inside the trial's placement group."""

from fedbench.tuning.best_task import write_best_task
from fedbench.tuning.launch import execute_sweep, plan_sweep
from fedbench.tuning.plan import SweepPlan, make_plan
from fedbench.tuning.search_space import SearchSpace, load_search_space
from fedbench.tuning.sweep import SweepOutcome, run_sweep

__all__ = ["SearchSpace", "SweepOutcome", "SweepPlan", "execute_sweep", "load_search_space", "make_plan",
           "plan_sweep", "run_sweep", "write_best_task"]
