"""IFCA (Ghosh et al. 2020): pick the cluster model of lowest training loss, average per cluster; K = 1 is FedAvg."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from fedbench.algorithms.base import CLUSTER, ModelBuilder, NoClientState, cluster_section, counted, samples_of
from fedbench.algorithms.ifca import IFCA, NONEMPTY, SIZE
from fedbench.config.task import resolve_run
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult, OptimizerSpec, Payload, RoundContext
from fedbench.runtime import run_spec
from fedbench.training import get_weights, materialize, training_loss
from tests.algorithms.conftest import assert_rounds_equal_fedavgs
from tests.conftest import tiny_spec
from tests.scenarios.helpers import make

BUILDER = ModelBuilder("mlp", (1, 8, 8), 10, (("hidden", (32,)),))


def ifca(clusters: int, seed: int = 0, **config) -> IFCA:
    return IFCA(IFCA.Config(clusters=clusters, **config), BUILDER, 8, seed=seed)


def ctx_for(client_id: int, round: int = 1, seed: int = 0) -> RoundContext:
    return RoundContext(
        round=round,
        client_id=client_id,
        seed=seed,
        local_epochs=1,
        batch_size=32,
        optimizer=OptimizerSpec(lr=0.05, momentum=0.9),
        num_classes=10,
    )


def two_groups():
    """001 E1 with K = 2 on digits, 8 clients: clients 0-3 hold classes 0-4, clients 4-7 classes 5-9."""
    data, scenario = make({"partition": "class_clusters", "clusters": 2, "num_clients": 8}, "digits")
    views = [scenario.view(1, c) for c in range(8)]
    return [materialize(data, v, scenario.input_shape) for v in views], [v.distribution_id for v in views]


def play(alg: IFCA, clients, rounds: int, seed: int = 0):
    """`rounds` rounds with every client sampled; the final server state."""
    state = alg.init_state()
    for r in range(1, rounds + 1):
        payloads = alg.configure(r, state, list(range(len(clients))))
        results = [
            ClientResult(c, alg.client_update(payloads[c], NoClientState(), client, ctx_for(c, r, seed))[0])
            for c, client in enumerate(clients)
        ]
        state = alg.aggregate(r, state, results)
    return state


def offer(models: dict[int, dict]) -> Payload:
    """A downlink offering cluster k's weights `models[k]`."""
    return Payload(models={k: Payload(weights) for k, weights in models.items()})


def uplink(cluster: int, n: int, value: float) -> Payload:
    weights = {k: np.full_like(v, value) for k, v in get_weights(BUILDER()).items()}
    return counted(weights, n, cluster_section(cluster))


# -- the mechanism, on hand-built cases ---------------------------------------------------------------------


def test_cluster_zero_is_the_runs_initial_model_and_the_others_differ():
    models = ifca(3, seed=5).init_state().models
    initial = get_weights(BUILDER.initial(5))
    assert all(np.array_equal(models[0].weights[k], initial[k]) for k in initial)
    for a, b in ((0, 1), (0, 2), (1, 2)):
        assert not np.allclose(models[a].weights["head.weight"], models[b].weights["head.weight"])


def test_a_client_picks_the_model_of_lowest_training_loss_ties_to_the_smallest_id():
    clients, _ = two_groups()
    zero = {k: np.zeros_like(v) for k, v in get_weights(BUILDER()).items()}
    alg = ifca(3)
    assert training_loss(alg.model_with(zero), clients[0]) == pytest.approx(math.log(10))  # uniform outputs
    trained = alg.client_update(offer({0: zero}), NoClientState(), clients[0], ctx_for(0))[0].weights
    assert alg.pick(offer({0: zero, 1: trained, 2: zero}), clients[0], ctx_for(0)) == 1
    assert alg.pick(offer({1: zero, 2: zero}), clients[0], ctx_for(0)) == 1  # a tie
    broken = {k: np.full_like(v, np.nan) for k, v in zero.items()}
    assert alg.pick(offer({0: broken, 1: zero}), clients[0], ctx_for(0)) == 1  # a NaN loss never wins
    # The uplink: the trained model, its sample count and the picked id (8 bytes on top of FedAvg's uplink).
    up, _, _ = alg.client_update(offer({0: zero, 2: trained}), NoClientState(), clients[0], ctx_for(0))
    assert int(up[CLUSTER]["id"][0]) == 2 and samples_of(up) == clients[0].num_train
    assert Payload(extras={CLUSTER: up[CLUSTER]}).nbytes == 8


