"""The first screen `fedbench ui` opens on: each experiment's runs as a comparison, not a collapsed parent row.

MLflow's UI restores a view shared by an experiment tag, `mlflow.sharedViewState.<key>` (its JSON: the sort, the
columns, the expanded rows), when a runs page is opened with `?viewStateShareKey=<key>`. `fedbench ui` writes one
per experiment, key `fedbench`, and prints those addresses: the runs sorted by the final metric (a search's own
metric where the experiment's latest search recorded one), with the summary metrics and the fields that tell the
runs apart as columns. The UI says it is a shared view; a user's own saved view is left alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fedbench.core import metrics as M
from fedbench.tracking.leaderboard import DEFAULT_METRIC
from fedbench.tracking.tags import PARENT_RUN_TAG

VIEW_KEY = "fedbench"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
SHOWN_METRICS = (M.FINAL_PREFIX + M.ACC_LOCAL_MIN, M.FINAL_PREFIX + M.ACC_TEST_TIME, M.FINAL_PREFIX + M.ACC_SYSTEM)
"""Metrics shown beside the ranked one where the runs record them."""


def comparison_view(uri: str, experiment: str, metric: str = DEFAULT_METRIC) -> dict[str, Any]:
    """The view of `experiment` in the store at `uri`: sorted by `metric` (best first), its metrics and the varying
    fields and seed as columns, every sweep's children shown."""
    from fedbench.tracking.leaderboard import fedbench_runs, varying_params
    from fedbench.tracking.mlflow_store import MlflowStore, ui_column
    from fedbench.tracking.store import metric_columns, tag

    runs = fedbench_runs(MlflowStore(uri), experiment)
    recorded = set(metric_columns(runs))
    metrics = list(dict.fromkeys(m for m in (metric, *SHOWN_METRICS) if m in recorded or m == metric))
    fields = [*varying_params(runs), *(["seed"] if "seed" in runs else [])]
    parent = tag(PARENT_RUN_TAG)
    parents = sorted(set(runs[parent].dropna())) if parent in runs else []
    return {
        "orderByKey": ui_column(metric, metric=True),
        "orderByAsc": False,
        "selectedColumns": [ui_column(m, metric=True) for m in metrics] + [ui_column(f, metric=False) for f in fields],
        "runsExpanded": dict.fromkeys(parents, True),
    }


def share_views(
    uri: str, url: str, metric_of: Callable[[str], str] = lambda experiment: DEFAULT_METRIC, limit: int = 20
) -> list[tuple[str, str]]:
    """Write each of the store's experiments' comparison view (newest experiments first, `limit` of them), ranked by
    `metric_of(experiment)`, and return (experiment, the address that opens its runs page on it)."""
    from fedbench.tracking.patient_store import PatientClient

    client = PatientClient(uri)
    pages = []
    for experiment in client.search_experiments(max_results=limit, order_by=["creation_time DESC"]):
        if experiment.name == "Default":
            continue
        view = comparison_view(uri, experiment.name, metric_of(experiment.name))
        client.set_experiment_tag(experiment.experiment_id, VIEW_TAG, json.dumps(view))
        page = f"{url}/#/experiments/{experiment.experiment_id}/runs?viewStateShareKey={VIEW_KEY}"
        pages.append((experiment.name, page))
    return pages
