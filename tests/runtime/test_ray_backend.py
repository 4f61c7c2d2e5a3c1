"""The Ray backend: real actors in separate processes, and the same numbers as the serial backend."""

import os

import pytest

from fedbench.algorithms import make_algorithm
from fedbench.data import load_dataset
from fedbench.runtime import Federation
from fedbench.runtime.jobs import FIT
from fedbench.runtime.state_store import StateStore
from fedbench.scenarios import build_scenario
from tests.conftest import tiny_spec

pytestmark = pytest.mark.ray


def deterministic(history):
    return [{k: v for k, v in record.items() if not k.startswith("time_")} for record in history]


SHIFTED = {  # drifting label banks, colour (grayscale -> RGB) and per-batch random noise on the workers
    "dataset": {"name": "synthetic_images", "size": 12, "train_samples": 600, "test_samples": 100},
    "scenario": {
        "partition": "class_bank",
        "banks": 4,
        "num_clients": 4,
        "drift_every": 1,
        "shifts": [{"name": "feature_bank", "rotations": 2, "colours": True}, {"name": "noise", "sigma": 0.3}],
    },
}


@pytest.mark.parametrize("algorithm,changes", [("fedavg", {}), ("local", {}), ("fedavg", SHIFTED)])
def test_ray_gives_the_same_metrics_as_serial(ray_session, algorithm, changes):
    spec = tiny_spec(algorithm=algorithm, rounds=3, seed=7, **changes)
    serial = Federation(spec, backend="serial").run()
    on_ray = Federation(spec, backend="ray").run()
    assert serial.status == on_ray.status == "FINISHED", (serial.reason, on_ray.reason)
    assert deterministic(on_ray.history) == deterministic(serial.history)


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "fedrep", "head_epochs": 1},  # the vote's models: the body it holds, completed by the clients' heads
        {"name": "ditto", "client_fraction": 0.5},  # personal models, and the global one for clients never sampled
        {"name": "fedem", "components": 2},  # K models down and up, a mixture evaluated with the client's pi
        {"name": "dac", "neighbours": 2},  # peer-to-peer through the relay, requests and similarities in the state
    ],
)
def test_ray_gives_the_same_metrics_and_bytes_as_serial_for_every_kind_of_method(ray_session, algorithm):
    spec = tiny_spec(algorithm=algorithm, rounds=3, seed=7)
    serial = Federation(spec, backend="serial").run()
    on_ray = Federation(spec, backend="ray").run()
    assert serial.status == on_ray.status == "FINISHED", (serial.reason, on_ray.reason)
    assert deterministic(on_ray.history) == deterministic(serial.history)


def test_clients_run_in_at_least_two_actor_processes(ray_session):
    federation = Federation(tiny_spec(resources={"backend": "ray", "num_workers": 2}))
    result = federation.run()
    assert result.status == "FINISHED", result.reason
    assert len(set(federation.worker_pids)) == 2
    assert os.getpid() not in federation.worker_pids


def test_a_failure_on_a_ray_worker_fails_only_that_run(ray_session):
    bad = Federation(tiny_spec(optimizer={"lr": 1e30}), backend="ray").run()
    good = Federation(tiny_spec(), backend="ray").run()
    assert bad.status == "FAILED" and "ClientDivergedError" in bad.reason
    assert good.status == "FINISHED"


def test_a_shared_pool_serves_consecutive_runs_with_the_same_numbers(ray_session):
    from fedbench.runtime.ray_pool import RayWorkerPool

    spec = tiny_spec(resources={"backend": "ray", "num_workers": 2})
    pool = RayWorkerPool(spec.resources, spec.scenario.num_clients)
    try:
        first = Federation(spec, pool=pool)
        shared = first.run()
        second = Federation(tiny_spec(algorithm="local", resources={"backend": "ray", "num_workers": 2}), pool=pool)
        assert second.run().status == "FINISHED"
        assert first.worker_pids == second.worker_pids  # the same actors, not new processes
    finally:
        pool.close()
    fresh = Federation(spec).run()
    assert deterministic(shared.history) == deterministic(fresh.history)


