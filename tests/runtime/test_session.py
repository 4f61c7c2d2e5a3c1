"""Several RunSpecs in a row: each with its own callbacks, a failed run does not stop the others."""

import threading

import pytest

from fedbench.core.callbacks import Callback
from fedbench.core.errors import ConfigError
from fedbench.runtime.session import run_specs
from tests.conftest import tiny_spec


class Ended(Callback):
    def __init__(self, position: int, seen: list):
        self.position, self.seen = position, seen

    def on_run_end(self, result) -> None:
        self.seen.append((self.position, result.spec.seed, result.status))


def test_runs_go_on_past_a_failed_run_each_with_the_callbacks_made_for_it():
    specs = [tiny_spec(seed=5, optimizer={"name": "sgd", "lr": 1e30}), tiny_spec(seed=0)]
    seen = []
    results = run_specs(specs, lambda i, spec: [Ended(i, seen)])
    assert [r.status for r in results] == ["FAILED", "FINISHED"]
    assert seen == [(1, 5, "FAILED"), (2, 0, "FINISHED")]


@pytest.mark.ray
def test_on_ray_the_first_runs_mlflow_store_opens_while_ray_starts_and_records_the_run(ray_session, mlflow_store):
    """The first run's callbacks are made on a thread (MLflow opens its store there) and used on this one."""
    from mlflow.tracking import MlflowClient
    from rich.console import Console

    from fedbench.tracking.paths import tracking_uri
    from fedbench.tracking.run_callbacks import run_callbacks

    make, threads = run_callbacks(2, Console(quiet=True)), []

    def callbacks(i, spec):
        threads.append(threading.current_thread().name)
        return make(i, spec)

    specs = [tiny_spec(seed=s, resources={"backend": "ray", "client_cpus": 1}) for s in (0, 1)]
    results = run_specs(specs, callbacks)
    assert [r.status for r in results] == ["FINISHED", "FINISHED"], [r.reason for r in results]
    assert threads[0].startswith("fedbench-ahead") and threads[1] == threading.main_thread().name
    client = MlflowClient(tracking_uri())
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert sorted(r.info.status for r in runs) == ["FINISHED", "FINISHED"]
    assert all(r.data.metrics["final/acc_local_mean"] > 0 for r in runs)


@pytest.mark.ray
def test_on_ray_callbacks_that_cannot_be_made_stop_the_task_before_any_run(ray_session):
    started = []

    class Started(Callback):
        def on_run_start(self, spec) -> None:
            started.append(spec.seed)

    def callbacks(i, spec):
        if i == 1:
            raise ConfigError("MLFLOW_TRACKING_URI", "http://127.0.0.1:9", "a reachable MLflow tracking server")
        return [Started()]

    specs = [tiny_spec(seed=s, resources={"backend": "ray", "client_cpus": 1}) for s in (0, 1)]
    with pytest.raises(ConfigError, match="MLFLOW_TRACKING_URI"):
        run_specs(specs, callbacks)
    assert started == [] and ray_session.is_initialized()  # a Ray the caller started is left running


@pytest.mark.ray
def test_on_ray_a_dataset_that_fails_to_load_fails_its_run_and_the_next_runs(ray_session, tmp_path):
    """The dataset is loaded ahead while Ray starts; its error is still the run's, reported in its result."""
    seen = []
    missing = tiny_spec(seed=0, dataset={"name": "mnist", "data_root": str(tmp_path)},
                        resources={"backend": "ray", "client_cpus": 1})
    results = run_specs([missing, tiny_spec(seed=1, resources={"backend": "ray", "client_cpus": 1})],
                        lambda i, spec: [Ended(i, seen)])
    assert [r.status for r in results] == ["FAILED", "FINISHED"]
    assert results[0].reason.startswith("DataMissingError") and seen == [(1, 0, "FAILED"), (2, 1, "FINISHED")]
