"""FedRC (Guo et al. 2024): E-step gamma ~ omega exp(-loss) / P_k(y), gamma-weighted training of K models, label
marginals from the clients' gamma-weighted label counts; K = 1 is FedAvg."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import adjusted_rand_score

from fedbench.algorithms.base import SAMPLES, ModelBuilder, NoClientState, counted
from fedbench.algorithms.fedavg import FedAvg
from fedbench.algorithms.fedrc import (
    ENTROPY,
    FLOOR,
    LABELS,
    MARGINAL,
    MIXTURE,
    SIZE,
    FedRC,
    FedRCClientState,
    label_counts,
    label_marginal,
    mixture_of,
    responsibilities,
)
from fedbench.config.task import resolve_run
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult, OptimizerSpec, Payload, RoundContext
from fedbench.runtime import run_spec
from fedbench.training import get_weights, materialize, probabilities
from tests.algorithms.conftest import assert_rounds_equal_fedavgs
from tests.conftest import tiny_spec
from tests.scenarios.helpers import make

BUILDER = ModelBuilder("mlp", (1, 8, 8), 10, (("hidden", (32,)),))


def fedrc(clusters: int, seed: int = 0, **config) -> FedRC:
    return FedRC(FedRC.Config(clusters=clusters, **config), BUILDER, 8, seed=seed)


def ctx_for(client_id: int, round: int = 1, seed: int = 0, epochs: int = 1) -> RoundContext:
    return RoundContext(
        round=round,
        client_id=client_id,
        seed=seed,
        local_epochs=epochs,
        batch_size=32,
        optimizer=OptimizerSpec(lr=0.05, momentum=0.9),
        num_classes=10,
    )


def two_groups(shift: str):
    """Digits, 8 clients, clients 0-3 and 4-7 differing by `shift`: `concept`, each group its own random
    permutation of all labels (001 E3b: same P(x), different P(y|x)); `labels`, disjoint class sets (001 E1)."""
    if shift == "concept":
        permuted = {"name": "label_permutation", "classes": None, "permutations": 2, "assign": "blocks"}
        scenario = {"partition": "iid", "num_clients": 8, "shifts": [permuted]}
    else:
        scenario = {"partition": "class_clusters", "clusters": 2, "num_clients": 8}
    data, built = make(scenario, "digits")
    views = [built.view(1, c) for c in range(8)]
    return [materialize(data, v, built.input_shape) for v in views], [v.distribution_id for v in views]


def play(alg: FedRC, clients, rounds: int, seed: int, epochs: int, marginal: bool = True):
    """`rounds` rounds with every client sampled (client states kept); the final server state. `marginal=False`
    strips the label marginals from the downlink, leaving FedEM's E-step."""
    state, states = alg.init_state(), [FedRCClientState() for _ in clients]
    for r in range(1, rounds + 1):
        payloads = alg.configure(r, state, list(range(len(clients))))
        results = []
        for c, client in enumerate(clients):
            payload = (
                payloads[c]
                if marginal
                else Payload(
                    extras={k: v for k, v in payloads[c].sections.items() if k != MARGINAL}, models=payloads[c].models
                )
            )
            uplink, states[c], _ = alg.client_update(payload, states[c], client, ctx_for(c, r, seed, epochs))
            results.append(ClientResult(c, uplink))
        state = alg.aggregate(r, state, results)
    return state


def filled(value: float) -> dict:
    return {k: np.full_like(v, value) for k, v in get_weights(BUILDER()).items()}


# -- the mechanism, on hand-computed cases ------------------------------------------------------------------


