"""MLflow logging against the real stores: an sqlite file and a real `mlflow server` on 127.0.0.1."""

import shutil
from pathlib import Path

import mlflow
import pytest
import yaml
from mlflow.tracking import MlflowClient

from fedbench.core import metrics as M
from fedbench.core.callbacks import RunResult
from fedbench.runtime import run_spec
from fedbench.runtime.placement import placement_tags
from fedbench.tracking.mlflow_callback import MlflowCallback
from fedbench.tracking.paths import tracking_uri
from tests.conftest import tiny_spec


def check_logged(uri: str, spec, result):
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(spec.task)
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["algorithm.name"] == spec.algorithm.name
    assert run.data.params["run_hash"] == spec.run_hash
    assert run.data.params["scenario.alpha"] == str(spec.scenario.partition.kwargs["alpha"])
    history = client.get_metric_history(run.info.run_id, M.ACC_LOCAL_MEAN)
    assert [m.step for m in history] == list(range(1, spec.rounds + 1))
    assert [m.value for m in history] == [r[M.ACC_LOCAL_MEAN] for r in result.history]
    assert run.data.metrics[M.TOTAL_PREFIX + M.COMM_UP_BYTES] == result.final[M.TOTAL_PREFIX + M.COMM_UP_BYTES] > 0
    assert run.data.metrics[M.TOTAL_PREFIX + M.TIME_CLIENT_COMPUTE_S] > 0
    assert run.data.tags["clients.device"] == f"cpu: {spec.scenario.num_clients} clients on 1 worker"
    path = client.download_artifacts(run.info.run_id, "runspec.yaml")
    with open(path) as f:
        assert yaml.safe_load(f) == spec.to_dict()


def test_runs_land_in_the_embedded_sqlite_store_under_results(isolated_results, mlflow_store):
    spec = tiny_spec(rounds=2)
    result = run_spec(spec, [MlflowCallback()])
    assert (isolated_results / "mlflow.db").is_file()
    uri = f"sqlite:///{isolated_results / 'mlflow.db'}"
    check_logged(uri, spec, result)
    mlflow.set_tracking_uri(uri)
    try:
        frame = mlflow.search_runs(experiment_names=["tiny"])
    finally:
        mlflow.set_tracking_uri(None)
    assert len(frame) == 1 and frame.loc[0, f"metrics.{M.TOTAL_PREFIX}{M.COMM_DOWN_BYTES}"] > 0


def test_a_failed_run_is_marked_failed_with_its_reason_and_others_stay_intact(isolated_results, mlflow_store):
    good = run_spec(tiny_spec(), [MlflowCallback()])
    bad = run_spec(tiny_spec(seed=1, optimizer={"lr": 1e30}), [MlflowCallback()])
    assert (good.status, bad.status) == ("FINISHED", "FAILED")
    client = MlflowClient(f"sqlite:///{isolated_results / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tiny")
    runs = {r.data.params["seed"]: r for r in client.search_runs([experiment.experiment_id])}
    assert runs["0"].info.status == "FINISHED"
    assert len(client.get_metric_history(runs["0"].info.run_id, M.ACC_LOCAL_MEAN)) == 2
    assert runs["1"].info.status == "FAILED"
    assert "ClientDivergedError" in runs["1"].data.tags["failure_reason"]


def test_mlflow_tracking_uri_environment_variable_wins(tmp_path, monkeypatch, migrated_store):
    shutil.copy(migrated_store, tmp_path / "elsewhere.db")
    uri = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    spec = tiny_spec(rounds=1)
    result = run_spec(spec, [MlflowCallback()])
    check_logged(uri, spec, result)


