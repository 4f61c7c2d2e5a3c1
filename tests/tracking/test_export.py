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
    assert not table["metric"].str.startswith(("final.", "total.")).any()
    client = MlflowClient(uri)
    run = client.search_runs([client.get_experiment_by_name("export").experiment_id])[0]
    mine = table[table["run_hash"] == run.data.params["run_hash"]]
    points = {(m.step, "acc_local_mean", m.value) for m in client.get_metric_history(run.info.run_id, "acc_local_mean")}
    assert {
        (r, k, v)
        for r, k, v in mine[mine["metric"] == "acc_local_mean"][["round", "metric", "value"]].itertuples(index=False)
    } == points

    assert main(["export", "--experiment", "export", "--format", "csv"]) == 0
    written = pd.read_csv(isolated_results / "exports" / "export-rounds.csv")
    assert len(written) == len(table) and not any(" " in c or "." in c for c in written.columns)


def test_the_per_client_export_holds_every_clients_numbers_each_evaluated_round(mlflow_store, isolated_results, capsys):
    """Issue 31, item 1: a run's per-client table is its artifact; its means are the run's logged means."""
    import numpy as np

    from fedbench.tracking.per_client import per_client_runs

    uri = f"sqlite:///{mlflow_store}"
    specs = [tiny_spec(task="clients", algorithm=a, rounds=3, eval_every=2) for a in ("fedavg", "ditto")]
    results = [run_spec(spec, [MlflowCallback(uri)]) for spec in specs]
    found = per_client_runs("clients", uri)
    table = found.table
    assert found.without == 0 and set(table["configuration"]) == {"fedavg", "ditto"}
    assert sorted(table["round"].unique()) == [2, 3] and sorted(table["client"].unique()) == [0, 1, 2, 3]  # eval_every
    for spec, result in zip(specs, results, strict=True):
        mine = table[table["run_hash"] == spec.run_hash]
        for record in result.history:
            if "acc_local_mean" in record:
                at = mine[mine["round"] == record["round"]]
                assert np.isclose(at["acc_local"].mean(), record["acc_local_mean"], rtol=0, atol=1e-12)
                assert np.isclose(at["acc_local"].min(), record["acc_local_min"], rtol=0, atol=1e-12)
                assert np.isclose(at["train_loss"].mean(), record["train_loss_mean"], rtol=0, atol=1e-12)
    assert main(["export", "--experiment", "clients", "--per-client", "--format", "parquet"]) == 0
    written = pd.read_parquet(isolated_results / "exports" / "clients-clients.parquet")
    assert len(written) == 2 * 2 * 4 and {"acc_local", "test_samples", "train_samples", "train_loss"} <= set(written)
    assert "16 rows (2 runs, 4 clients)" in capsys.readouterr().out


def test_the_format_asked_for_is_written_where_the_out_file_has_no_table_suffix(tmp_path):
    from fedbench.tracking.export import write_table

    table = pd.DataFrame({"final.acc": [0.5, 0.75]})
    pd.read_parquet(write_table(table, tmp_path / "rounds", "parquet"))  # --format parquet --out rounds
    assert list(pd.read_csv(write_table(table, tmp_path / "rounds.csv", "parquet"))["final_acc"]) == [0.5, 0.75]
    assert list(pd.read_parquet(write_table(table, tmp_path / "rounds.parquet"))["final_acc"]) == [0.5, 0.75]