def test_the_e_step_divides_by_each_clusters_label_marginal():
    """Two rows, K = C = 2, omega = (1/2, 1/2), P_0 = (1/4, 3/4), P_1 = (1/2, 1/2).
    Row 0, y = 0, exp(-loss) = (1/2, 1/4): I = (2, 1/2), gamma = (0.8, 0.2).
    Row 1, y = 1, exp(-loss) = (1/2, 1/2): I = (2/3, 1), gamma = (0.4, 0.6).
    Without the marginal (FedEM's E-step) the rows would get (2/3, 1/3) and (1/2, 1/2)."""
    losses = torch.tensor([[math.log(2), math.log(4)], [math.log(2), math.log(2)]], dtype=torch.float64)
    labels = torch.tensor([0, 1])
    marginal = np.array([[0.25, 0.75], [0.5, 0.5]], dtype=np.float32)
    gamma = responsibilities(losses, labels, np.array([0.5, 0.5]), marginal)
    assert torch.allclose(gamma, torch.tensor([[0.8, 0.2], [0.4, 0.6]], dtype=torch.float64))
    fedem = responsibilities(losses, labels, np.array([0.5, 0.5]), None)
    assert torch.allclose(fedem, torch.tensor([[2 / 3, 1 / 3], [0.5, 0.5]], dtype=torch.float64))
    # omega weighs in as a prior: omega = (1/5, 4/5) turns row 1's (2/3, 1) into (2/15, 12/15), gamma = (1/7, 6/7).
    assert responsibilities(losses, labels, np.array([0.2, 0.8]), marginal)[1, 0].item() == pytest.approx(1 / 7)
    # The uplink's label counts [K, C]: sum_j gamma_jk 1{y_j = c}; omega_k = mean_j gamma_jk is read off them.
    counts = label_counts(gamma, labels, 2)
    assert counts.dtype == np.float32 and np.allclose(counts, [[0.8, 0.4], [0.2, 0.6]])
    assert np.allclose(mixture_of(counts), [0.6, 0.4])
    assert mixture_of(np.zeros((2, 2), np.float32)) is None


def test_the_label_marginal_sums_every_clients_counts_with_a_floor():
    a = np.array([[0.8, 0.4, 0.0], [0.2, 0.6, 0.0]], dtype=np.float32)
    b = np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 0.0]], dtype=np.float32)
    p = label_marginal([a, b])  # totals (0.8, 2.4, 0) and (1.2, 0.6, 0)
    assert p.dtype == np.float32 and np.allclose(p.sum(axis=1), 1.0)
    assert np.allclose(p[:, :2], [[0.25, 0.75], [2 / 3, 1 / 3]])
    assert p[0, 2] == pytest.approx(FLOOR / 3.2, rel=1e-3) and p[1, 2] == pytest.approx(FLOOR / 1.8, rel=1e-3)


def test_a_client_trains_each_model_with_its_gammas_and_reports_its_label_counts():
    """With omega = (1, 0) every gamma is (1, 0): model 0 trains exactly as FedAvg's client, model 1 does not
    train and goes back as it came; the counts are the client's label histogram in row 0."""
    clients, _ = two_groups("labels")
    client = clients[0]
    alg, first, second = fedrc(2), get_weights(BUILDER.initial(1)), get_weights(BUILDER.initial(2))
    offer = Payload(models={0: Payload(first), 1: Payload(second)})
    uplink, state, metrics = alg.client_update(offer, FedRCClientState(np.array([1.0, 0.0])), client, ctx_for(0))
    fedavg_up, _, fedavg_metrics = FedAvg(FedAvg.Config(), BUILDER, 8, seed=0).client_update(
        Payload(first), NoClientState(), client, ctx_for(0)
    )
    assert set(uplink.sections) == {LABELS, SAMPLES} and set(uplink.models) == {0, 1}
    assert all(np.array_equal(uplink.models[0].weights[k], fedavg_up.weights[k]) for k in first)
    assert all(np.array_equal(uplink.models[1].weights[k], second[k]) for k in second)
    assert metrics[M.TRAIN_LOSS] == fedavg_metrics[M.TRAIN_LOSS]
    assert metrics[M.TRAIN_STEPS] == fedavg_metrics[M.TRAIN_STEPS]
    histogram = np.bincount(client.train_y.numpy(), minlength=10)
    assert np.array_equal(uplink[LABELS]["counts"], np.stack([histogram, np.zeros(10)]).astype(np.float32))
    assert np.array_equal(state.omega, [1.0, 0.0])
    # A first-time client starts from uniform omega; its new omega is the mean gamma, its counts sum to N_i.
    uplink, state, _ = alg.client_update(offer, FedRCClientState(), client, ctx_for(0))
    counts = uplink[LABELS]["counts"]
    assert counts.sum() == pytest.approx(client.num_train, rel=1e-5)
    assert np.array_equal(state.omega, mixture_of(counts)) and 0.0 < state.omega[0] < 1.0