@pytest.mark.mlflow_server
def test_runs_log_to_a_real_mlflow_server(mlflow_server, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    spec = tiny_spec(rounds=2)
    result = run_spec(spec, [MlflowCallback()])
    check_logged(mlflow_server, spec, result)


def test_a_failed_runs_traceback_is_an_artifact(isolated_results, mlflow_store):
    result = run_spec(tiny_spec(rounds=1, optimizer={"lr": 1e30}), [MlflowCallback()])
    client = MlflowClient(f"sqlite:///{isolated_results / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    trace = Path(client.download_artifacts(run.info.run_id, "failure_traceback.txt")).read_text()
    assert trace == result.traceback and "ClientDivergedError" in trace
    assert run.data.tags["failure_reason"] == result.reason and "\n" not in result.reason


def _create_experiment_after(barrier, uri: str, name: str, ids) -> None:
    """In a child process: connect, wait for the others, then create-or-get `name` at the same moment."""
    from fedbench.tracking.mlflow_callback import experiment_id_for

    client = MlflowClient(uri)
    client.search_experiments(max_results=1)  # connected before the race starts
    barrier.wait(timeout=120)
    ids.put(experiment_id_for(client, name))


@pytest.mark.slow
def test_processes_creating_one_new_experiment_at_once_all_get_it(tmp_path, migrated_store):
    import multiprocessing

    shutil.copy(migrated_store, tmp_path / "race.db")
    uri = f"sqlite:///{tmp_path / 'race.db'}"
    context = multiprocessing.get_context("spawn")
    barrier, ids = context.Barrier(4), context.Queue()
    processes = [context.Process(target=_create_experiment_after, args=(barrier, uri, "raced", ids)) for _ in range(4)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=180)
    assert [p.exitcode for p in processes] == [0] * 4  # none failed on the UNIQUE constraint
    got = [ids.get(timeout=5) for _ in processes]
    assert len(set(got)) == 1 and got[0] == MlflowClient(uri).get_experiment_by_name("raced").experiment_id


def test_experiments_are_created_as_model_training_experiments(isolated_results, mlflow_store):
    from fedbench.tracking.mlflow_callback import experiment_id_for

    client = MlflowClient(f"sqlite:///{mlflow_store}")
    experiment = client.get_experiment(experiment_id_for(client, "kind"))
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"


def test_a_run_on_many_workers_gets_every_placement_tag(mlflow_store):
    """Three tags per worker: more than MLflow takes in one batch."""
    spec = tiny_spec()
    places = [{"node": f"node{i % 4}", "gpu_ids": str(i % 8), "device": "cuda", "mps": "yes"} for i in range(64)]
    callback = MlflowCallback()
    callback.on_run_start(spec)
    callback.on_run_end(RunResult(spec, "FINISHED", tags=placement_tags(places, 10_000)))
    tags = MlflowClient(tracking_uri()).get_run(callback.run_id).data.tags
    assert tags["workers.63.gpu_ids"] == "7" and tags["workers.0.node"] == "node0"
    assert tags["clients.device"] == "cuda: 10000 clients on 64 workers (GPUs 0,1,2,3,4,5,6,7, MPS)"


def mlflow_chart_order(keys) -> list[str]:
    """The order MLflow 3's run page draws a run's metric charts in (its JS, `RunsChartsCard` state set up from
    the metric keys): a section per prefix before a '/', those sections sorted, and then the unprefixed keys'
    "Model metrics" section; the keys sorted within each section."""
    prefixed = sorted(k for k in keys if "/" in k)
    by_section = sorted(prefixed, key=lambda k: (k.split("/")[0], k))
    return by_section + sorted(k for k in keys if "/" not in k)


def test_a_runs_charts_open_on_its_accuracy_curves_and_its_summaries_stay_searchable(isolated_results, mlflow_store):
    """MLflow's chart view used to open on single-bar charts of the `final/*` and `total/*` summaries, each titled
    like the curve it summarises. Now the first charts are per-round curves and each summary has its own title,
    and `metrics.final.<key>` still finds runs by their summary."""
    spec = tiny_spec(rounds=2)
    run_spec(spec, [MlflowCallback()])
    uri = f"sqlite:///{isolated_results / 'mlflow.db'}"
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    keys = list(run.data.metrics)
    summaries = [k for k in keys if M.is_summary(k)]
    assert summaries and all("/" not in k for k in keys)
    order = mlflow_chart_order(keys)
    curves = [k for k in order if len(client.get_metric_history(run.info.run_id, k)) == spec.rounds]
    assert order[0] == M.ACC_LOCAL_MEAN and order.index(M.ACC_LOCAL_MEAN) < min(order.index(k) for k in summaries)
    assert all(order.index(k) < order.index(summaries[0]) for k in curves if k.startswith("acc"))

    def title(key):
        return key.split("/")[-1]

    assert not {title(k) for k in summaries} & {title(k) for k in curves}
    mlflow.set_tracking_uri(uri)
    try:
        found = mlflow.search_runs(
            experiment_names=["tiny"], filter_string=f"metrics.{M.FINAL_PREFIX}{M.ACC_LOCAL_MEAN} >= 0"
        )
    finally:
        mlflow.set_tracking_uri(None)
    assert len(found) == 1
