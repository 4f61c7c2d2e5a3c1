"""`fedbench sweep --address` on a two-node Ray cluster, logging to an `mlflow server` over PostgreSQL."""

import os
import subprocess
import sys

import pytest
import yaml
from mlflow.tracking import MlflowClient

from fedbench.tracking.tags import PARENT_RUN_TAG, SWEEP_TAG
from tests.conftest import TINY

pytestmark = [pytest.mark.ray, pytest.mark.mlflow_server, pytest.mark.timeout(300)]

FINAL_ACC = "final.acc_local_mean"


def test_a_sweep_on_two_nodes_runs_trials_on_both_and_logs_them_to_postgres(
    tmp_path, two_node_cluster, mlflow_server, postgres, monkeypatch
):
    # 2 CPUs a trial (0.5 driver + one 1.5-CPU client worker): a node holds one at a time, so two at once use both nodes
    task = {
        **TINY,
        "name": "two_nodes",
        "resources": {"client_cpus": 1.5},
        "seeds": [0],
        "grid": {"algorithm": ["fedavg", "local"], "scenario.alpha": [0.3, 3.0]},
    }
    task.pop("task")
    path = tmp_path / "two_nodes.yaml"
    path.write_text(yaml.safe_dump(task))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the cluster's setting: a client must use the same

    cli = subprocess.run(
        [sys.executable, "-m", "fedbench", "sweep", str(path), "--address", two_node_cluster.address],
        capture_output=True,
        text=True,
        timeout=240,
        env=os.environ.copy(),
    )
    assert cli.returncode == 0, cli.stdout[-3000:] + cli.stderr[-3000:]

    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name("two_nodes")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if SWEEP_TAG in r.data.tags]
    children = [r for r in runs if r.data.tags.get(PARENT_RUN_TAG) == parent.info.run_id]
    assert len(children) == 4 and {c.info.status for c in children} == {"FINISHED"}
    assert {c.data.tags["trial.node"] for c in children} == {two_node_cluster.head, two_node_cluster.worker}
    for child in children:  # the trial's client worker ran beside its driver, inside its placement group
        assert child.data.tags["workers.0.node"] == child.data.tags["trial.node"]
        assert child.data.tags["trial.worker_placement_groups"] == child.data.tags["trial.placement_group"]
        assert child.data.tags["clients.device"] == "cpu: 4 clients on 1 worker"

    # the numbers are in PostgreSQL itself, as MLflow's client reads them
    for child in children:
        history = client.get_metric_history(child.info.run_id, "acc_local_mean")
        assert [m.step for m in history] == [1, 2]
        ((stored,),) = postgres.query(
            f"SELECT value FROM latest_metrics WHERE run_uuid = '{child.info.run_id}' AND key = '{FINAL_ACC}'"
        )
        assert float(stored) == child.data.metrics[FINAL_ACC] and 0 < float(stored) <= 1
    statuses = postgres.query(f"SELECT status FROM runs WHERE experiment_id = {experiment.experiment_id}")
    assert sorted(s for (s,) in statuses) == ["FINISHED"] * 5  # the parent and its four children
