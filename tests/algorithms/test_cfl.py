"""CFL (Sattler et al. 2021): the split criterion, the optimal bipartition, recovery of two client groups, no
split on iid clients, where one cluster is FedAvg bit for bit."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from fedbench.algorithms.base import ModelBuilder, NoClientState, counted
from fedbench.algorithms.cfl import (
    CFL,
    CLUSTER_OF,
    CLUSTERS,
    MAX_NORM,
    MEAN_NORM,
    SPLITS,
    bipartition,
    cosine_similarities,
    inner_products,
    update_norms,
)
from fedbench.algorithms.fedavg import FedAvg
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult, OptimizerSpec, Payload, RoundContext
from fedbench.runtime import run_spec
from fedbench.training import materialize
from tests.conftest import tiny_spec
from tests.scenarios.helpers import make

BUILDER = ModelBuilder("mlp", (1, 8, 8), 10, (("hidden", (32,)),))
TUNED = {"eps1": 0.25, "eps2": 0.35, "warmup_rounds": 2}
"""Thresholds for digits, this MLP and lr 0.05: the two-group federation's round-1 norms are about (0.17, 0.43),
the iid one's (0.16, 0.22); after the split each half's mean norm is above 0.3."""


def ctx_for(client_id: int, round: int) -> RoundContext:
    return RoundContext(
        round=round,
        client_id=client_id,
        seed=0,
        local_epochs=1,
        batch_size=32,
        optimizer=OptimizerSpec(lr=0.05, momentum=0.9),
        num_classes=10,
    )


def federation(scenario: dict):
    """8 digits clients of `scenario` (materialized) and their ground-truth distribution ids."""
    data, built = make({**scenario, "num_clients": 8}, "digits")
    views = [built.view(1, c) for c in range(8)]
    return [materialize(data, v, built.input_shape) for v in views], [v.distribution_id for v in views]


TWO_GROUPS = {"partition": "class_clusters", "clusters": 2}
"""001 E1 with K = 2: clients 0-3 hold classes 0-4, clients 4-7 classes 5-9."""


def play(alg, clients, rounds: int):
    """`rounds` rounds with every client; yields the server state after each."""
    state = alg.init_state()
    for r in range(1, rounds + 1):
        payloads = alg.configure(r, state, list(range(len(clients))))
        results = [
            ClientResult(c, alg.client_update(payloads[c], NoClientState(), data, ctx_for(c, r))[0])
            for c, data in enumerate(clients)
        ]
        state = alg.aggregate(r, state, results)
        yield state


def cfl(**config) -> CFL:
    return CFL(CFL.Config(**config), BUILDER, 4, seed=0)


# -- the pieces, by hand ------------------------------------------------------------------------------------


def test_norms_and_similarities_of_hand_made_updates():
    origin = {"a": np.array([1.0, 1.0]), "b": np.array([5.0])}
    models = [
        {"a": np.array([2.0, 1.0]), "b": np.array([5.0])},  # update (1, 0, 0)
        {"a": np.array([0.0, 1.0]), "b": np.array([5.0])},  # update (-1, 0, 0)
        {"a": np.array([1.0, 1.0]), "b": np.array([7.0])},
    ]  # update (0, 0, 2)
    gram = inner_products(models, models, ["a", "b"], origin=origin)
    assert np.allclose(gram, [[1, -1, 0], [-1, 1, 0], [0, 0, 4]])
    # weights 1, 1, 2: mean update (1 - 1 + 0, 0, 2 * 2) / 4 = (0, 0, 1), norm 1; the largest update norm is 2
    assert update_norms(gram, [1, 1, 2]) == pytest.approx((1.0, 2.0))
    assert np.allclose(cosine_similarities(gram), [[1, -1, 0], [-1, 1, 0], [0, 0, 1]])


def test_the_papers_bipartition_minimises_the_largest_cross_similarity_and_complete_linkage_may_not():
    # Five updates along a line with growing gaps: single linkage cuts the widest gap, complete linkage balances.
    x = np.array([0.0, 1.0, 2.1, 3.3, 4.6])
    chain = 1 - np.abs(x[:, None] - x[None, :]) / 5
    assert bipartition(chain, "single") == ([0, 1, 2, 3], [4])  # largest cross similarity 0.74
    assert bipartition(chain, "complete") == ([0, 1], [2, 3, 4])  # largest cross similarity 0.78

    def worst_cross(s, part):
        other = [j for j in range(len(s)) if j not in part]
        return max(s[i, j] for i in part for j in other)

    rng = np.random.default_rng(0)
    for _ in range(20):
        a = rng.uniform(-1, 1, (6, 6))
        s = (a + a.T) / 2
        best = min(worst_cross(s, part) for r in range(1, 6) for part in itertools.combinations(range(6), r))
        assert worst_cross(s, bipartition(s, "single")[0]) == pytest.approx(best)


def uplink(origin, delta: np.ndarray, n: int):
    """A model that is `origin` plus `delta` on the head's bias (10 values), with n training samples."""
    return counted({**origin, "head.bias": origin["head.bias"] + delta}, n)


