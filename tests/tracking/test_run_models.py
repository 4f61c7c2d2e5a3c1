"""A run logs its final model(s) as MLflow PyTorch models when asked (issue 47, item 15)."""

import io
import json

import numpy as np
import pytest
import torch
from rich.console import Console

import fedbench
from fedbench.core.errors import ConfigError
from fedbench.tracking.leaderboard import read_runs
from tests.conftest import TINY

TASK = {**{k: v for k, v in TINY.items() if k != "task"}, "name": "models", "seeds": [0], "log_models": True}


def test_a_global_models_run_logs_the_model_its_clients_evaluate_and_it_loads_back(mlflow_store, tmp_path):
    import mlflow.pytorch
    from mlflow.tracking import MlflowClient

    [result] = fedbench.run(TASK, console=Console(file=io.StringIO()))
    [(model, clients)] = result.models  # FedAvg: one global model, for every client
    assert clients == list(range(TASK["scenario"]["num_clients"]))
    uri = f"sqlite:///{mlflow_store}"
    [run_id] = read_runs("models", uri)["run_id"]
    client = MlflowClient(uri)
    assert {a.path for a in client.list_artifacts(run_id, "models")} == {"models/model_0", "models/clients.json"}
    loaded = mlflow.pytorch.load_model(client.download_artifacts(run_id, "models/model_0", str(tmp_path)))
    x = torch.rand(5, 1, 8, 8)  # digits
    assert np.allclose(loaded(x).detach().numpy(), model(x).detach().numpy())
    owners = json.loads(open(client.download_artifacts(run_id, "models/clients.json", str(tmp_path))).read())
    assert owners == {"model_0": clients}


def test_a_clustered_method_logs_a_model_per_cluster_and_a_sweep_refuses_the_option(mlflow_store):
    task = {**TASK, "algorithm": {"name": "ifca", "clusters": 2}, "rounds": 3}
    [result] = fedbench.run(task, console=Console(file=io.StringIO()), track=False)
    assert 1 <= len(result.models) <= 2 and sorted(c for _, cs in result.models for c in cs) == [0, 1, 2, 3]
    assert all(isinstance(model, torch.nn.Module) for model, _ in result.models)
    no_models = fedbench.run({**task, "log_models": False}, console=Console(file=io.StringIO()), track=False)
    assert no_models[0].models == []
    with pytest.raises(ConfigError, match="log_models: got True; allowed: false in a sweep"):
        fedbench.api.plan_sweep(TASK)