def test_the_server_averages_each_model_by_samples_forms_the_marginal_and_reads_omega():
    alg = fedrc(2)
    state = alg.init_state()
    first = alg.configure(1, state, [0, 1])
    assert first[0] is first[1] and set(first[0].models) == {0, 1} and not first[0].sections  # no marginal yet

    def up(n: int, value: float, counts) -> Payload:
        models = Payload(models={0: Payload(filled(value)), 1: Payload(filled(2 * value))})
        return counted(None, n, {LABELS: {"counts": np.asarray(counts, dtype=np.float32)}}).merged(models)

    results = [
        ClientResult(0, up(10, 1.0, [[8, 0], [2, 0]])),  # omega (0.8, 0.2)
        ClientResult(1, up(30, 5.0, [[0, 3], [3, 24]])),
    ]  # omega (0.1, 0.9)
    new = alg.aggregate(1, state, results)
    assert np.allclose(new.models[0].weights["head.bias"], (10 * 1.0 + 30 * 5.0) / 40)
    assert np.allclose(new.models[1].weights["head.bias"], (10 * 2.0 + 30 * 10.0) / 40)
    assert np.allclose(new.marginal, [[8 / 11, 3 / 11], [5 / 29, 24 / 29]])
    assert np.allclose(new.omega[0], [0.8, 0.2]) and np.allclose(new.omega[1], [0.1, 0.9])

    def entropy(w):
        return -sum(x * math.log(x) for x in w)

    assert alg.round_metrics(new) == pytest.approx(
        {SIZE.format(0): 1.0, SIZE.format(1): 1.0, ENTROPY: (entropy([0.8, 0.2]) + entropy([0.1, 0.9])) / 2}
    )
    later = alg.configure(2, new, [0, 1])
    assert np.array_equal(later[0][MARGINAL]["p"], new.marginal)
    assert later[0].models[1].weights is new.models[1].weights
    # System accuracy: each client's predictor is the K models (the same arrays) with its omega, uniform if unseen.
    system = alg.system_payloads(new, [0, 1, 2])
    assert system[1].models[0].weights is system[0].models[0].weights
    assert np.allclose(system[1][MIXTURE]["omega"], [0.1, 0.9]) and np.allclose(system[2][MIXTURE]["omega"], [0.5, 0.5])
    # Test time: the cluster models weighted by the clients whose largest omega each is (002 App. I.3).
    ensemble = alg.assign(new, {0: Payload()}).ensemble
    assert ensemble.weights == {0: 1.0, 1: 1.0} and ensemble.models[1] is new.models[1]


def test_a_client_predicts_with_its_omega_weighted_mixture_or_its_largest_cluster():
    clients, _ = two_groups("labels")
    client = clients[0]
    first, second = get_weights(BUILDER.initial(1)), get_weights(BUILDER.initial(2))
    offer = Payload(models={0: Payload(first), 1: Payload(second)})
    probs = [probabilities(fedrc(2).model_with(w), client).numpy() for w in (first, second)]
    labels = client.test_y.numpy()
    for prediction, expected in (("mixture", 0.3 * probs[0] + 0.7 * probs[1]), ("argmax", probs[1])):
        alg = fedrc(2, prediction=prediction)
        result = alg.client_evaluate(offer, FedRCClientState(np.array([0.3, 0.7])), client, ctx_for(0))
        assert result[M.ACCURACY] == (expected.argmax(axis=1) == labels).mean()
        assert result[M.LOSS] == pytest.approx(-np.log(expected[np.arange(len(labels)), labels]).mean())
        voted = alg.client_predict(
            offer.replace({MIXTURE: {"omega": np.array([0.3, 0.7])}}), FedRCClientState(), client, ctx_for(0)
        )
        assert np.array_equal(voted[M.PRED], expected.argmax(axis=1))


