"""Ditto: the global model is FedAvg's bit for bit; the personal model is FedProx's job from the received global
model in a client's first round, Local's at lam = 0, pinned to the received global model as lam grows; clients
evaluate their personal models, and nothing personal travels."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fedbench.algorithms.base import NoClientState, make_algorithm
from fedbench.algorithms.local import LocalClientState
from fedbench.algorithms.personal import PersonalClientState
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult, OptimizerSpec, Payload, RoundContext
from fedbench.runtime import run_spec
from fedbench.training import evaluate
from tests.conftest import tiny_spec


def algorithm(name: str, **config):
    spec = tiny_spec(algorithm={"name": name, **config}, scenario={"partition": "iid", "num_clients": 3})
    return make_algorithm(spec, (1, 8, 8), 10)


def context(cid: int, round: int, lr: float = 0.05, momentum: float = 0.9, **changes) -> RoundContext:
    return RoundContext(
        round=round,
        client_id=cid,
        seed=0,
        local_epochs=1,
        batch_size=32,
        optimizer=OptimizerSpec(lr=lr, momentum=momentum),
        num_classes=10,
        **changes,
    )


def play(alg, clients, round, state, client_states, sampled=(0, 1, 2)):
    """One round: configure, the sampled clients train, aggregate; returns (results, new state)."""
    downlinks = alg.configure(round, state, list(sampled))
    results = []
    for cid in sampled:
        uplink, client_states[cid], metrics = alg.client_update(
            downlinks[cid], client_states[cid], clients[cid], context(cid, round)
        )
        results.append(ClientResult(cid, uplink, metrics))
    return results, alg.aggregate(round, state, results)


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def fresh(alg) -> list:
    """Three clients' states before their first job."""
    return [alg.ClientState() for _ in range(3)]


def distance(a: dict, b: dict) -> float:
    return float(np.sqrt(sum(((a[k] - b[k]) ** 2).sum() for k in a)))


def test_global_model_and_uplink_are_fedavgs_bit_for_bit(clients):
    ditto, fedavg = algorithm("ditto"), algorithm("fedavg")
    d_state, f_state = ditto.init_state(), fedavg.init_state()
    d_clients, f_clients = fresh(ditto), fresh(fedavg)
    for round in (1, 2):
        d_results, d_state = play(ditto, clients, round, d_state, d_clients)
        f_results, f_state = play(fedavg, clients, round, f_state, f_clients)
        for d, f in zip(d_results, f_results, strict=True):
            assert d.uplink.sections.keys() == f.uplink.sections.keys()  # only the global model and the count
            assert all(same(d.uplink[s], f.uplink[s]) for s in f.uplink.sections)
            assert d.uplink.nbytes == f.uplink.nbytes
            assert d.metrics == f.metrics  # the reported training loss is the global job's
        assert same(d_state.global_model.weights, f_state.global_model.weights)
    assert not same(d_clients[0].personal, d_state.global_model.weights)


def test_first_personal_job_is_fedprox_from_the_received_global_model(clients):
    """In a client's first round v_k starts at w^t and the proximal term pulls to w^t (not to the model the
    global job just trained): exactly FedProx's local job with mu = lam."""
    ditto, fedprox = algorithm("ditto", lam=0.7), algorithm("fedprox", mu=0.7)
    start = ditto.init_state().global_model
    _, state, _ = ditto.client_update(start, PersonalClientState(), clients[1], context(1, 1))
    uplink, _, _ = fedprox.client_update(start, NoClientState(), clients[1], context(1, 1))
    assert same(state.personal, uplink.weights)


def test_lam_zero_personal_model_is_locals_bit_for_bit(clients):
    ditto, local = algorithm("ditto", lam=0.0), algorithm("local")
    d_state, l_state = ditto.init_state(), local.init_state()
    d_clients, l_clients = fresh(ditto), fresh(local)
    for round in (1, 2):  # round 2 continues from the client state, and the global model has moved on
        _, d_state = play(ditto, clients, round, d_state, d_clients)
        _, l_state = play(local, clients, round, l_state, l_clients)
    assert all(same(d_clients[c].personal, l_clients[c].model) for c in range(3))


