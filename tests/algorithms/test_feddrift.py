"""FedDrift (Jothimurugesan et al. 2023): local drift detection by a jump of the client's best loss, a new model
per drifted client, hierarchical (complete-linkage) merging of clusters at loss distance at most delta into their
sample-weighted average, by hand and on digits with a label-permutation drift."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from fedbench.algorithms.base import CLUSTER, ModelBuilder, counted, samples_of
from fedbench.algorithms.feddrift import (
    CLUSTER_OF,
    DRIFTED,
    LOSSES,
    MERGES,
    MODELS,
    FedDrift,
    FedDriftClientState,
    FedDriftState,
    cluster_distances,
    merge_groups,
)
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult, OptimizerSpec, Payload, RoundContext
from fedbench.runtime import run_spec
from fedbench.training import get_weights, materialize
from tests.conftest import tiny_spec
from tests.scenarios.helpers import make

BUILDER = ModelBuilder("mlp", (1, 8, 8), 10, (("hidden", (32,)),))
SHIFT = (np.arange(10) + 1) % 10
"""A label permutation that moves every class: concept drift P(Y|X)."""


def feddrift(num_clients: int = 8, seed: int = 0, **config) -> FedDrift:
    return FedDrift(FedDrift.Config(**config), BUILDER, num_clients, seed=seed)


def ctx_for(client_id: int, round: int = 1, seed: int = 0) -> RoundContext:
    return RoundContext(
        round=round,
        client_id=client_id,
        seed=seed,
        local_epochs=3,
        batch_size=32,
        optimizer=OptimizerSpec(lr=0.05, momentum=0.9),
        num_classes=10,
    )


def constant(value: float) -> dict:
    return {k: np.full_like(v, value) for k, v in get_weights(BUILDER()).items()}


def uplink(cluster: int, n: int, value: float, losses=None, new: bool = False) -> Payload:
    """A client's uplink: a constant model, its sample count, the cluster it picked and its losses."""
    extras = {CLUSTER: {"id": np.array([cluster], dtype=np.int64), "new": np.array([int(new)], dtype=np.int64)}}
    if losses is not None:
        extras[LOSSES] = {"loss": np.asarray(losses, dtype=np.float32)}
    return counted(constant(value), n, extras)


def iid_clients(num_clients: int = 8):
    """Digits split uniformly at random: every client holds the same distribution; also each client's data with
    every label moved by SHIFT (the concept after a drift)."""
    data, scenario = make({"partition": "iid", "num_clients": num_clients}, "digits")
    views = [scenario.view(1, c) for c in range(num_clients)]
    plain = [materialize(data, v, scenario.input_shape) for v in views]
    shifted = [materialize(data, dataclasses.replace(v, label_map=SHIFT), scenario.input_shape) for v in views]
    return plain, shifted


def play(alg: FedDrift, rounds: int, drift_from: int | None = None, seed: int = 0):
    """`rounds` rounds on 8 iid digits clients, all sampled; from round `drift_from` on clients 0-3 see their
    labels permuted. Returns the round metrics after each round."""
    plain, shifted = iid_clients()
    state, client_states, history = alg.init_state(), [FedDriftClientState() for _ in plain], []
    for r in range(1, rounds + 1):
        payloads = alg.configure(r, state, list(range(len(plain))))
        results = []
        for c in range(len(plain)):
            data = shifted[c] if drift_from is not None and r >= drift_from and c < 4 else plain[c]
            up, client_states[c], _ = alg.client_update(payloads[c], client_states[c], data, ctx_for(c, r, seed))
            results.append(ClientResult(c, up))
        state = alg.aggregate(r, state, results)
        history.append(alg.round_metrics(state))
    return history


def cluster_of(metrics) -> list[int]:
    return [int(metrics[CLUSTER_OF.format(c)]) for c in range(8)]


# -- the distance and the merge, by hand --------------------------------------------------------------------


def test_cluster_distances_by_hand():
    # losses[i, j]: cluster i's model on cluster j's data.
    losses = np.array([[0.10, 0.30, 0.50], [0.20, 0.15, 0.40], [0.60, 0.70, 0.05]])
    # paper: max(L(j, i) - L(i, i), L(i, j) - L(j, j), 0), the other model against the own one on each data.
    paper = cluster_distances(losses, "paper")
    assert paper[0, 1] == pytest.approx(max(0.20 - 0.10, 0.30 - 0.15))  # 0.15
    assert paper[0, 2] == pytest.approx(max(0.60 - 0.10, 0.50 - 0.05))  # 0.50
    assert paper[1, 2] == pytest.approx(max(0.70 - 0.15, 0.40 - 0.05))  # 0.55
    # released (distance A): max(L(i, j) - L(i, i), L(j, i) - L(j, j), 0), each model on the other's data
    # against its own.
    released = cluster_distances(losses, "released")
    assert released[0, 1] == pytest.approx(max(0.30 - 0.10, 0.20 - 0.15))  # 0.20
    assert released[0, 2] == pytest.approx(max(0.50 - 0.10, 0.60 - 0.05))  # 0.55
    assert released[1, 2] == pytest.approx(max(0.40 - 0.15, 0.70 - 0.05))  # 0.65
    for d in (paper, released):
        assert np.array_equal(d, d.T) and np.all(np.diag(d) == 0)
    # A model better on the other's data than on its own gives no negative distance.
    assert cluster_distances(np.array([[0.5, 0.1], [0.1, 0.5]]), "released")[0, 1] == 0.0


