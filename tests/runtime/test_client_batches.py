"""Several clients' jobs in one call to a Ray worker: the numbers of one job per call and of the serial backend, bit
for bit, and a dead worker's call re-run from the clients' stored states."""

import dataclasses

import numpy as np
import pytest

from fedbench.algorithms import make_algorithm
from fedbench.core.types import Payload
from fedbench.data import load_dataset
from fedbench.runtime import Federation
from fedbench.runtime.backends.serial import SerialBackend
from fedbench.runtime.evaluation import EVALUATE
from fedbench.runtime.jobs import FIT
from fedbench.runtime.state_store import StateStore
from fedbench.scenarios import build_scenario
from tests.conftest import tiny_spec
from tests.runtime.test_ray_backend import deterministic
from tests.runtime.test_worker_faults import KillsItsReader, KillWhenBusy

pytestmark = pytest.mark.ray

CLIENTS = 12
RAY = {"backend": "ray", "num_workers": 2}


def batched_spec(**changes):
    # ditto keeps a personal model in each client's state: a state crossing to the wrong client would show
    return tiny_spec(
        **{
            "algorithm": "ditto",
            "rounds": 2,
            "seed": 5,
            "resources": RAY,
            "scenario": {"partition": "iid", "num_clients": CLIENTS},
            **changes,
        }
    )


def run_rounds(backend, spec, scenario, dataset, resolve=lambda state: state):
    """Two rounds of fit (listed and streamed) and evaluate; returns every uplink, metric and final state."""
    algorithm = make_algorithm(spec, scenario.input_shape, dataset.num_classes)
    state, store, seen, everyone = algorithm.init_state(), StateStore(), [], list(range(CLIENTS))
    for round, how in ((1, "run"), (2, "stream")):
        results = list(getattr(backend, how)(FIT, round, algorithm.configure(round, state, everyone), store))
        evals = backend.run(EVALUATE, round, algorithm.evaluation_payloads(state, everyone), store)
        seen += [(r.client_id, r.uplink.weights, r.metrics) for r in results]
        seen += [(r.client_id, r.metrics) for r in evals]
        state = algorithm.aggregate(round, state, results)
    return seen, state.global_model.weights, [resolve(store.get(cid)) for cid in range(CLIENTS)]


def assert_identical(a, b):
    """Equal, with every numpy array equal bit for bit (and of the same dtype)."""
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_identical(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_identical(x, y)
    elif isinstance(a, Payload):
        assert_identical(a.weights, b.weights)
    elif dataclasses.is_dataclass(a):  # a client state
        assert type(a) is type(b)
        for f in dataclasses.fields(a):
            assert_identical(getattr(a, f.name), getattr(b, f.name))
    else:
        assert a == b


def test_several_clients_per_call_give_the_numbers_of_one_per_call_and_of_serial(ray_session):
    from fedbench.runtime.ray_pool import RayBackend, RayWorkerPool

    spec = batched_spec()
    dataset = load_dataset("digits")
    scenario = build_scenario(dataset, spec.scenario, spec.seed, spec.rounds)
    serial = run_rounds(SerialBackend(dataset, scenario, spec), spec, scenario, dataset)
    pool = RayWorkerPool(spec.resources, CLIENTS)
    try:
        for clients_per_job in (1, 5):
            backend = RayBackend(dataset, scenario, spec, pool, clients_per_job=clients_per_job)
            on_ray = run_rounds(backend, spec, scenario, dataset, resolve=lambda ref: ray_session.get(ref))
            assert_identical(on_ray, serial)
    finally:
        pool.close()


def test_a_run_batched_automatically_has_the_numbers_of_an_unbatched_one(ray_session, monkeypatch):
    from fedbench.runtime import ray_pool

    calls = []
    submit = ray_pool.RayBackend._submit
    monkeypatch.setattr(
        ray_pool.RayBackend,
        "_submit",
        lambda self, worker, kind, round, clients, *rest: (
            calls.append(len(clients)) or submit(self, worker, kind, round, clients, *rest)
        ),
    )
    # fedavg: its fit results are streamed and folded; 48 clients of about 30 digits each
    spec = batched_spec(algorithm="fedavg", rounds=3, scenario={"partition": "iid", "num_clients": 48})
    monkeypatch.setattr(ray_pool, "JOB_SECONDS_TARGET", 0.0)  # one client per call
    single = Federation(spec).run()
    assert set(calls) == {1}
    unbatched, calls[:] = len(calls), []
    monkeypatch.setattr(ray_pool, "JOB_SECONDS_TARGET", 1e9)  # as many per call as the round's balance allows
    batched = Federation(spec).run()
    assert max(calls) > 1 and len(calls) < unbatched / 2 and sum(calls) == unbatched
    serial = Federation(spec, backend="serial").run()
    assert single.status == batched.status == serial.status == "FINISHED", (single.reason, batched.reason)
    assert deterministic(batched.history) == deterministic(single.history) == deterministic(serial.history)


def test_a_worker_killed_in_a_batched_call_is_replaced_and_the_run_ends_as_if_undisturbed(
    ray_session, monkeypatch, caplog
):
    from fedbench.runtime import ray_pool

    monkeypatch.setattr(ray_pool, "JOB_SECONDS_TARGET", 1e9)
    spec = batched_spec(rounds=3, scenario={"partition": "iid", "num_clients": 24})
    pool = ray_pool.RayWorkerPool(spec.resources, 24)
    try:
        victim = ray_session.get(pool.workers[0].pid.remote())
        killer = KillWhenBusy(victim, after=1)
        with caplog.at_level("WARNING", logger=ray_pool.__name__):
            disturbed = Federation(spec, callbacks=[killer], pool=pool).run()
        killer.killer.join(timeout=60)
        pids = ray_session.get([w.pid.remote() for w in pool.workers])
    finally:
        pool.close()
    assert disturbed.status == "FINISHED", disturbed.reason
    assert "a client worker died running the fit jobs of clients [" in caplog.text, caplog.text
    assert victim not in pids
    assert deterministic(disturbed.history) == deterministic(Federation(spec, backend="serial").run().history)


def test_a_client_that_kills_its_workers_is_found_in_its_batch_and_named(ray_session):
    from fedbench.core.errors import WorkerLostError
    from fedbench.runtime.failures import failure_reason
    from fedbench.runtime.ray_pool import JOB_ATTEMPTS, RayBackend, RayWorkerPool

    spec = batched_spec()
    dataset = load_dataset("digits")
    scenario = build_scenario(dataset, spec.scenario, spec.seed, spec.rounds)
    algorithm = make_algorithm(spec, scenario.input_shape, dataset.num_classes)
    payloads = dict(algorithm.configure(1, algorithm.init_state(), list(range(8))))
    payloads[2] = Payload({"poison": np.zeros(1)}, {"poison": {"reader": KillsItsReader()}})
    pool = RayWorkerPool(spec.resources, CLIENTS)
    backend = RayBackend(dataset, scenario, spec, pool, clients_per_job=4)  # client 2's first call has 3 others
    try:
        with pytest.raises(WorkerLostError) as lost:
            backend.run(FIT, 1, payloads, StateStore())
    finally:
        pool.close()
    assert failure_reason(lost.value).startswith(
        f"WorkerLostError: client 2's fit job of round 1 ran on {JOB_ATTEMPTS} client workers"
    )