def test_k_and_prediction_are_checked_and_k_defaults_to_the_scenarios():
    with pytest.raises(ConfigError) as err:
        FedRC(FedRC.Config(), BUILDER, 4, seed=0)
    assert err.value.field == "algorithm.clusters"
    assert FedRC(FedRC.Config(), BUILDER, 4, seed=0, distributions=3).clusters == 3
    for field, value in (("clusters", 0), ("prediction", "vote")):
        with pytest.raises(ConfigError) as err:
            tiny_spec(algorithm={"name": "fedrc", field: value})
        assert err.value.field == f"algorithm.{field}"


# -- whole runs ---------------------------------------------------------------------------------------------


def test_one_cluster_is_fedavg_exactly():
    ours, _ = assert_rounds_equal_fedavgs({"name": "fedrc", "clusters": 1})
    assert {M.ACC_SYSTEM, M.ACC_TEST_TIME} <= set(ours.history[-1])


def test_bytes_are_k_times_fedavgs_plus_the_label_counts_and_marginals():
    """Per sampled client: down K models (+ the K x C float32 marginals from round 2), up K models, the sample
    count and the K x C float32 label counts."""
    changes = {"rounds": 2, "algorithm": {"name": "fedrc", "clusters": 3, "client_fraction": 0.5}}
    ours = run_spec(tiny_spec(**changes))
    fedavg = run_spec(tiny_spec(**{**changes, "algorithm": {"name": "fedavg", "client_fraction": 0.5}}))
    extras = 2 * 3 * 10 * 4  # 2 of 4 clients sampled, K = 3, C = 10
    for round, (a, b) in enumerate(zip(ours.history, fedavg.history, strict=True), start=1):
        assert a[M.COMM_DOWN_BYTES] == 3 * b[M.COMM_DOWN_BYTES] + (extras if round > 1 else 0)
        assert a[M.COMM_UP_BYTES] == 3 * (b[M.COMM_UP_BYTES] - 2 * 8) + 2 * 8 + extras


def test_k_defaults_to_the_scenarios_number_of_distributions_in_a_run():
    spec = resolve_run(
        {
            "task": "t",
            "dataset": "digits",
            "model": {"name": "mlp", "hidden": [16]},
            "algorithm": "fedrc",
            "rounds": 1,
            "local_epochs": 1,
            "scenario": {"preset": "conditional/E1", "clusters": 2},
        }
    )
    record = run_spec(spec).history[-1]
    assert {k for k in record if k.startswith("fedrc_cluster_size")} == {SIZE.format(0), SIZE.format(1)}
    assert record[SIZE.format(0)] + record[SIZE.format(1)] == spec.scenario.num_clients
    assert 0.0 <= record[ENTROPY] <= math.log(2)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_two_concepts_are_recovered(seed):
    """Groups whose labels are permuted differently (concept shift) end in separate clusters."""
    clients, ids = two_groups("concept")
    state = play(fedrc(2, seed=seed), clients, rounds=12, seed=seed, epochs=5)
    assert adjusted_rand_score(ids, [int(np.argmax(state.omega[c])) for c in range(8)]) == 1.0


def test_label_shift_alone_is_not_split_where_fedems_e_step_splits_it():
    """Disjoint class groups (label shift, the same P(y|x)): with the marginals every client keeps a mixed omega;
    without them (FedEM's E-step) the groups separate completely (the robust clustering principle, Sec. 3)."""
    clients, ids = two_groups("labels")
    robust = play(fedrc(2), clients, rounds=10, seed=0, epochs=5)
    assert all(0.3 < robust.omega[c][0] < 0.7 for c in range(8))
    fedem = play(fedrc(2), clients, rounds=10, seed=0, epochs=5, marginal=False)
    assert all(max(fedem.omega[c]) > 0.99 for c in range(8))
    assert adjusted_rand_score(ids, [int(np.argmax(fedem.omega[c])) for c in range(8)]) == 1.0
