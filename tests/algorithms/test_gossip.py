"""Gossip: random perfect matchings, mean-preserving pairwise averaging, one model per transfer on both ends."""

from __future__ import annotations

import dataclasses

import numpy as np

from fedbench.algorithms.base import counted, make_algorithm
from fedbench.algorithms.gossip import random_pairs
from fedbench.algorithms.peer_relay import DecentralizedClientState
from fedbench.core import metrics as M
from fedbench.core.types import Payload
from fedbench.runtime import run_spec
from tests.algorithms.conftest import MODEL_BYTES
from tests.conftest import tiny_spec


def gossip(num_clients: int):
    spec = tiny_spec(algorithm="gossip", scenario={"partition": "iid", "num_clients": num_clients})
    return make_algorithm(spec, (1, 8, 8), 10)


def test_pairs_are_a_perfect_matching_that_changes_across_rounds():
    matchings = []
    for round in range(1, 6):
        pairs = random_pairs(0, round, range(8))
        members = [c for pair in pairs for c in pair]
        assert sorted(members) == list(range(8))  # each client in exactly one pair
        matchings.append(frozenset(frozenset(p) for p in pairs))
        assert random_pairs(0, round, range(8)) == pairs  # the same on every process
    assert len(set(matchings)) > 1
    odd = [c for pair in random_pairs(0, 1, [1, 3, 4, 6, 9]) for c in pair]
    assert len(odd) == 4 and len(set(odd)) == 4 and set(odd) < {1, 3, 4, 6, 9}  # one left out


def test_an_exchange_keeps_the_mean_of_all_models_and_partners_start_from_the_same_model():
    alg = gossip(8)
    rng = np.random.default_rng(0)
    template = alg.initial_weights()
    models = {cid: {k: rng.normal(size=v.shape).astype(v.dtype) for k, v in template.items()} for cid in range(8)}
    # unequal sample counts: an average weighted by them would move the mean
    state = dataclasses.replace(alg.init_state(), parked={cid: counted(w, 10 + 7 * cid) for cid, w in models.items()})
    downlinks = alg.configure(2, state, list(range(8)))
    mixed = {cid: alg.mix(downlinks[cid], DecentralizedClientState(models[cid])) for cid in range(8)}
    for a, b in random_pairs(alg.seed, 2, range(8)):
        assert list(downlinks[a].peers) == [b] and list(downlinks[b].peers) == [a]
        for k in template:
            assert np.array_equal(mixed[a][k], mixed[b][k])
            np.testing.assert_allclose(mixed[a][k], 0.5 * (models[a][k] + models[b][k]), rtol=1e-6)
    for k in template:
        before = np.mean([models[c][k] for c in range(8)], axis=0, dtype=np.float64)
        after = np.mean([mixed[c][k] for c in range(8)], axis=0, dtype=np.float64)
        np.testing.assert_allclose(after, before, rtol=0, atol=1e-6)
        assert not np.allclose(mixed[0][k], models[0][k])  # the step did move the models


def test_who_exchanges_when_not_every_client_has_trained():
    alg = gossip(6)
    initial = alg.init_state()
    trained = counted({k: v + 1 for k, v in alg.initial_weights().items()}, 10)
    state = dataclasses.replace(initial, parked={0: trained})
    pairs = random_pairs(alg.seed, 3, range(6))
    downlinks = alg.configure(3, state, list(range(6)))
    for a, b in pairs:
        if 0 not in (a, b):  # two clients holding the initial model: nothing to exchange
            assert downlinks[a].is_empty and downlinks[b].is_empty
            continue
        other = b if a == 0 else a
        assert downlinks[other].peers[0].weights is trained.weights  # 0's model only, not its sample count
        assert list(downlinks[other].peers) == [0] and list(downlinks[other].peers[0].sections) == ["weights"]
        assert not downlinks[other].sections and not downlinks[other].models  # nothing but what 0 sent
        assert downlinks[0].peers[other].weights is initial.initial.weights


def test_bytes_per_round_are_one_model_per_transfer_on_both_ends():
    """5 clients: 2 pairs (one client left over) = 4 transfers a round; nothing in round 1."""
    result = run_spec(tiny_spec(algorithm="gossip", rounds=3, scenario={"partition": "iid", "num_clients": 5}))
    assert result.status == "FINISHED", result.reason
    up = [rec[M.COMM_UP_BYTES] for rec in result.history]
    down = [rec[M.COMM_DOWN_BYTES] for rec in result.history]
    assert up == down == [0.0, 4 * MODEL_BYTES, 4 * MODEL_BYTES]
    # after the last round each client uploads its model once, for the vote
    assert [rec[M.COMM_EVAL_UP_BYTES] for rec in result.history] == [0.0, 0.0, 5 * MODEL_BYTES]


def test_only_clients_that_trained_upload_their_model_for_the_vote():
    """Half of 4 clients in one round: 2 upload their model; the other 2 vote with the initial model, which every
    process rebuilds from the run seed."""
    alg = gossip(4)
    state = dataclasses.replace(alg.init_state(), parked={1: counted(alg.initial_weights(), 10)})
    entries = alg.system_payloads(state, [0, 1])
    assert entries[0] is state.initial and entries[1].is_empty
    assert alg.client_share(state.initial, DecentralizedClientState()).is_empty
    own = {k: v + 1 for k, v in alg.initial_weights().items()}
    assert alg.client_share(Payload(), DecentralizedClientState(own)).weights is own
    spec = tiny_spec(
        algorithm={"name": "gossip", "client_fraction": 0.5}, rounds=1, scenario={"partition": "iid", "num_clients": 4}
    )
    result = run_spec(spec)
    assert result.status == "FINISHED", result.reason
    assert result.history[-1][M.COMM_EVAL_UP_BYTES] == 2 * MODEL_BYTES
    assert 0.0 < result.final[M.FINAL_PREFIX + M.ACC_SYSTEM] <= 1.0


