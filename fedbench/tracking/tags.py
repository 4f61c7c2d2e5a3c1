"""MLflow tags fedbench writes and reads back, in one place: runs (tracking) and sweeps (tuning) share them."""

from __future__ import annotations

SWEEP_TAG = "fedbench.sweep"
"""On a sweep's parent run: the sweep's name."""
FAILURE_REASON_TAG = "failure_reason"
"""On a FAILED run: why it failed (the exception's type and message)."""


def latest_sweep_run(client, experiment_id: str, name: str | None = None):
    """The experiment's most recently started sweep parent run (of sweep `name`, or of any sweep); None if none."""
    where = f"tags.`{SWEEP_TAG}` = '{name}'" if name is not None else f"tags.`{SWEEP_TAG}` LIKE '%'"
    runs = client.search_runs([experiment_id], where, order_by=["start_time DESC"], max_results=1)
    return runs[0] if runs else None
