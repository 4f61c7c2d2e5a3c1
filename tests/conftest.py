"""Shared fixtures: every test writes results into its own tmp folder; Ray is started once, by us."""

from __future__ import annotations

import os
import shutil

import pytest

from fedbench.core.runspec import RunSpec

TINY = {
    "task": "tiny",
    "dataset": "digits",
    "model": {"name": "mlp", "hidden": [32]},
    "scenario": {"partition": "dirichlet", "alpha": 0.5, "num_clients": 4},
    "rounds": 2,
    "local_epochs": 1,
    "batch_size": 32,
    "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
}


def tiny_spec(**changes) -> RunSpec:
    """A small, fast RunSpec on digits; keyword arguments replace top-level fields."""
    return RunSpec.from_dict({**TINY, **changes})


@pytest.fixture(autouse=True)
def isolated_results(tmp_path, monkeypatch):
    """Results and the embedded MLflow store go to a per-test folder, never the checkout's results/."""
    monkeypatch.setenv("FEDBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path / "results"


@pytest.fixture(scope="session")
def migrated_store(tmp_path_factory):
    """An empty MLflow sqlite store with its schema migrations already run (8-70 s on these machines):
    tests copy it instead of migrating a fresh store each."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow_template") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def mlflow_store(isolated_results, migrated_store):
    """The default store `results/mlflow.db` of this test, ready to use."""
    isolated_results.mkdir(parents=True, exist_ok=True)
    target = isolated_results / "mlflow.db"
    shutil.copy(migrated_store, target)
    return target


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray with 2 CPUs for the whole session, shut down by the handle we hold (never `ray stop`)."""
    import ray

    from fedbench.runtime.ray_pool import ensure_ray

    if ray.is_initialized():
        yield ray
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ensure_ray(num_cpus=2)
    yield ray
    ray.shutdown()
