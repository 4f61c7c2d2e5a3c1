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
from fedbench.tracking.leaderboard import DEFAULT_METRIC, IGNORED
from fedbench.tracking.tags import PARENT_RUN_TAG, SWEEP_TAG

VIEW_KEY = "fedbench"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
SHOWN_METRICS = (M.FINAL_PREFIX + M.ACC_LOCAL_MIN, M.FINAL_PREFIX + M.ACC_TEST_TIME, M.FINAL_PREFIX + M.ACC_SYSTEM)
"""Metrics shown beside the ranked one where the runs record them."""
RUNS_READ = 1000
"""Runs an experiment's view is made from (the newest): enough to see which fields vary."""


def comparison_view(client: Any, experiment_id: str, metric: str = DEFAULT_METRIC) -> dict[str, Any]:
    """The view of experiment `experiment_id`: sorted by `metric` (best first), its metrics and the varying fields
    as columns, every sweep's children shown."""
    runs = client.search_runs([experiment_id], max_results=RUNS_READ, order_by=["attributes.start_time DESC"])
    trained = [r for r in runs if "run_hash" in r.data.params]
    names = sorted({k for r in trained for k in r.data.params})
    varying = [
        name
        for name in names
        if name not in IGNORED
        and not name.startswith("resources.")
        and len({r.data.params.get(name) for r in trained}) > 1
    ]
    recorded = {k for r in trained for k in r.data.metrics}
    metrics = list(dict.fromkeys(m for m in (metric, *SHOWN_METRICS) if m in recorded or m == metric))
    columns = [f"metrics.`{m}`" for m in metrics] + [f"params.`{p}`" for p in [*varying, "seed"] if p in names]
    parents = {r.data.tags[PARENT_RUN_TAG] for r in runs if PARENT_RUN_TAG in r.data.tags}
    parents |= {r.info.run_id for r in runs if SWEEP_TAG in r.data.tags}
    return {
        "orderByKey": f"metrics.`{metric}`",
        "orderByAsc": False,
        "selectedColumns": columns,
        "runsExpanded": dict.fromkeys(sorted(parents), True),
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
        view = comparison_view(client, experiment.experiment_id, metric_of(experiment.name))
        client.set_experiment_tag(experiment.experiment_id, VIEW_TAG, json.dumps(view))
        page = f"{url}/#/experiments/{experiment.experiment_id}/runs?viewStateShareKey={VIEW_KEY}"
        pages.append((experiment.name, page))
    return pages
