"""The long per-round table: every logged point once, with the run's identity and configuration."""

from __future__ import annotations

import pandas as pd
from mlflow.tracking import MlflowClient

from fedbench.cli import main
from fedbench.runtime import run_spec
from fedbench.tracking.export import long_metrics
from fedbench.tracking.mlflow_callback import MlflowCallback
from tests.conftest import tiny_spec


def test_every_logged_point_is_one_row_with_its_run_and_configuration(mlflow_store, isolated_results):
    uri = f"sqlite:///{mlflow_store}"
    specs = [tiny_spec(task="export", algorithm=a, seed=s) for a in ("fedavg", "local") for s in (0, 1)]
    for spec in specs:
        run_spec(spec, [MlflowCallback(uri)])
    table = long_metrics("export", uri)
    assert set(table["run_hash"]) == {s.run_hash for s in specs}
    assert set(table["configuration"]) == {"fedavg", "local"} and "algorithm.name" in table
    assert not table["metric"].str.startswith(("final/", "total/")).any()
    client = MlflowClient(uri)
    run = client.search_runs([client.get_experiment_by_name("export").experiment_id])[0]
    mine = table[table["run_hash"] == run.data.params["run_hash"]]
    points = {(m.step, "acc_local_mean", m.value) for m in client.get_metric_history(run.info.run_id, "acc_local_mean")}
    assert {(r, k, v) for r, k, v in mine[mine["metric"] == "acc_local_mean"][["round", "metric", "value"]].itertuples(index=False)} == points

    assert main(["export", "--experiment", "export", "--format", "csv"]) == 0
    written = pd.read_csv(isolated_results / "exports" / "export-rounds.csv")
    assert len(written) == len(table) and not any(" " in c or "." in c for c in written.columns)