def opposed_updates(scale: float, counts=(10, 30, 10, 30)):
    """Clients 0, 1 move the head bias along +e0 (by scale, 3 * scale), clients 2, 3 along -e0 the same way."""
    e0 = np.eye(10, dtype=np.float32)[0]
    return [scale * e0, 3 * scale * e0, -scale * e0, -3 * scale * e0], counts


def round_of(alg: CFL, state, deltas, counts, round: int = 1):
    origin = state.models[0].weights
    results = [ClientResult(c, uplink(origin, d, n)) for c, (d, n) in enumerate(zip(deltas, counts, strict=True))]
    return alg.aggregate(round, state, results)


def test_a_cluster_splits_when_its_mean_update_is_small_and_a_client_update_is_large():
    alg = cfl(eps1=0.5, eps2=1.0)
    state = alg.init_state()
    # Weighted mean: (10 * 1 + 30 * 3 - 10 * 1 - 30 * 3) / 80 = 0 < eps1; largest norm 3 > eps2: split.
    new = round_of(alg, state, *opposed_updates(1.0))
    assert new.clusters == ((0, 1), (2, 3))
    bias = state.models[0].weights["head.bias"]
    # Each half continues from the cluster model plus its own members' weighted mean update: (10 * 1 + 30 * 3) / 40.
    assert np.allclose(new.models[0].weights["head.bias"][0], bias[0] + 2.5, atol=1e-6)
    assert np.allclose(new.models[1].weights["head.bias"][0], bias[0] - 2.5, atol=1e-6)
    metrics = alg.round_metrics(new)
    assert metrics[CLUSTERS] == 2 and metrics[SPLITS] == 1
    assert metrics[MEAN_NORM] == pytest.approx(0.0, abs=1e-6) and metrics[MAX_NORM] == pytest.approx(3.0)
    assert [metrics[CLUSTER_OF.format(c)] for c in range(4)] == [0, 0, 1, 1]
    # Every client gets, and is evaluated with, its own cluster's model; test clients get the size-weighted ensemble.
    assert alg.configure(2, new, [1, 2]) == {1: new.models[0], 2: new.models[1]}
    ensemble = alg.assign(new, {0: Payload(), 1: Payload()}).ensemble
    assert ensemble.weights == {0: 2.0, 1: 2.0} and ensemble.models[1] is new.models[1]  # clients per cluster


@pytest.mark.parametrize(
    "config, scale, round",
    [
        ({"eps1": 0.5, "eps2": 4.0}, 1.0, 1),  # no client is far from stationary: max 3 < eps2
        ({"eps1": 0.5, "eps2": 1.0, "warmup_rounds": 1}, 1.0, 1),  # still warming up
    ],
)
def test_no_split_below_eps2_or_during_the_warm_up(config, scale, round):
    alg = cfl(**config)
    new = round_of(alg, alg.init_state(), *opposed_updates(scale), round=round)
    assert new.clusters == ((0, 1, 2, 3),) and alg.round_metrics(new)[SPLITS] == 0


def test_no_split_while_the_mean_update_is_large():
    alg = cfl(eps1=0.5, eps2=1.0)
    e0 = np.eye(10, dtype=np.float32)[0]
    new = round_of(alg, alg.init_state(), [e0, 3 * e0, -e0, e0], [10, 10, 10, 10])  # mean 1 >= eps1
    assert new.clusters == ((0, 1, 2, 3),)


