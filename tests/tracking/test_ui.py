"""`fedbench ui`: MLflow's UI over the results store on 127.0.0.1, stopped with the command."""

import json
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
        assert "best first" in proc.stdout.readline()
        page = f"{url}/#/experiments/{experiment}/runs?viewStateShareKey=fedbench"
        assert proc.stdout.readline().split() == ["study:", page]  # opens on the view the experiment's tag holds
        tags = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").get_experiment(experiment).tags
        assert json.loads(tags["mlflow.sharedViewState.fedbench"])["orderByKey"] == "metrics.`final.acc_local_mean`"
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


def test_an_experiments_view_ranks_by_its_metric_with_the_fields_that_tell_runs_apart(mlflow_store):
    """`fedbench ui` opened on a collapsed parent row without a metric column (issue 47, item 9): the shared view
    sorts every run by the final metric, shows the sweep's children and the varying fields and seed as columns."""
    from fedbench.runtime import run_spec
    from fedbench.tracking.mlflow_callback import MlflowCallback
    from fedbench.tracking.sweep_runs import SweepRuns
    from fedbench.tracking.ui_views import comparison_view
    from tests.conftest import tiny_spec

    uri = f"sqlite:///{mlflow_store}"
    parent = SweepRuns(uri, "tiny").start_parent("tiny-0123abcd", 2).run_id
    client = MlflowClient(uri)
    for algorithm in ("fedavg", "local"):
        callback = MlflowCallback(uri)
        run_spec(tiny_spec(algorithm=algorithm, rounds=1), [callback])
        client.set_tag(callback.run_id, "mlflow.parentRunId", parent)  # as a sweep's trial
    view = comparison_view(uri, "tiny")
    assert view["orderByKey"] == "metrics.`final.acc_local_mean`" and view["orderByAsc"] is False
    columns = view["selectedColumns"]  # the UI groups them: metrics, then parameters
    assert columns[:2] == ["metrics.`final.acc_local_mean`", "metrics.`final.acc_local_min`"]
    assert columns[-2:] == ["params.`algorithm.name`", "params.`seed`"]  # what tells the runs apart, and the seed
    assert view["runsExpanded"] == {parent: True}
