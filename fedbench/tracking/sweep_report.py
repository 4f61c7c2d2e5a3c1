"""What a finished sweep leaves on its MLflow parent run, so the UI tells the whole story on one page: the
task's own fields as params, its description (also the experiment's), the leaderboard, the plots and, where its
methods ran in several scenarios, their ranking across them."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mlflow.entities import Param

from fedbench.core.errors import ConfigError, FedbenchError
from fedbench.core.runspec import flatten
from fedbench.tracking.leaderboard import build_leaderboard, read_runs, to_markdown
from fedbench.tracking.patient_store import PatientClient
from fedbench.tracking.plots import plot_experiment
from fedbench.tracking.rank_report import rank_experiment
from fedbench.tracking.tags import MAX_PARAM_LENGTH

log = logging.getLogger(__name__)

DESCRIPTION_TAG = "mlflow.note.content"
"""The tag MLflow's UI shows as a run's or an experiment's description."""


def report_sweep(
    uri: str, experiment: str, parent_run_id: str, task: dict[str, Any], description: str, out: Path
) -> list[str]:
    """Log the task (its fields, grid and seeds as params, its description), the leaderboard (`leaderboard.md`),
    the plots (`plots/`) and the ranking across scenarios (`ranking/`) on the parent run; returns what was logged.
    Nothing here can fail the sweep: a part that cannot be made (no finished run to rank) is skipped with a
    warning, the ranking silently where the sweep has fewer than two methods in two scenarios."""
    client = PatientClient(uri)
    logged = []
    params = {k: str(v)[:MAX_PARAM_LENGTH] for k, v in flatten(task).items()}
    client.log_batch(parent_run_id, params=[Param(k, v) for k, v in sorted(params.items())])
    logged.append(f"{len(params)} task params")
    if description:
        client.set_tag(parent_run_id, DESCRIPTION_TAG, description)
        client.set_experiment_tag(client.get_experiment_by_name(experiment).experiment_id, DESCRIPTION_TAG, description)
        logged.append("description")
    try:
        client.log_text(parent_run_id, to_markdown(build_leaderboard(read_runs(experiment, uri))), "leaderboard.md")
        logged.append("leaderboard.md")
        plots = plot_experiment(experiment, uri, out)
        logged += [f"plots/{p.name}" for p in plots.files]
    except FedbenchError as exc:
        log.warning("sweep report: %s", exc)
    try:
        ranked = rank_experiment(experiment, uri, out / "ranking")
        logged += [f"ranking/{p.name}" for p in ranked.files]
    except ConfigError as exc:  # one scenario or one method: nothing to rank across
        log.info("sweep report: no ranking across scenarios: %s", exc)
    return logged
