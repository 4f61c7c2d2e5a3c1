"""FeSEM (Long et al. 2023): the E-step (nearest center in L2) and M-step (sample-weighted average) by hand,
k-means++ seeding, recovery of two client groups, and K = 1 is FedAvg bit for bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from fedbench.algorithms.base import ModelBuilder, counted
from fedbench.algorithms.fedavg import FedAvg
from fedbench.algorithms.fesem import CLUSTER_OF, MOVED, SIZE, FeSEM, kmeans_pp, squared_distances
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult, Payload
from fedbench.runtime import run_spec
from fedbench.training import get_weights
from tests.algorithms.test_cfl import TWO_GROUPS, federation, play
from tests.conftest import tiny_spec

BUILDER = ModelBuilder("mlp", (1, 8, 8), 10, (("hidden", (32,)),))


def fesem(clusters: int | None, num_clients: int = 4, seed: int = 0, distributions: int | None = None) -> FeSEM:
    return FeSEM(FeSEM.Config(clusters=clusters), BUILDER, num_clients, seed=seed, distributions=distributions)


def constant(value: float) -> dict:
    """A model whose every weight is `value`."""
    return {k: np.full_like(v, value) for k, v in get_weights(BUILDER()).items()}


def uploads(values_and_counts):
    return [ClientResult(c, counted(constant(v), n)) for c, (v, n) in enumerate(values_and_counts)]


# -- the steps, by hand ------------------------------------------------------------------------------------


def test_squared_distances_and_kmeans_pp_seeding():
    models = [{"w": np.array([0.0, 0.0])}, {"w": np.array([3.0, 4.0])}]
    assert np.allclose(squared_distances(models, models, ["w"]), [[0, 25], [25, 0]])
    # Two groups of identical points: after any first draw, D^2 sampling can only draw from the other group.
    points = np.array([0.0, 0.0, 0.0, 10.0, 10.0])
    distances = (points[:, None] - points[None, :]) ** 2
    for seed in range(10):
        first, second = kmeans_pp(distances, 2, np.random.default_rng(seed))
        assert (points[first] == 0) != (points[second] == 0)
    assert sorted(kmeans_pp(np.zeros((3, 3)), 3, np.random.default_rng(0))) == [0, 1, 2]  # all equal: any order


def test_e_step_nearest_center_m_step_sample_weighted_and_an_empty_center_keeps_its_model():
    alg = fesem(3)
    state = dataclasses.replace(
        alg.init_state(),
        centers=(Payload(constant(0.0)), Payload(constant(10.0)), Payload(constant(100.0))),
        member_of={1: 1},
        samples={1: 30},
    )
    new = alg.aggregate(2, state, uploads([(1.0, 10), (3.0, 30), (9.0, 5)]))
    assert new.member_of == {0: 0, 1: 0, 2: 1}
    assert np.allclose(new.centers[0].weights["head.bias"], (10 * 1.0 + 30 * 3.0) / 40)  # 2.5
    assert np.allclose(new.centers[1].weights["head.bias"], 9.0)
    assert new.centers[2] is state.centers[2]
    metrics = alg.round_metrics(new)
    assert metrics[MOVED] == 1.0  # client 1 left center 1
    assert [metrics[SIZE.format(k)] for k in range(3)] == [2.0, 1.0, 0.0]
    assert [metrics[CLUSTER_OF.format(c)] for c in range(3)] == [0.0, 0.0, 1.0]
    # Next round and evaluation: each client its center; client 3, never assigned, the center with most samples.
    sent = alg.configure(3, new, [0, 2, 3])
    assert sent[0] is new.centers[0] and sent[2] is new.centers[1] and sent[3] is new.centers[0]
    # Test time: the ensemble of the centers with members, weighted by their number of members (002 App. I.3).
    ensemble = alg.assign(new, {0: Payload()}).ensemble
    assert ensemble.weights == {0: 2.0, 1: 1.0} and ensemble.models[1] is new.centers[1]


def test_round_one_trains_the_initial_model_and_seeds_one_center_in_each_group():
    alg = fesem(2)
    state = alg.init_state()
    assert all(p is state.initial for p in alg.configure(1, state, [0, 1, 2, 3]).values())
    assert np.array_equal(state.initial.weights["head.bias"], get_weights(BUILDER.initial(0))["head.bias"])
    new = alg.aggregate(1, state, uploads([(1.0, 10), (2.0, 10), (50.0, 10), (52.0, 30)]))
    groups = {new.member_of[c] for c in (0, 1)}, {new.member_of[c] for c in (2, 3)}
    assert len(groups[0]) == len(groups[1]) == 1 and groups[0] != groups[1]
    means = sorted(float(c.weights["head.bias"][0]) for c in new.centers)
    assert means == pytest.approx([1.5, 51.5])


def test_k_from_the_scenario_and_bad_values():
    assert fesem(None, distributions=3).clusters == 3 and fesem(2, distributions=3).clusters == 2
    with pytest.raises(ConfigError) as err:
        fesem(None)
    assert err.value.field == "algorithm.clusters"
    with pytest.raises(ConfigError):
        fesem(5)  # more centers than clients
    with pytest.raises(ConfigError) as err:
        tiny_spec(algorithm={"name": "fesem", "clusters": 0})
    assert err.value.field == "algorithm.clusters"


def test_a_first_round_too_small_to_seed_the_centers_is_refused_at_build():
    """Round 1 samples max(1, floor(C * N + 0.5)) clients, whose models seed the K centers."""

    def build(fraction: float, clusters: int | None = 3, distributions: int | None = None) -> FeSEM:
        return FeSEM(
            FeSEM.Config(client_fraction=fraction, clusters=clusters), BUILDER, 8, seed=0, distributions=distributions
        )

    assert build(0.3125).clusters == 3  # 2.5 rounds up to 3 clients
    for fraction, clusters, distributions in ((0.3, 3, None), (0.25, None, 3)):  # 2.4 -> 2 clients; K from the scenario
        with pytest.raises(ConfigError) as err:
            build(fraction, clusters, distributions)
        assert err.value.field == "algorithm.client_fraction" and err.value.value == fraction
        assert "algorithm.clusters = 3" in str(err.value) and "samples 2" in str(err.value)
    result = run_spec(tiny_spec(algorithm={"name": "fesem", "client_fraction": 0.25, "clusters": 2}))
    assert result.status == "FAILED" and "algorithm.client_fraction" in result.reason
    assert result.history == []  # refused before any client trained


# -- the mechanism, on digits ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_two_groups_are_recovered(seed):
    clients, truth = federation(TWO_GROUPS)
    alg = fesem(2, num_clients=8, seed=seed)
    *_, state = play(alg, clients, 4)
    assert adjusted_rand_score(truth, [state.member_of[c] for c in range(8)]) == 1.0
    assert alg.round_metrics(state)[MOVED] == 0.0


def test_one_center_is_fedavg_bit_for_bit():
    clients, _ = federation({"partition": "dirichlet", "alpha": 0.5})
    fedavg = FedAvg(FedAvg.Config(), BUILDER, 8, seed=0)
    for state, reference in zip(play(fesem(1, num_clients=8), clients, 3), play(fedavg, clients, 3), strict=True):
        center, global_model = state.centers[0].weights, reference.global_model.weights
        assert all(np.array_equal(center[k], global_model[k]) for k in global_model)


def test_whole_run_with_k_from_the_scenario():
    result = run_spec(tiny_spec(algorithm={"name": "fesem"}, rounds=2))  # 4 dirichlet clients: 4 distributions
    assert result.status == "FINISHED", result.reason
    assert all(sum(rec[SIZE.format(k)] for k in range(4)) == 4 for rec in result.history)
    assert 0.0 <= result.final[M.FINAL_PREFIX + M.ACC_TEST_TIME] <= 1.0
