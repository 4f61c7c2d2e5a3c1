"""DAC: similarity 1/loss, the 2-hop approximation, softmax sampling, sample-count averaging, and that clients
come to ask their own cluster."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from fedbench.algorithms.base import SAMPLES, counted, make_algorithm
from fedbench.algorithms.dac import REQUEST, SIMILARITY, DACClientState, sample_neighbours, temperature, two_hop
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult, OptimizerSpec, Payload, RoundContext
from fedbench.runtime import run_spec
from fedbench.training import average_weights, materialize, training_loss
from tests.algorithms.conftest import MODEL_BYTES
from tests.conftest import tiny_spec
from tests.scenarios.helpers import make

TWO_CLUSTERS = {"partition": "class_clusters", "clusters": 2, "num_clients": 8}
"""8 digits clients: 0-3 hold classes 0-4, 4-7 classes 5-9 (001 E1 with K = 2)."""


@pytest.fixture(scope="module")
def two_clusters():
    data, scenario = make(TWO_CLUSTERS, dataset="digits")
    clients = [materialize(data, scenario.view(1, c), scenario.input_shape) for c in range(8)]
    return clients, [scenario.view(1, c).distribution_id for c in range(8)]


def dac(num_clients: int, **config):
    spec = tiny_spec(algorithm={"name": "dac", **config}, scenario={**TWO_CLUSTERS, "num_clients": num_clients})
    return make_algorithm(spec, (1, 8, 8), 10)


def context(cid: int, round: int) -> RoundContext:
    return RoundContext(
        round=round,
        client_id=cid,
        seed=0,
        local_epochs=1,
        batch_size=32,
        optimizer=OptimizerSpec(lr=0.05, momentum=0.9),
        num_classes=10,
    )


def test_two_hop_borrows_from_the_most_similar_neighbour_and_keeps_measured_values():
    similarity = np.array([0.0, 0.5, 0.2, 0.0, 0.0, 0.0])
    contacted = np.array([False, True, True, False, False, False])
    heard = {
        1: np.array([0.9, 0.0, 0.99, 0.7, 0.0, 0.0]),  # 1 is closer to client 0 than 2 is
        2: np.array([0.4, 0.0, 0.0, 0.3, 0.6, 0.0]),
    }
    out = two_hop(similarity, contacted, heard, client=0)
    # 3: both know it, 1 (0.5 > 0.2) lends 0.7; 4: only 2 knows it; 5: nobody; 2: measured, kept; 0: itself
    np.testing.assert_array_equal(out, [0.0, 0.5, 0.2, 0.7, 0.6, 0.0])
    assert two_hop(similarity, contacted, {}, client=0) is not similarity


def test_neighbours_are_drawn_by_softmax_of_tau_times_similarity():
    rng = np.random.default_rng(0)
    similarity = np.array([5.0, math.log(3.0), 0.0, 0.0])  # p over 1, 2, 3 at tau 1: 3/5, 1/5, 1/5
    first = [int(sample_neighbours(similarity, 0, 1.0, 1, rng)[0]) for _ in range(20000)]
    assert 0 not in first  # never itself, however similar its own entry
    assert np.bincount(first, minlength=4)[1] / len(first) == pytest.approx(0.6, abs=0.015)
    pairs = [tuple(sample_neighbours(similarity, 0, 1.0, 2, rng)) for _ in range(20000)]
    # successive draws: P({2, 3}) = 1/5 * 1/4 + 1/5 * 1/4 = 0.1
    assert pairs.count((2, 3)) / len(pairs) == pytest.approx(0.1, abs=0.01)
    assert all(len(set(p)) == 2 for p in pairs)
    extreme = np.array([0.0, 1e12, 1e12 - 1e6, 0.0])  # underflows a plain softmax; still n distinct peers
    assert set(sample_neighbours(extreme, 0, 30.0, 3, rng)) == {1, 2, 3}


def test_temperature_schedules():
    assert temperature(30.0, "constant", 7) == 30.0
    assert temperature(30.0, "sigmoid", 0) == 1.0
    assert temperature(30.0, "sigmoid", 100) == pytest.approx(31.0, abs=1e-6)


def test_the_exchange_measures_similarities_and_averages_by_sample_count(two_clusters):
    clients, _ = two_clusters
    alg = dac(8)
    rng = np.random.default_rng(1)
    shapes = alg.initial_weights()
    models = [{k: rng.normal(scale=0.3, size=v.shape).astype(v.dtype) for k, v in shapes.items()} for _ in range(3)]
    known_by_5 = np.zeros(8)
    known_by_5[6] = 0.25
    received = Payload(
        peers={
            2: counted(models[1], 40, {SIMILARITY: {"s": np.zeros(8)}}),
            5: counted(models[2], 120, {SIMILARITY: {"s": known_by_5}}),
        }
    )
    weights, similarity, contacted = alg.exchange(received, DACClientState(models[0]), clients[0], context(0, 2))
    for k, peer in ((2, models[1]), (5, models[2])):
        assert similarity[k] == pytest.approx(1.0 / training_loss(alg.model_with(peer), clients[0], "cpu"))
    assert similarity[6] == 0.25 and not contacted[6]  # borrowed from 5, the only one who knows 6
    assert np.flatnonzero(contacted).tolist() == [2, 5]
    expected = average_weights(models, [clients[0].num_train, 40, 120])
    assert all(np.allclose(weights[k], expected[k], atol=1e-6) for k in shapes)


def test_a_client_without_training_data_measures_nothing(two_clusters):
    clients, _ = two_clusters
    full = clients[0]
    empty = replace(full, train_x=full.train_x[:0], train_y=full.train_y[:0], train_source_y=full.train_source_y[:0])
    alg = dac(8)
    before = np.array([0.0, 0.0, 0.7, 0.0, 0.0, 0.0, 0.0, 0.0])
    known = before > 0
    received = Payload(peers={k: counted(alg.initial_weights(), 40, {SIMILARITY: {"s": np.zeros(8)}}) for k in (2, 5)})
    state = DACClientState(alg.initial_weights(), similarity=before, contacted=known)
    _, similarity, contacted = alg.exchange(received, state, empty, context(0, 2))
    np.testing.assert_array_equal(similarity, before)  # not NaN: 2 keeps its measured value, 5 stays unknown
    np.testing.assert_array_equal(contacted, known)
    _, similarity, contacted = alg.exchange(received, state, full, context(0, 2))  # the control: with data it measures
    assert np.flatnonzero(contacted).tolist() == [2, 5] and np.isfinite(similarity).all() and similarity[5] > 0


def play(alg, clients, rounds: int) -> list[dict[int, list[int]]]:
    """`rounds` rounds of every client; returns, per round, whom each client was sent models by."""
    state, states, received = alg.init_state(), [DACClientState() for _ in clients], []
    for round in range(1, rounds + 1):
        downlinks = alg.configure(round, state, list(range(len(clients))))
        received.append({cid: sorted(d.peers) for cid, d in downlinks.items()})
        results = []
        for cid, data in enumerate(clients):
            uplink, states[cid], _ = alg.client_update(downlinks[cid], states[cid], data, context(cid, round))
            results.append(ClientResult(cid, uplink))
        state = alg.aggregate(round, state, results)
    return received


def same_cluster_share(received: list[dict[int, list[int]]], truth: list[int]) -> float:
    return float(np.mean([truth[j] == truth[i] for r in received for i, peers in r.items() for j in peers]))


def test_clients_come_to_ask_their_own_cluster(two_clusters):
    """Two clusters of 4 with disjoint labels; 2 neighbours a round: chance is 3/7 same-cluster picks."""
    clients, truth = two_clusters
    received = play(dac(8, neighbours=2), clients, rounds=10)
    assert received[0] == {cid: [] for cid in range(8)}  # round 1: local training only
    assert all(len(peers) == 2 for peers in received[1].values())
    assert same_cluster_share(received[6:], truth) > 0.85
    # the control: tau = 0 samples uniformly and stays near chance
    assert same_cluster_share(play(dac(8, neighbours=2, tau=0.0), clients, rounds=10)[6:], truth) < 0.7


def test_bytes_are_the_neighbours_models_counts_and_similarity_vectors_on_both_ends():
    """4 clients ask min(5, 3) = 3 peers each from round 2: 12 transfers of model + count + 4 similarities; the
    requests (3 int64) reach the peers through the relay and are not metered (peer_relay's docstring)."""
    result = run_spec(tiny_spec(algorithm="dac", rounds=3))
    assert result.status == "FINISHED", result.reason
    transfer = MODEL_BYTES + 8 + 4 * 8
    for rec, expected in zip(result.history, [0, 12 * transfer, 12 * transfer], strict=True):
        assert rec[M.COMM_UP_BYTES] == rec[M.COMM_DOWN_BYTES] == expected
    # after the last round each client uploads its model (not its count or similarities) once, for the vote
    assert [rec[M.COMM_EVAL_UP_BYTES] for rec in result.history] == [0.0, 0.0, 4 * MODEL_BYTES]
    final = result.final
    assert 0.3 < final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] <= 1.0
    assert 0.0 < final[M.FINAL_PREFIX + M.ACC_SYSTEM] <= 1.0
    assert 0.0 < final[M.FINAL_PREFIX + M.ACC_TEST_TIME] <= 1.0


def test_request_and_configure():
    alg = dac(4)
    state = alg.init_state()
    assert all(p.is_empty for p in alg.configure(1, state, [0, 1, 2, 3]).values())
    asks = counted(alg.initial_weights(), 9, {SIMILARITY: {"s": np.zeros(4)}, REQUEST: {"ids": np.array([1, 3])}})
    state = replace(state, parked={0: asks, 1: counted(alg.initial_weights(), 7, {SIMILARITY: {"s": np.ones(4)}})})
    downlink = alg.configure(2, state, [0])[0]
    # 3 never trained (client_fraction < 1): it does not answer; 1 sends its model, count and similarities
    assert list(downlink.peers) == [1] and not downlink.sections
    assert sorted(downlink.peers[1].sections) == ["samples", "similarity", "weights"]
    assert downlink.peers[1][SAMPLES]["n"][0] == 7


def test_bad_configs_are_refused():
    for field, value in (("neighbours", 0), ("tau", -1.0), ("tau", float("inf")), ("tau_schedule", "linear")):
        with pytest.raises(ConfigError) as err:
            tiny_spec(algorithm={"name": "dac", field: value})
        assert err.value.field == f"algorithm.{field}"
