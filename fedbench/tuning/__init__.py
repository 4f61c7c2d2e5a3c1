"""Sweeps: every RunSpec of a task as one Ray Tune trial, its client actors inside the trial's placement group."""

from fedbench.tuning.sweep import SweepOutcome, run_sweep

__all__ = ["SweepOutcome", "run_sweep"]
