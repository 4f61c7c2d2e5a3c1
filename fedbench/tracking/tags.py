"""MLflow tags fedbench writes and reads back, in one place: runs (tracking) and sweeps (tuning) share them."""

from __future__ import annotations

PARENT_RUN_TAG = "mlflow.parentRunId"
"""On a sweep's child run: its parent run's id (MLflow's own tag, so its UI nests the children)."""
SWEEP_TAG = "fedbench.sweep"
"""On a sweep's parent run: the sweep's name."""
TRIALS_TAG = "fedbench.trials"
"""On a sweep's parent run: how many trials the sweep plans."""
ATTEMPTS_TAG = "fedbench.attempts"
"""On a sweep's parent run: how many times the sweep was started (1, then one more per `--resume`)."""
TRIAL_KEY_TAG = "fedbench.trial_key"
"""On a sweep's child run: which trial it records (what `--resume` counts as done)."""
RETRIED_TAG = "fedbench.retried"
"""On a sweep's FAILED child run: an attempt of a trial whose process died and which Tune started again; the
trial's result is the next attempt's run, so neither the leaderboard nor `--resume` counts this one."""
STOPPED_EARLY_TAG = "fedbench.stopped_early"
"""On a sweep's child run that a scheduler stopped: after which round."""
FAILURE_REASON_TAG = "failure_reason"
"""On a FAILED run: why it failed, on one line (the type and message of the exception a client job raised)."""
FAILURE_TRACEBACK_ARTIFACT = "failure_traceback.txt"
"""A FAILED run's artifact: the traceback behind its `failure_reason`."""