def test_each_cluster_averages_its_members_by_samples_and_an_empty_one_keeps_its_model():
    alg = ifca(3)
    state = alg.init_state()
    results = [
        ClientResult(0, uplink(2, 10, 1.0)),
        ClientResult(1, uplink(0, 5, 3.0)),
        ClientResult(2, uplink(2, 30, 5.0)),
    ]
    new = alg.aggregate(1, state, results)
    assert np.allclose(new.models[2].weights["head.bias"], (10 * 1.0 + 30 * 5.0) / 40)  # 4.0
    assert np.allclose(new.models[0].weights["head.bias"], 3.0)
    assert new.models[1] is state.models[1]
    assert new.chosen == {0: 2, 1: 0, 2: 2}
    assert alg.round_metrics(new) == {NONEMPTY: 2.0, SIZE.format(0): 1.0, SIZE.format(1): 0.0, SIZE.format(2): 2.0}
    # Evaluation: the cluster picked last; a client never sampled gets cluster 0's model.
    evals = alg.evaluation_payloads(new, [0, 1, 2, 3])
    assert evals[0] is new.models[2] and evals[1] is new.models[0] and evals[3] is new.models[0]
    # Test time: the ensemble of the picked clusters, weighted by how many clients picked each.
    ensemble = alg.assign(new, {0: Payload(), 1: Payload()}).ensemble
    assert ensemble.weights == {0: 1.0, 2: 2.0} and ensemble.models[2] is new.models[2]


def test_after_the_refinement_rounds_a_client_gets_only_its_own_clusters_model():
    alg = ifca(3, refine_rounds=1)
    state = alg.aggregate(
        1, alg.init_state(), [ClientResult(0, uplink(2, 10, 1.0)), ClientResult(1, uplink(0, 5, 3.0))]
    )
    first = alg.configure(1, state, [0, 1, 2])
    assert all(set(p.models) == {0, 1, 2} and not p.sections for p in first.values())
    later = alg.configure(2, state, [0, 1, 2])
    assert set(later[0].models) == {2} and later[0].models[2] is state.models[2]
    assert set(later[1].models) == {0}
    assert len(later[2].models) == 3  # never sampled: it has yet to pick


def test_k_is_required_where_the_scenario_does_not_give_it():
    with pytest.raises(ConfigError) as err:
        IFCA(IFCA.Config(), BUILDER, 4, seed=0)
    assert err.value.field == "algorithm.clusters"
    assert IFCA(IFCA.Config(), BUILDER, 4, seed=0, distributions=3).clusters == 3
    for field, value in (("clusters", 0), ("refine_rounds", 0)):
        with pytest.raises(ConfigError) as err:
            tiny_spec(algorithm={"name": "ifca", field: value})
        assert err.value.field == f"algorithm.{field}"


# -- whole runs ---------------------------------------------------------------------------------------------


def test_one_cluster_is_fedavg_exactly():
    _, fedavg = assert_rounds_equal_fedavgs({"name": "ifca", "clusters": 1}, also=(M.COMM_DOWN_BYTES,))
    assert {M.ACC_SYSTEM, M.ACC_TEST_TIME} <= set(fedavg.history[-1])


def test_downlink_is_k_times_fedavgs_and_uplink_adds_eight_bytes_per_client():
    changes = {"rounds": 2, "algorithm": {"name": "ifca", "clusters": 3, "client_fraction": 0.5}}
    ours = run_spec(tiny_spec(**changes))
    fedavg = run_spec(tiny_spec(**{**changes, "algorithm": {"name": "fedavg", "client_fraction": 0.5}}))
    for a, b in zip(ours.history, fedavg.history, strict=True):
        assert a[M.COMM_DOWN_BYTES] == 3 * b[M.COMM_DOWN_BYTES] > 0
        assert a[M.COMM_UP_BYTES] == b[M.COMM_UP_BYTES] + 8 * 2  # 2 of 4 clients sampled


def test_k_defaults_to_the_scenarios_number_of_distributions():
    spec = resolve_run(
        {
            "task": "t",
            "dataset": "digits",
            "model": {"name": "mlp", "hidden": [16]},
            "algorithm": "ifca",
            "rounds": 1,
            "local_epochs": 1,
            "scenario": {"preset": "conditional/E1", "clusters": 2},
        }
    )
    record = run_spec(spec).history[-1]
    assert {k for k in record if k.startswith("ifca_cluster_size")} == {SIZE.format(0), SIZE.format(1)}
    assert record[SIZE.format(0)] + record[SIZE.format(1)] == spec.scenario.num_clients


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_two_separated_client_groups_are_recovered(seed):
    clients, ids = two_groups()
    state = play(ifca(2, seed=seed), clients, rounds=3, seed=seed)
    assert adjusted_rand_score(ids, [state.chosen[c] for c in range(8)]) == 1.0
