"""`fedbench ui`: MLflow's UI over the results store on 127.0.0.1, stopped with the command."""

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from mlflow.tracking import MlflowClient

from fedbench.cli import main

pytestmark = pytest.mark.mlflow_server


def test_the_ui_serves_the_store_at_the_printed_address_and_stops_with_the_command(tmp_path, migrated_store):
    shutil.copy(migrated_store, tmp_path / "mlflow.db")
    experiment = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").create_experiment("study")
    env = {**os.environ, "FEDBENCH_RESULTS": str(tmp_path)}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedbench", "ui"], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        line = proc.stdout.readline()  # printed once the server answers
        assert f"MLflow UI over sqlite:///{tmp_path}/mlflow.db: http://127.0.0.1:" in line, line
        url = line.split(": ", 1)[1].split()[0]
        assert '"Model training"' in proc.stdout.readline()
        assert proc.stdout.readline().split() == ["study:", f"{url}/#/experiments/{experiment}/runs"]
        assert urllib.request.urlopen(f"{url}/health", timeout=5).status == 200
        search = urllib.request.urlopen(f"{url}/ajax-api/2.0/mlflow/experiments/search?max_results=5", timeout=5)
        assert b'"Default"' in search.read()  # the store's own experiment list
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        deadline = time.time() + 30
        while time.time() < deadline:  # the server it started is gone with it
            try:
                urllib.request.urlopen(f"{url}/health", timeout=1)
            except OSError:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the UI server at {url} still answers after `fedbench ui` stopped")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the command's own process group: only what this test started


def test_a_store_that_does_not_exist_is_refused_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FEDBENCH_RESULTS", str(tmp_path / "empty"))
    assert main(["ui"]) == 2
    assert "error: store: got 'sqlite:///" in capsys.readouterr().out