def test_complete_linkage_does_not_chain():
    # a-b and b-c are close, a-c is not: single linkage would merge all three, complete linkage stops at a-b.
    d = np.array([[0.0, 0.01, 0.10], [0.01, 0.0, 0.02], [0.10, 0.02, 0.0]])
    assert merge_groups(d, delta=0.05) == [[0, 1]]
    assert merge_groups(d, delta=0.10) == [[0, 1, 2]]  # at most delta merges (the released fcluster)
    assert merge_groups(d, delta=0.005) == []
    assert merge_groups(np.zeros((1, 1)), delta=0.05) == []


def test_two_clusters_with_equal_losses_merge_into_their_sample_weighted_average():
    alg = feddrift(num_clients=3)
    state = FedDriftState({0: Payload(constant(0.0)), 1: Payload(constant(0.0))}, last_used={0: 1, 1: 1}, next_id=2)
    same = [0.25, 0.25]  # both models do equally well on both clusters' data: distance 0
    new = alg.aggregate(
        2, state, [ClientResult(0, uplink(0, 10, 1.0, same)), ClientResult(1, uplink(1, 30, 3.0, same))]
    )
    assert list(new.models) == [0]  # the merged cluster keeps the smaller id
    assert np.allclose(new.models[0].weights["head.bias"], (10 * 1.0 + 30 * 3.0) / 40)  # 2.5
    assert new.cluster_of == {0: 0, 1: 0}
    assert alg.round_metrics(new) == {
        MODELS: 1.0,
        DRIFTED: 0.0,
        MERGES: 1.0,
        CLUSTER_OF.format(0): 0.0,
        CLUSTER_OF.format(1): 0.0,
    }
    # Model 1 is 0.07 worse than model 0 on cluster 0's data (in error units, delta = 0.06): they stay apart.
    apart = alg.aggregate(
        2, state, [ClientResult(0, uplink(0, 10, 1.0, [0.10, 0.17])), ClientResult(1, uplink(1, 30, 3.0, [0.10, 0.10]))]
    )
    assert sorted(apart.models) == [0, 1] and apart.merges == 0
    assert np.allclose(apart.models[1].weights["head.bias"], 3.0)


def test_a_clusters_data_includes_the_clients_that_held_it_at_the_start_of_the_round():
    # Client 1 held cluster 1 and moved to cluster 0 this round: its data still stands for cluster 1's, so the
    # abandoned cluster can merge (its model enters the average with client 1's samples).
    alg = feddrift(num_clients=3)
    state = FedDriftState(
        {0: Payload(constant(0.0)), 1: Payload(constant(5.0))},
        cluster_of={0: 0, 1: 1},
        last_used={0: 1, 1: 1},
        next_id=2,
    )
    same = [0.25, 0.25]
    new = alg.aggregate(
        2, state, [ClientResult(0, uplink(0, 10, 1.0, same)), ClientResult(1, uplink(0, 30, 3.0, same))]
    )
    assert list(new.models) == [0] and new.cluster_of == {0: 0, 1: 0}
    # Cluster 0 after averaging: (10 * 1 + 30 * 3) / 40 = 2.5 over 40 samples; cluster 1 (untouched, 5.0) over 30.
    assert np.allclose(new.models[0].weights["head.bias"], (40 * 2.5 + 30 * 5.0) / 70)


def test_a_client_flags_drift_when_its_best_loss_jumps_by_more_than_delta():
    plain, _ = iid_clients()
    alg = feddrift(measure="cross_entropy", delta=0.5)
    zero = constant(0.0)  # uniform outputs: cross-entropy log(10) = 2.303 on any data
    offer = Payload(models={0: Payload(zero), 3: Payload(zero)})
    up, state, _ = alg.client_update(offer, FedDriftClientState(1.5), plain[0], ctx_for(0))
    assert up[CLUSTER]["new"][0] == 1 and up[CLUSTER]["id"][0] == 0  # 2.303 - 1.5 > 0.5; ties to the smaller id
    assert LOSSES not in up  # a drifted client's losses are not used: not sent
    assert state.loss == pytest.approx(math.log(10), abs=1e-5)
    up, state, _ = alg.client_update(offer, FedDriftClientState(2.0), plain[0], ctx_for(0))
    assert up[CLUSTER]["new"][0] == 0
    assert np.allclose(up[LOSSES]["loss"], math.log(10)) and len(up[LOSSES]["loss"]) == 2  # one loss per model
    assert samples_of(up) == plain[0].num_train
    # First round: `initial: local` starts a cluster of its own from the run's initial model (nothing offered);
    # `initial: shared` joins the offered model without a drift check.
    up, state, _ = alg.client_update(Payload(), FedDriftClientState(), plain[0], ctx_for(0))
    assert up[CLUSTER]["new"][0] == 1 and up[CLUSTER]["id"][0] == -1 and state.loss is not None
    shared = feddrift(initial="shared")
    up, _, _ = shared.client_update(Payload(models={0: Payload(zero)}), FedDriftClientState(), plain[0], ctx_for(0))
    assert up[CLUSTER]["new"][0] == 0


