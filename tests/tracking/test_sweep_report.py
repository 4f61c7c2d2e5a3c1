"""A finished sweep's parent run carries the task, its description, the leaderboard and the plots."""

from __future__ import annotations

from mlflow.tracking import MlflowClient

from fedbench.runtime import run_spec
from fedbench.tracking.mlflow_callback import MlflowCallback
from fedbench.tracking.sweep_report import DESCRIPTION_TAG, report_sweep
from fedbench.tracking.sweep_runs import SweepRuns
from tests.conftest import TINY, tiny_spec


def test_the_parent_run_tells_the_whole_story(mlflow_store, isolated_results):
    uri = f"sqlite:///{mlflow_store}"
    parent = SweepRuns(uri, "story").start_parent("story-1", 2)
    for algorithm in ("fedavg", "local"):
        run_spec(tiny_spec(task="story", algorithm=algorithm), [MlflowCallback(uri)])
    task = {**TINY, "grid": {"algorithm": ["fedavg", "local"]}, "seeds": [0]}
    logged = report_sweep(
        uri, "story", parent.run_id, task, "FedAvg against local training", isolated_results / "plots"
    )
    client = MlflowClient(uri)
    run = client.get_run(parent.run_id)
    assert run.data.params["scenario.alpha"] == "0.5" and run.data.params["grid.algorithm"] == "['fedavg', 'local']"
    assert run.data.tags[DESCRIPTION_TAG] == "FedAvg against local training"
    assert client.get_experiment_by_name("story").tags[DESCRIPTION_TAG] == "FedAvg against local training"
    artifacts = {a.path for a in client.list_artifacts(parent.run_id)} | {
        a.path for a in client.list_artifacts(parent.run_id, "plots")
    }
    assert {"leaderboard.md", "plots/curves_acc_local_mean.png", "plots/clients_final_acc_local.png"} <= artifacts
    assert "plots/heatmap_final_acc_local_mean.png" not in artifacts  # one scenario: a one-column heatmap says nothing
    assert "leaderboard.md" in logged
    assert not any(path.startswith("ranking/") for path in logged)  # one scenario: nothing to rank across


def test_a_sweep_over_scenarios_carries_the_ranking_across_them(mlflow_store, isolated_results):
    uri = f"sqlite:///{mlflow_store}"
    parent = SweepRuns(uri, "across").start_parent("across-1", 4)
    for alpha in (0.5, 2.0):
        for algorithm in ("fedavg", "local"):
            scenario = {**TINY["scenario"], "alpha": alpha}
            run_spec(tiny_spec(task="across", algorithm=algorithm, scenario=scenario), [MlflowCallback(uri)])
    task = {**TINY, "grid": {"algorithm": ["fedavg", "local"], "scenario.alpha": [0.5, 2.0]}, "seeds": [0]}
    logged = report_sweep(uri, "across", parent.run_id, task, "", isolated_results / "plots")
    assert {"ranking/ranking.md", "ranking/cd_diagram.png", "ranking/aggregate.png"} <= set(logged)
    artifacts = {a.path for a in MlflowClient(uri).list_artifacts(parent.run_id, "ranking")}
    assert artifacts == {"ranking/ranking.md", "ranking/cd_diagram.png", "ranking/aggregate.png"}