def test_released_variant_plain_means_complete_linkage_and_no_split_of_two_clients():
    alg = cfl(variant="released", eps1=0.5, eps2=0.5, warmup_rounds=0)
    state = alg.init_state()
    # Plain means: (1 + 3 - 1 - 3) / 4 = 0, so it splits; each half's model moves by (1 + 3) / 2 = 2, not 2.5.
    new = round_of(alg, state, *opposed_updates(1.0))
    assert new.clusters == ((0, 1), (2, 3))
    start = state.models[0].weights["head.bias"][0]
    assert np.allclose(new.models[0].weights["head.bias"][0], start + 2.0, atol=1e-6)
    # A two-client half never splits again in the released code; the paper's bipartition would split it.
    e0 = np.eye(10, dtype=np.float32)[0]
    results = [ClientResult(c, uplink(new.models[c // 2].weights, (1 if c % 2 else -1) * e0, 10)) for c in range(4)]
    assert alg.aggregate(2, new, results).clusters == ((0, 1), (2, 3))
    paper = cfl(eps1=0.5, eps2=0.5)
    singletons = paper.aggregate(2, new, results)
    assert singletons.clusters == ((0,), (1,), (2,), (3,))
    assert MEAN_NORM in paper.round_metrics(singletons)  # this round's clusters had two clients
    assert MEAN_NORM not in paper.round_metrics(paper.aggregate(3, singletons, results))  # now none has two


def test_the_paper_variant_splits_by_single_linkage_and_the_released_one_by_complete_linkage():
    # Five updates at angles along the chain of the bipartition test: cosine similarity falls with the angle.
    angles = 0.3 * np.array([0.0, 1.0, 2.1, 3.3, 4.6])
    deltas = [np.pad([np.cos(a), np.sin(a)], (0, 8)).astype(np.float32) for a in angles]
    for variant, halves in (("paper", ((0, 1, 2, 3), (4,))), ("released", ((0, 1), (2, 3, 4)))):
        alg = CFL(CFL.Config(variant=variant, eps1=10.0, eps2=0.5, warmup_rounds=0), BUILDER, 5, seed=0)
        assert round_of(alg, alg.init_state(), deltas, [10] * 5).clusters == halves


def test_the_fedrc_variant_is_the_code_002_ran_plain_norms_sample_weighted_models_no_warm_up():
    """FedRC's `clustered` (LINs-lab/FedRC ClusteredAggregator): tol_1 0.4, tol_2 0.6, checked from round 1, the
    norm of the plain mean update, complete linkage, cluster models averaged by the clients' sample shares."""
    alg = cfl(variant="fedrc")
    assert (alg.config.eps1, alg.config.eps2, alg.config.warmup_rounds) == (0.4, 0.6, 0)
    assert (cfl().config.eps2, cfl(variant="released").config.eps2) == (1.6, 1.6)
    state = alg.init_state()
    new = round_of(alg, state, *opposed_updates(1.0))  # plain mean 0 < 0.4, largest norm 3 > 0.6: split in round 1
    assert new.clusters == ((0, 1), (2, 3))
    start = state.models[0].weights["head.bias"][0]  # each half: (10 * 1 + 30 * 3) / 40, as FedRC's weights give
    assert np.allclose(new.models[0].weights["head.bias"][0], start + 2.5, atol=1e-6)
    e0 = np.eye(10, dtype=np.float32)[0]
    lopsided = [2 * e0, 2 * e0, -2 * e0, -2 * e0], (10, 50, 10, 10)  # weighted mean norm 1.0, plain mean 0
    assert round_of(alg, state, *lopsided).clusters == ((0, 1), (2, 3))
    assert round_of(cfl(eps2=0.6), state, *lopsided).clusters == ((0, 1, 2, 3),)  # the paper's weighted mean: no split


def test_variant_defaults_and_bad_values():
    assert cfl().config.warmup_rounds == 0 and cfl(variant="released").config.warmup_rounds == 20
    with pytest.warns(UserWarning, match="never splits"):
        tiny_spec(algorithm={"name": "cfl", "variant": "released"}, rounds=20)
    for bad in ({"client_fraction": 0.5}, {"eps1": 0.0}, {"eps2": -1.0}, {"warmup_rounds": -1}):
        with pytest.raises(ConfigError) as err:
            tiny_spec(algorithm={"name": "cfl", **bad})
        assert err.value.field == "algorithm." + next(iter(bad))


# -- the mechanism, on digits ------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["paper", "released"])
def test_two_groups_are_recovered_by_one_split_after_the_warm_up(variant):
    clients, truth = federation(TWO_GROUPS)
    alg = CFL(CFL.Config(variant=variant, **TUNED), BUILDER, 8, seed=0)
    states = list(play(alg, clients, 6))
    assert [alg.round_metrics(s)[CLUSTERS] for s in states] == [1, 1, 2, 2, 2, 2]  # no split of a congruent half
    labels = [alg.round_metrics(states[-1])[CLUSTER_OF.format(c)] for c in range(8)]
    assert adjusted_rand_score(truth, labels) == 1.0


def test_iid_clients_never_split_and_one_cluster_is_fedavg_bit_for_bit():
    clients, truth = federation({"partition": "iid"})
    assert set(truth) == {0}
    alg = CFL(CFL.Config(**TUNED), BUILDER, 8, seed=0)
    fedavg = FedAvg(FedAvg.Config(), BUILDER, 8, seed=0)
    for state, reference in zip(play(alg, clients, 6), play(fedavg, clients, 6), strict=True):
        assert state.clusters == (tuple(range(8)),)
        model, global_model = state.models[0].weights, reference.global_model.weights
        assert all(np.array_equal(model[k], global_model[k]) for k in global_model)
    assert alg.round_metrics(state)[MAX_NORM] < TUNED["eps2"]


def test_whole_run_logs_the_clusters_and_tests_with_the_ensemble():
    result = run_spec(tiny_spec(algorithm={"name": "cfl"}, rounds=2))
    assert result.status == "FINISHED", result.reason
    assert [rec[CLUSTERS] for rec in result.history] == [1.0, 1.0]
    assert 0.0 <= result.final[M.FINAL_PREFIX + M.ACC_TEST_TIME] <= 1.0