def test_a_payload_shared_by_several_clients_is_put_once(ray_session, monkeypatch):
    from fedbench.runtime.ray_pool import RayBackend

    spec = tiny_spec(resources={"backend": "ray", "num_workers": 2})
    dataset = load_dataset("digits")
    scenario = build_scenario(dataset, spec.scenario, spec.seed, spec.rounds)
    algorithm = make_algorithm(spec, scenario.input_shape, dataset.num_classes)
    state = algorithm.init_state()
    payloads = algorithm.configure(1, state, [0, 1, 2, 3])
    backend = RayBackend(dataset, scenario, spec)
    try:
        put, shipped = ray_session.put, []
        monkeypatch.setattr(ray_session, "put", lambda value, **kwargs: shipped.append(value) or put(value, **kwargs))
        results = backend.run(FIT, 1, payloads, StateStore())
    finally:
        backend.close()
    assert shipped == [state.global_model]  # one object for the four clients
    assert [r.client_id for r in results] == [0, 1, 2, 3] and all(r.uplink.weights for r in results)


def test_a_failure_on_a_ray_worker_is_reported_by_its_cause_on_one_line(ray_session):
    bad = Federation(tiny_spec(optimizer={"lr": 1e30}), backend="ray").run()
    assert bad.reason.startswith("ClientDivergedError: client ") and "\n" not in bad.reason and "\x1b" not in bad.reason
    assert "ray::ClientWorker.run()" in bad.traceback and "\x1b" not in bad.traceback


def test_a_worker_no_node_could_hold_is_refused_naming_the_field(ray_session):
    """Ray would keep such an actor pending forever ("No available node types can fulfill resource request")."""
    from fedbench.core.errors import ConfigError
    from fedbench.core.runspec import ResourceSpec
    from fedbench.runtime.ray_pool import RayWorkerPool
    from fedbench.runtime.session import run_specs

    gpus = int(ray_session.cluster_resources().get("GPU", 0)) + 1
    with pytest.raises(ConfigError, match=rf"resources.client_gpus: got {gpus}.*the cluster has 2 CPU, {gpus - 1} GPU"):
        RayWorkerPool(ResourceSpec(backend="ray", client_gpus=gpus), 4)
    with pytest.raises(ConfigError, match=r"resources.client_cpus: got 100.*the cluster has 2 CPU"):
        run_specs([tiny_spec(resources={"backend": "ray", "client_cpus": 100})], lambda i, spec: [])


def test_workers_waiting_for_busy_resources_say_so(ray_session, monkeypatch, caplog):
    import threading

    from fedbench.runtime import ray_resources
    from fedbench.runtime.ray_pool import RayWorkerPool

    monkeypatch.setattr(ray_resources, "WAIT_NOTICE_S", 0.5)
    spec = tiny_spec(resources={"backend": "ray", "client_cpus": 2, "num_workers": 1})  # the whole session's CPUs
    dataset = load_dataset("digits")
    scenario = build_scenario(dataset, spec.scenario, spec.seed, spec.rounds)
    holder = RayWorkerPool(spec.resources, 1)
    holder.load(dataset, scenario, spec)
    waiter = RayWorkerPool(spec.resources, 1)
    loading = threading.Thread(target=waiter.load, args=(dataset, scenario, spec))
    try:
        with caplog.at_level("WARNING", logger=ray_resources.__name__):
            loading.start()
            loading.join(timeout=5)
            assert loading.is_alive()  # waiting for the CPUs the holder has
            holder.close()
            loading.join(timeout=60)
        assert not loading.is_alive()
        assert "for 1 of 1 client workers to start (each needs 2 CPU, 0 GPU)" in caplog.text
    finally:
        holder.close()
        waiter.close()
