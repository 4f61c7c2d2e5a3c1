"""Fractional GPUs on the two-node cluster: client workers share the worker node's two simulated GPUs four
to a GPU inside their trial's placement group, train on CPU (torch sees no CUDA) and the run records it;
requests no node can hold are refused before any trial starts."""

from collections import Counter

import pytest
import yaml
from mlflow.tracking import MlflowClient

from fedbench.config import load_task
from fedbench.core.errors import ConfigError
from fedbench.tracking.tags import PARENT_RUN_TAG
from fedbench.tuning import make_plan, run_sweep
from tests.conftest import TINY

pytestmark = [pytest.mark.ray, pytest.mark.mlflow_server, pytest.mark.timeout(300)]

WORKERS = 8


def plan_for(tmp_path, name: str, resources: dict):
    task = {
        **TINY,
        "name": name,
        "rounds": 1,
        "resources": resources,
        "scenario": {**TINY["scenario"], "num_clients": WORKERS},
    }
    task.pop("task")
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(task))
    return make_plan(load_task(path))


def test_eight_quarter_gpu_workers_share_two_simulated_gpus_four_each_and_train_on_cpu(
    tmp_path, two_node_cluster, mlflow_server, monkeypatch
):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    plan = plan_for(tmp_path, "quarter_gpus", {"client_cpus": 0.25, "client_gpus": 0.25, "num_workers": WORKERS})
    outcome = run_sweep(plan)
    assert [r.status for r in outcome.results] == ["FINISHED"], [r.reason for r in outcome.results]

    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name("quarter_gpus")
    (child,) = [
        r
        for r in client.search_runs([experiment.experiment_id])
        if r.data.tags.get(PARENT_RUN_TAG) == outcome.parent_run_id
    ]
    tags = child.data.tags
    workers = [{key: tags[f"workers.{i}.{key}"] for key in ("node", "gpu_ids", "device")} for i in range(WORKERS)]
    assert f"workers.{WORKERS}.node" not in tags
    assert Counter(w["gpu_ids"] for w in workers) == {"0": 4, "1": 4}  # one GPU id each, four workers per GPU
    assert {w["node"] for w in workers} == {two_node_cluster.worker}  # the only node with GPUs
    assert {w["device"] for w in workers} == {"cpu"}  # simulated GPUs: torch sees no CUDA
    assert tags["clients.device"] == f"cpu: {WORKERS} clients on {WORKERS} workers (simulated GPUs 0,1)"
    assert tags["trial.worker_placement_groups"] == ",".join([tags["trial.placement_group"]] * WORKERS)
    assert tags["trial.client_gpus"] == "0.25"


@pytest.mark.parametrize(
    "resources,refusal",
    [
        (
            {"client_gpus": 1.5},
            r"resources\.client_gpus: got 1\.5; allowed: 0 \(no GPU\), a share of one GPU in \(0, 1\] "
            r"or a whole number of GPUs; the Ray cluster has 2 nodes \(.*2 GPU",
        ),
        (
            {
                "client_cpus": 0.25,
                "client_gpus": 0.5,
                "num_workers": WORKERS,
            },  # 4 GPUs for the trial, the cluster has 2
            r"resources\.client_gpus: got 0\.5.*needs 2\.5 CPU, 4 GPU, the cluster has 5 CPU, 2 GPU in all",
        ),
        ({"client_gpus": 3}, r"resources\.client_gpus: got 3.*has 5 CPU, 2 GPU in all"),
        (
            {"client_cpus": 4},
            r"resources\.client_cpus: got 4.*one Ray node can hold: one client worker needs 4 CPU, 0 GPU, "
            r"the cluster has 2 nodes",
        ),  # 5 CPUs in all, but no node has 4
    ],
)
def test_a_gpu_share_or_worker_no_node_can_hold_is_refused_before_any_trial(
    tmp_path, two_node_cluster, mlflow_server, monkeypatch, resources, refusal
):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    plan = plan_for(tmp_path, "refused_gpus", resources)
    with pytest.raises(ConfigError, match=refusal):
        run_sweep(plan)
    assert MlflowClient(mlflow_server).get_experiment_by_name("refused_gpus") is None  # nothing was started
