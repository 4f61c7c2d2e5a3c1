"""Shared fixtures: every test writes results into its own tmp folder; Ray is started once, by us."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from fedbench.config import parse_run
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving_mlflow(backend_store_uri: str, artifacts: Path) -> Iterator[str]:
    """A real `mlflow server` subprocess on 127.0.0.1 (one worker, and no job runner, which these tests never use) over
    `backend_store_uri`; yields its URL once /health answers, and stops it by its process group."""
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_store_uri,
           "--artifacts-destination", str(artifacts), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    log = tempfile.TemporaryFile()  # not a pipe: a server logging more than a pipe holds would block
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.5)
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"mlflow server exited with {proc.returncode}: {log.read().decode()[-3000:]}")
        else:
            pytest.fail("mlflow server did not become healthy in 240 s")
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the server's own process group: only what this started
            proc.wait(timeout=30)
        log.close()


@pytest.fixture
def mlflow_server(tmp_path, migrated_store):
    """A real `mlflow server` on 127.0.0.1 over a copy of the migrated sqlite store."""
    shutil.copy(migrated_store, tmp_path / "server.db")
    with serving_mlflow(f"sqlite:///{tmp_path / 'server.db'}", tmp_path / "artifacts") as url:
        yield url
