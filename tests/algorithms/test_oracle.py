"""Oracle (001 Sec. IV-C): FedAvg within ground-truth clusters, told by RoundContext.distribution_id."""

from __future__ import annotations

import numpy as np
import pytest

from fedbench.algorithms.base import SAMPLES, ModelBuilder, NoClientState, reported_cluster
from fedbench.algorithms.capabilities import TrainedOn
from fedbench.algorithms.oracle import Oracle
from fedbench.config.task import resolve_run
from fedbench.core import metrics as M
from fedbench.core.types import WEIGHTS, ClientResult, OptimizerSpec, Payload, RoundContext
from fedbench.runtime import run_spec
from fedbench.training import average_weights, materialize
from tests.scenarios.helpers import make


def ctx_for(client_id: int, distribution_id: int, round: int = 1) -> RoundContext:
    return RoundContext(
        round=round,
        client_id=client_id,
        seed=0,
        local_epochs=1,
        batch_size=32,
        optimizer=OptimizerSpec(lr=0.05, momentum=0.9),
        num_classes=10,
        distribution_id=distribution_id,
    )


def label_shift_clients():
    """001 E1 with K = 2 on digits, 2 clients per cluster: clients 0, 1 see classes 0-4, clients 2, 3 classes 5-9."""
    data, scenario = make({"partition": "class_clusters", "clusters": 2, "num_clients": 4}, "digits")
    views = [scenario.view(1, c) for c in range(4)]
    return [materialize(data, v, scenario.input_shape) for v in views], [v.distribution_id for v in views]


def oracle() -> Oracle:
    return Oracle(Oracle.Config(), ModelBuilder("mlp", (1, 8, 8), 10, (("hidden", (32,)),)), 4, seed=0)


def describe(alg: Oracle, state, clients, ids, r: int):
    """The round's first exchange: every client reports the distribution it holds."""
    requests = alg.round_describe_payloads(r, state, list(range(len(clients))))
    described = [
        ClientResult(c, alg.client_describe_round(requests[c], NoClientState(), clients[c], ctx_for(c, ids[c], r))[0])
        for c in sorted(requests)
    ]
    return alg.receive_descriptions(r, state, described)


def play(alg: Oracle, clients, ids, rounds: int):
    state, uplinks = alg.init_state(), []
    for r in range(1, rounds + 1):
        state = describe(alg, state, clients, ids, r)
        payloads = alg.configure(r, state, list(range(len(clients))))
        results = [
            ClientResult(c, alg.client_update(payloads[c], NoClientState(), client, ctx_for(c, ids[c], r))[0])
            for c, client in enumerate(clients)
        ]
        uplinks.append(results)
        state = alg.aggregate(r, state, results)
    return state, uplinks


def test_clients_of_a_cluster_share_one_model_and_clusters_differ():
    clients, ids = label_shift_clients()
    assert ids == [0, 0, 1, 1]
    alg = oracle()
    state, uplinks = play(alg, clients, ids, rounds=2)
    # Round 1: everyone starts from the initial model; round 2: each client gets its cluster's model.
    models = alg.evaluation_payloads(state, [0, 1, 2, 3])
    assert models[0] is models[1] and models[2] is models[3]
    assert not np.allclose(models[0].weights["head.weight"], models[2].weights["head.weight"])
    # A cluster's model is FedAvg over exactly its members' updates.
    last = uplinks[-1]
    members = [r.uplink.weights for r in last[:2]]
    expected = average_weights(members, [int(r.uplink[SAMPLES]["n"][0]) for r in last[:2]])
    assert all(np.array_equal(models[0].weights[k], expected[k]) for k in expected)
    # The training uplink is FedAvg's; the cluster id came in the round's first exchange, one int.
    assert set(last[0].uplink.sections) == {WEIGHTS, SAMPLES}
    told = alg.client_describe_round(Payload(), NoClientState(), clients[2], ctx_for(2, ids[2]))[0]
    assert reported_cluster(told) == ids[2] and told.nbytes == 8


def test_first_round_sends_the_initial_model_to_everyone():
    clients, ids = label_shift_clients()
    alg = oracle()
    state = describe(alg, alg.init_state(), clients, ids, 1)
    payloads = alg.configure(1, state, [0, 1, 2, 3])
    assert all(p is state.initial for p in payloads.values())


def test_a_client_that_drifts_trains_its_new_clusters_model_in_the_round_it_drifts():
    """The ceiling under drift: client 0 moves from cluster 0 to cluster 1 in round 3; in round 3 it is sent
    cluster 1's model (not its old cluster's), and its update is averaged into cluster 1 only."""
    clients, ids = label_shift_clients()
    alg = oracle()
    state, _ = play(alg, clients, ids, rounds=2)
    before = {k: m for k, m in state.models.items()}
    drifted = [clients[2], clients[1], clients[2], clients[3]]  # client 0 now holds client 2's data
    now = [1, 0, 1, 1]
    state = describe(alg, state, drifted, now, 3)
    payloads = alg.configure(3, state, [0, 1, 2, 3])
    assert payloads[0] is before[1] and payloads[1] is before[0]
    results = [
        ClientResult(c, alg.client_update(payloads[c], NoClientState(), client, ctx_for(c, now[c], 3))[0])
        for c, client in enumerate(drifted)
    ]
    state = alg.aggregate(3, state, results)
    sizes = [int(results[c].uplink[SAMPLES]["n"][0]) for c in (0, 2, 3)]
    cluster_1 = average_weights([results[c].uplink.weights for c in (0, 2, 3)], sizes)
    assert all(np.array_equal(state.models[1].weights[k], cluster_1[k]) for k in cluster_1)
    assert all(np.array_equal(state.models[0].weights[k], results[1].uplink.weights[k]) for k in cluster_1)


def test_test_clients_get_their_clusters_model_and_unseen_ones_the_initial_model():
    clients, ids = label_shift_clients()
    alg = oracle()
    state, _ = play(alg, clients, ids, rounds=1)
    descriptions = {
        0: alg.client_describe(Payload(), clients[3], ctx_for(0, 1)),
        1: alg.client_describe(Payload(), clients[0], ctx_for(1, 7)),
    }
    assignment = alg.assign(state, descriptions)
    assert assignment.payloads[0] is state.models[1] and assignment.matched == {0: TrainedOn(2)}
    assert assignment.payloads[1] is state.initial


def test_without_a_distribution_id_the_oracle_refuses_to_run():
    clients, _ = label_shift_clients()
    alg = oracle()
    with pytest.raises(ValueError, match="distribution id"):
        alg.client_describe_round(Payload(), NoClientState(), clients[0], ctx_for(0, -1))


def test_whole_run_on_label_shift_beats_fedavg_and_associates_every_test_client():
    def run(algorithm: str):
        return run_spec(
            resolve_run(
                {
                    "task": "t",
                    "dataset": "digits",
                    "model": {"name": "mlp", "hidden": [32]},
                    "algorithm": algorithm,
                    "rounds": 4,
                    "scenario": {"preset": "conditional/E1", "clusters": 2},
                    "local_epochs": 3,
                    "batch_size": 32,
                    "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
                }
            )
        )

    ours, fedavg = run("oracle"), run("fedavg")
    assert ours.status == "FINISHED", ours.reason
    assert ours.final[M.FINAL_PREFIX + M.ACC_ASSOCIATION] == 1.0
    assert ours.final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] > fedavg.final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] + 0.1
