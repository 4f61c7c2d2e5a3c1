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
LEASE_TAG = "fedbench.lease"
"""On a sweep's parent run while a process runs it: that process's host, pid and last heartbeat (`sweep_lease`)."""
REFERENCE_TAG = "fedbench.search_reference"
"""On a search's child run of a reference (an algorithm its space lists with nothing to tune): `true`."""
TRIAL_KEY_TAG = "fedbench.trial_key"
"""On a sweep's child run: which trial it records (what `--resume` counts as done)."""
RETRIED_TAG = "fedbench.retried"
"""On a sweep's FAILED child run: an attempt of a trial whose process died and which Tune started again; the
trial's result is the next attempt's run, so neither the leaderboard nor `--resume` counts this one."""
STOPPED_EARLY_TAG = "fedbench.stopped_early"
"""On a sweep's child run that a scheduler stopped: after which round."""
STOPPED_TAG = "fedbench.stopped"
"""On a run stopped before its end (Ctrl-C, SIGTERM, a full disk): why and after which round; it is KILLED."""
BUNDLED_FROM_TAG = "fedbench.bundled_from"
"""On a run `fedbench unbundle` added: its run id in the store it was bundled from, so that the same bundle taken
twice adds nothing the second time (`run_bundle`)."""
FAILURE_REASON_TAG = "failure_reason"
"""On a FAILED run: why it failed, on one line (the type and message of the exception a client job raised)."""
FAILURE_TRACEBACK_ARTIFACT = "failure_traceback.txt"
"""A FAILED run's artifact: the traceback behind its `failure_reason`."""
MAX_PARAM_LENGTH = 6000
"""A run parameter's value is cut to this many characters (MLflow's limit on a param's value)."""