def test_personal_model_is_pinned_to_the_received_global_model_as_lam_grows(clients):
    """Ditto Sec. 3.1: lam -> infinity gives the global model. Plain SGD, so the pull is easy to read: at
    lr * lam = 1 each step lands at w^t - lr * gradient."""
    free = algorithm("ditto", lam=0.0)
    state, client_states = free.init_state(), fresh(free)
    _, state = play(free, clients, 1, state, client_states)
    received = state.global_model
    assert distance(client_states[0].personal, received.weights) > 0.5  # v_k starts far from w^2

    def gap(lam: float, lr: float) -> float:
        job = context(0, 2, lr=lr, momentum=0.0)
        _, personal, _ = algorithm("ditto", lam=lam).client_update(received, client_states[0], clients[0], job)
        return distance(personal.personal, received.weights)

    gaps = [gap(lam, 0.01) for lam in (0.0, 1.0, 10.0, 100.0)]
    assert all(a > b for a, b in zip(gaps, gaps[1:], strict=False))
    assert gaps[-1] < 0.05 * gaps[0]
    assert gap(1e6, 1e-6) < 1e-4 < 0.5 < gap(0.0, 1e-6)


def test_personal_epochs_set_the_personal_jobs_length(clients):
    """personal_epochs replaces the run's job (local_steps included) by that many epochs of the same stream."""
    start = algorithm("ditto").init_state().global_model
    job = context(2, 1, local_steps=3)
    ditto = algorithm("ditto", lam=0.0, personal_epochs=2)
    _, state, _ = ditto.client_update(start, PersonalClientState(), clients[2], job)
    epochs = dataclasses.replace(job, local_epochs=2, local_steps=None)
    _, local, _ = algorithm("local").client_update(Payload(), LocalClientState(), clients[2], epochs)
    assert same(state.personal, local.model)
    ditto = algorithm("ditto", lam=0.0)  # personal_epochs None: the run's 3 steps
    _, steps, _ = ditto.client_update(start, PersonalClientState(), clients[2], job)
    _, local, _ = algorithm("local").client_update(Payload(), LocalClientState(), clients[2], job)
    assert same(steps.personal, local.model)


def test_clients_evaluate_their_personal_model_and_the_never_sampled_the_global_one(clients):
    alg = algorithm("ditto")
    state, client_states = alg.init_state(), fresh(alg)
    _, state = play(alg, clients, 1, state, client_states, sampled=(0, 2))
    payloads = alg.evaluation_payloads(state, [0, 1, 2])
    assert not payloads[0].sections and not payloads[2].sections  # nothing to download
    assert payloads[1] is state.global_model
    personal = alg.client_evaluate(payloads[0], client_states[0], clients[0], context(0, 1))
    assert personal == evaluate(alg.model_with(client_states[0].personal), clients[0])
    assert personal != evaluate(alg.model_with(state.global_model.weights), clients[0])
    fallback = alg.client_evaluate(payloads[1], client_states[1], clients[1], context(1, 1))
    assert fallback == evaluate(alg.model_with(state.global_model.weights), clients[1])


def test_configs():
    assert tiny_spec(algorithm="ditto").algorithm.kwargs == {
        "client_fraction": 1.0,
        "lam": 1.0,
        "personal_epochs": None,
    }
    for field, value in (("lam", -0.1), ("lam", float("inf")), ("personal_epochs", 0)):
        with pytest.raises(ConfigError) as err:
            tiny_spec(algorithm={"name": "ditto", field: value})
        assert err.value.field == f"algorithm.{field}"


def test_whole_run_sends_fedavgs_bytes_and_votes_with_the_personal_models():
    ditto = run_spec(tiny_spec(algorithm="ditto", rounds=2))
    fedavg = run_spec(tiny_spec(algorithm="fedavg", rounds=2))
    assert ditto.status == "FINISHED", ditto.reason
    for key in (M.COMM_UP_BYTES, M.COMM_DOWN_BYTES):
        assert [r[key] for r in ditto.history] == [r[key] for r in fedavg.history]
    assert ditto.history[0][M.COMM_EVAL_DOWN_BYTES] == 0  # every client evaluates the personal model it has
    assert M.FINAL_PREFIX + M.ACC_TEST_TIME in ditto.final  # test-time clients get the global model
    # system accuracy: every client uploads its personal model once after the last round, as evaluation traffic
    assert M.FINAL_PREFIX + M.ACC_SYSTEM in ditto.final
    model_bytes = fedavg.history[0][M.COMM_DOWN_BYTES] / 4
    assert [r[M.COMM_EVAL_UP_BYTES] for r in ditto.history] == [0.0, 4 * model_bytes]
    assert fedavg.history[-1][M.COMM_EVAL_UP_BYTES] == 0.0
    assert 0.3 < ditto.final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] <= 1.0