def test_each_drifted_client_gets_a_new_model_and_the_least_recently_used_idle_one_makes_room():
    alg = feddrift(num_clients=4)
    state = FedDriftState(
        {k: Payload(constant(float(k))) for k in range(4)},
        cluster_of={0: 0, 1: 0},
        last_used={0: 2, 1: 1, 2: 0, 3: 0},
        next_id=4,
    )
    losses = [0.1] * 4
    new = alg.aggregate(
        3,
        state,
        [
            ClientResult(0, uplink(0, 10, 4.0, new=True)),
            ClientResult(1, uplink(0, 10, 6.0, new=True)),
            ClientResult(2, uplink(0, 10, 2.0, losses)),
            ClientResult(3, uplink(0, 10, 2.0, losses)),
        ],
    )
    # At most one model per client (4), and models 1-3 are held by nobody: each new model replaces the one used
    # longest ago (2, then 3: ties to the smaller id). Each new model is its client's upload.
    assert sorted(new.models) == [0, 1, 4, 5] and new.cluster_of == {0: 4, 1: 5, 2: 0, 3: 0}
    assert np.allclose(new.models[4].weights["head.bias"], 4.0)
    assert np.allclose(new.models[5].weights["head.bias"], 6.0)
    assert new.drifted == 2 and new.next_id == 6 and new.last_used == {0: 3, 1: 1, 4: 3, 5: 3}
    # Test time: the models some client holds, weighted by their number of clients (002 App. I.3).
    ensemble = alg.assign(new, {0: Payload(), 1: Payload()}).ensemble
    assert ensemble.weights == {0: 2.0, 4: 1.0, 5: 1.0} and ensemble.models[4] is new.models[4]
    # Evaluation: each client its cluster's model; a client never sampled the cluster most clients hold.
    evals = alg.evaluation_payloads(new, [0, 2, 7])
    assert evals[0] is new.models[4] and evals[2] is new.models[0] and evals[7] is new.models[0]


def test_delta_must_be_positive():
    for value in (0.0, -0.1, float("nan")):
        with pytest.raises(ConfigError) as err:
            tiny_spec(algorithm={"name": "feddrift", "delta": value})
        assert err.value.field == "algorithm.delta"


# -- on digits ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_a_label_permutation_drift_creates_new_models_and_the_drifted_clients_move_to_them(seed):
    history = play(feddrift(initial="shared", seed=seed), rounds=6, drift_from=4, seed=seed)
    assert [h[MODELS] for h in history[:3]] == [1.0, 1.0, 1.0]
    assert [h[DRIFTED] for h in history] == [0.0, 0.0, 0.0, 4.0, 0.0, 0.0]
    assert history[3][MODELS] == 5.0 and cluster_of(history[3]) == [1, 2, 3, 4, 0, 0, 0, 0]
    last = cluster_of(history[-1])
    assert last[4:] == [0, 0, 0, 0] and 0 not in last[:4]  # the drifted clients stay on new models


def test_no_new_model_without_drift_on_iid_data():
    history = play(feddrift(initial="shared"), rounds=6)
    assert [h[MODELS] for h in history] == [1.0] * 6 and [h[DRIFTED] for h in history] == [0.0] * 6


def test_a_local_start_gives_every_client_a_model_and_identical_clients_merge():
    history = play(feddrift(delta=0.3), rounds=2)
    assert history[0][MODELS] == 8.0 and history[0][DRIFTED] == 8.0 and cluster_of(history[0]) == list(range(8))
    assert history[1][MERGES] == 7.0 and history[1][MODELS] == 1.0 and cluster_of(history[1]) == [0] * 8


# -- whole runs -------------------------------------------------------------------------------------------------


def test_every_model_travels_down_and_the_losses_and_cluster_id_up():
    changes = {"rounds": 2, "algorithm": {"name": "feddrift", "initial": "shared"}}
    ours = run_spec(tiny_spec(**changes))
    fedavg = run_spec(tiny_spec(**{**changes, "algorithm": "fedavg"}))
    assert ours.status == "FINISHED", ours.reason
    first, second = ours.history
    models = int(first[MODELS])
    assert first[M.COMM_DOWN_BYTES] == fedavg.history[0][M.COMM_DOWN_BYTES]  # round 1: the one shared model
    assert second[M.COMM_DOWN_BYTES] == models * fedavg.history[1][M.COMM_DOWN_BYTES]
    drifted = int(second[DRIFTED])  # drifted clients send no losses
    assert second[M.COMM_UP_BYTES] == fedavg.history[1][M.COMM_UP_BYTES] + 4 * 16 + (4 - drifted) * 4 * models
    assert {M.ACC_SYSTEM, M.ACC_TEST_TIME} <= set(second)