def test_whole_run_reports_system_and_test_time_accuracy():
    result = run_spec(tiny_spec(algorithm="gossip", rounds=2))
    assert result.status == "FINISHED", result.reason
    final = result.final
    assert 0.3 < final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] <= 1.0
    assert 0.0 < final[M.FINAL_PREFIX + M.ACC_SYSTEM] <= 1.0
    assert 0.0 < final[M.FINAL_PREFIX + M.ACC_TEST_TIME] <= 1.0


def test_mixed_evaluation_sends_each_client_its_next_partners_model():
    alg = make_algorithm(
        tiny_spec(algorithm={"name": "gossip", "evaluated": "mixed"}, scenario={"partition": "iid", "num_clients": 6}),
        (1, 8, 8),
        10,
    )
    trained = {cid: counted({k: v + cid for k, v in alg.initial_weights().items()}, 10) for cid in range(6)}
    state = dataclasses.replace(alg.init_state(), parked=trained, round=4)
    payloads = alg.evaluation_payloads(state, list(range(6)))
    for a, b in random_pairs(alg.seed, 5, range(6)):  # the pairs of the round after the last one aggregated
        assert payloads[a].peers[b].weights is trained[b].weights and list(payloads[b].peers) == [a]
    assert all(p.is_empty for p in gossip(6).evaluation_payloads(state, list(range(6))).values())  # trained: none


def test_mixed_evaluation_reads_the_same_training_between_an_exchange_and_the_next_training():
    """Disjoint label groups (001 E1, K = 2): the run trains exactly as with `trained` (same losses and bytes), and
    a model averaged with a partner that may hold the other classes scores lower on the client's own labels."""

    def run(evaluated: str):
        spec = tiny_spec(
            algorithm={"name": "gossip", "evaluated": evaluated},
            rounds=3,
            scenario={"partition": "class_clusters", "clusters": 2, "num_clients": 6},
        )
        result = run_spec(spec)
        assert result.status == "FINISHED", result.reason
        return result

    trained, mixed = run("trained"), run("mixed")
    for key in (M.TRAIN_LOSS_MEAN, M.COMM_UP_BYTES):
        assert [r[key] for r in trained.history] == [r[key] for r in mixed.history]
    assert mixed.final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] < trained.final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] - 0.02
    # each run reads the other's point after its last round, beside its own (SecondReading): one run answers both
    for key in (M.ACC_LOCAL_MEAN_TRAINED, M.ACC_LOCAL_MEAN_MIXED):  # each point under its own name in both runs
        assert trained.history[-1][key] == mixed.history[-1][key]
    assert trained.history[-1][M.ACC_LOCAL_MEAN_MIXED] == mixed.history[-1][M.ACC_LOCAL_MEAN]
    assert mixed.history[-1][M.ACC_LOCAL_MEAN_TRAINED] == trained.history[-1][M.ACC_LOCAL_MEAN]
    assert M.ACC_LOCAL_MEAN_MIXED not in trained.history[0]  # after the last round only


def test_the_second_reading_is_neither_metered_nor_counted_as_compute(monkeypatch):
    """The mixed reading beside a trained run sends each client its next partner's model, which the protocol never
    does: the run's bytes are those of the same run without the reading, and with every evaluation job reporting
    1000 s its client compute is too (7 clients at half participation: one is left without a partner)."""
    from fedbench.core.types import ClientResult
    from fedbench.runtime.evaluation import Evaluate, Evaluation

    scored = Evaluate.run

    def slow(self, worker, round, client_id, payload, state):
        result = scored(self, worker, round, client_id, payload, state)
        return ClientResult(result.client_id, result.uplink, result.metrics, 1000.0)

    monkeypatch.setattr(Evaluate, "run", slow)
    spec = tiny_spec(
        algorithm={"name": "gossip", "client_fraction": 0.5},
        rounds=2,
        scenario={"partition": "class_clusters", "clusters": 2, "num_clients": 7},
    )
    read = run_spec(spec).history[-1]
    monkeypatch.setattr(Evaluation, "both_readings", lambda self, round, state, last: {})
    unread = run_spec(spec).history[-1]
    assert M.ACC_LOCAL_MEAN_MIXED in read and M.ACC_LOCAL_MEAN_MIXED not in unread
    assert read[M.ACC_LOCAL_MEAN_TRAINED] == read[M.ACC_LOCAL_MEAN]
    assert {k: v for k, v in read.items() if "bytes" in k} == {k: v for k, v in unread.items() if "bytes" in k}
    assert abs(read[M.TIME_CLIENT_COMPUTE_S] - unread[M.TIME_CLIENT_COMPUTE_S]) < 500


def test_evaluated_at_its_default_leaves_the_run_hash_of_runs_recorded_before_it():
    assert dict(tiny_spec(algorithm="gossip").algorithm.params) == {"client_fraction": 1.0}  # as before the option
    assert dict(tiny_spec(algorithm={"name": "gossip", "evaluated": "mixed"}).algorithm.params)["evaluated"] == "mixed"
