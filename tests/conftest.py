"""Shared fixtures: every test writes results into its own tmp folder; Ray is started once, by us."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedbench.config import parse_run
from fedbench.core.runspec import RunSpec
from fedbench.tracking.ui import serve_store

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
    return parse_run({**TINY, **changes})


@pytest.fixture(autouse=True)
def isolated_results(tmp_path, monkeypatch):
    """Results, the embedded MLflow store and caches go to a per-test folder, never the checkout's results/
    or the user's cache."""
    monkeypatch.setenv("FEDBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("FEDBENCH_CACHE", str(tmp_path / "cache"))
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


@contextlib.contextmanager
def serving_mlflow(backend_store_uri: str, artifacts: Path) -> Iterator[str]:
    """A real `mlflow server` subprocess on 127.0.0.1 over `backend_store_uri` (as `fedbench ui` starts one);
    yields its URL once /health answers, and stops it by its process group."""
    server = serve_store(backend_store_uri, artifacts, timeout_s=240)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def mlflow_server(tmp_path, migrated_store):
    """A real `mlflow server` on 127.0.0.1 over a copy of the migrated sqlite store."""
    shutil.copy(migrated_store, tmp_path / "server.db")
    with serving_mlflow(f"sqlite:///{tmp_path / 'server.db'}", tmp_path / "artifacts") as url:
        yield url


SLOW_BY_NATURE = ("ray", "mlflow_server")
"""Markers whose tests start Ray or an MLflow server (seconds each): the fast lane leaves them out like `slow`."""


def pytest_collection_modifyitems(config, items):
    """Mark as `slow` what the fast lane (`pytest -m "not slow"`) skips: tests marked `slow` by hand, those that
    start Ray or an MLflow server, and the cluster tests (PostgreSQL, several Ray nodes)."""
    for item in items:
        if any(item.get_closest_marker(m) for m in SLOW_BY_NATURE) or "tests/cluster/" in item.nodeid:
            item.add_marker(pytest.mark.slow)
