"""FedEM (Marfoq et al. 2021): the E-step and pi update by hand, responsibility-weighted training, the per-component
sample-weighted average, the mixture predictor, M = 1 is FedAvg exactly, bytes M times FedAvg's, and recovery of
two client groups from the argmax of each client's pi."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import adjusted_rand_score

from fedbench.algorithms.base import SAMPLES, ModelBuilder, NoClientState, counted, samples_of
from fedbench.algorithms.fedavg import FedAvg
from fedbench.algorithms.fedem import ENTROPY, MAIN, MASS, MIXTURE, FedEM, FedEMClientState, e_step
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult, OptimizerSpec, Payload, RoundContext
from fedbench.runtime import run_spec
from fedbench.training import get_weights
from tests.algorithms.conftest import assert_rounds_equal_fedavgs
from tests.algorithms.test_ifca import two_groups
from tests.conftest import tiny_spec

BUILDER = ModelBuilder("mlp", (1, 8, 8), 10, (("hidden", (32,)),))


def fedem(components: int, seed: int = 0) -> FedEM:
    return FedEM(FedEM.Config(components=components), BUILDER, 8, seed=seed)


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


def constant(value: float) -> dict:
    """A model whose every weight is `value`."""
    return {k: np.full_like(v, value) for k, v in get_weights(BUILDER()).items()}


def biased(label: int, bias: float) -> dict:
    """A model whose logits are `bias` for `label` and 0 for every other class, whatever the input."""
    weights = constant(0.0)
    weights["head.bias"][label] = bias
    return weights


def offer(*components: dict) -> Payload:
    return Payload(models={m: Payload(w) for m, w in enumerate(components)})


def same(a: dict, b: dict) -> bool:
    return all(np.array_equal(a[k], b[k]) for k in a)


# -- the mechanism, by hand ---------------------------------------------------------------------------------


def test_e_step_by_hand():
    # q ~ pi * exp(-loss): sample A (losses 0, ln 3) gives [1/4, 3/4 / 3] -> [1/2, 1/2];
    # sample B (ln 3, 0) gives [1/12, 3/4] -> [1/10, 9/10]; the new pi is their mean [3/10, 7/10].
    losses = torch.tensor([[0.0, math.log(3)], [math.log(3), 0.0]])
    q, pi = e_step(np.array([0.25, 0.75]), losses)
    assert torch.allclose(q, torch.tensor([[0.5, 0.1], [0.5, 0.9]], dtype=torch.float64))
    assert np.allclose(pi, [0.3, 0.7])
    # A component of weight 0 never gets responsibility; one component takes all; no samples keep pi.
    one_takes_all = torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    assert torch.equal(e_step(np.array([1.0, 0.0]), losses)[0], one_takes_all)
    assert torch.equal(e_step(np.array([1.0]), torch.tensor([[5.0, 0.1]]))[0], torch.ones(1, 2, dtype=torch.float64))
    assert np.array_equal(e_step(np.array([0.4, 0.6]), torch.zeros(2, 0))[1], [0.4, 0.6])


def test_a_client_updates_pi_from_the_received_components_losses():
    clients, _ = two_groups()
    data = clients[0]
    label, bias = int(data.train_y[0]), 2.0
    alg = fedem(2)
    up, state, metrics = alg.client_update(
        offer(constant(0.0), biased(label, bias)), FedEMClientState(), data, ctx_for(0)
    )
    # Component 0 is uniform (loss ln 10 everywhere); component 1 favours `label`. With pi = [1/2, 1/2]:
    # q_1 = e^-l1 / (e^-l0 + e^-l1), e^-l0 = 1/10, e^-l1 = e^b / (e^b + 9) for `label`'s samples, 1 / (e^b + 9) else.
    hit = math.exp(bias) / (math.exp(bias) + 9)
    miss = 1 / (math.exp(bias) + 9)
    share = float((data.train_y == label).float().mean())
    q1 = share * hit / (0.1 + hit) + (1 - share) * miss / (0.1 + miss)
    assert np.allclose(up[MIXTURE]["pi"], [1 - q1, q1]) and np.array_equal(state.pi, up[MIXTURE]["pi"])
    assert set(up.sections) == {MIXTURE, SAMPLES} and set(up.models) == {0, 1}
    assert samples_of(up) == data.num_train and up[MIXTURE]["pi"].dtype == np.float64
    assert metrics[M.TRAIN_STEPS] == 2 * math.ceil(data.num_train / 32)  # each component trains a full job


def test_responsibilities_weight_each_components_training():
    """pi = [1, 0]: component 0 takes every sample and trains exactly as FedAvg; component 1 gets no gradient."""
    clients, _ = two_groups()
    start = get_weights(BUILDER.initial(3))
    alg = fedem(2)
    up, state, _ = alg.client_update(
        offer(start, constant(0.5)), FedEMClientState(np.array([1.0, 0.0])), clients[0], ctx_for(0)
    )
    fedavg = FedAvg(FedAvg.Config(), BUILDER, 8, seed=0)
    trained = fedavg.client_update(Payload(start), NoClientState(), clients[0], ctx_for(0))[0].weights
    assert same(up.models[0].weights, trained)
    assert same(up.models[1].weights, constant(0.5))
    assert np.array_equal(state.pi, [1.0, 0.0])


def test_server_averages_each_component_by_samples_and_never_by_pi():
    alg = fedem(2)
    state = alg.init_state()
    sent = {0: ([0.9, 0.1], 10, 1.0, 2.0), 1: ([0.2, 0.8], 30, 5.0, 6.0)}
    uplinks = {
        c: counted(None, n, {MIXTURE: {"pi": np.array(pi)}}).merged(offer(constant(a), constant(b)))
        for c, (pi, n, a, b) in sent.items()
    }
    results = [ClientResult(c, up) for c, up in uplinks.items()]
    new = alg.aggregate(1, state, results)
    assert np.allclose(new.components[0]["head.bias"], (10 * 1.0 + 30 * 5.0) / 40)
    assert np.allclose(new.components[1]["head.bias"], (10 * 2.0 + 30 * 6.0) / 40)
    metrics = alg.round_metrics(new)

    def h(p):
        return -sum(x * math.log(x) for x in p)

    assert metrics[ENTROPY] == pytest.approx((h([0.9, 0.1]) + h([0.2, 0.8])) / 2)
    assert metrics[MASS.format(0)] == pytest.approx(1.1) and metrics[MASS.format(1)] == pytest.approx(0.9)
    assert metrics[MAIN.format(0)] == 0.0 and metrics[MAIN.format(1)] == 1.0
    # Every client downloads all components; test clients get their ensemble, weighted by mixture mass.
    evals = alg.evaluation_payloads(new, [0, 1, 5])
    assert evals[0] is evals[5] and evals[0].models[1].weights is new.components[1]
    ensemble = alg.assign(new, {0: Payload(), 1: Payload()}).ensemble
    assert ensemble.weights == pytest.approx({0: 1.1, 1: 0.9})
    assert ensemble.models[1].weights is new.components[1]


def test_the_client_predicts_with_its_mixture_of_the_components():
    clients, _ = two_groups()
    data = clients[0]
    a, b = get_weights(BUILDER.initial(1)), get_weights(BUILDER.initial(2))
    alg = fedem(2)
    x = data.train_batch(torch.arange(20))[0]
    pa, pb = (F.softmax(alg.model_with(w)(x), dim=1) for w in (a, b))
    mixed = F.softmax(alg.mixture(offer(a, b), np.array([0.3, 0.7]))(x), dim=1)
    assert torch.allclose(mixed, 0.3 * pa + 0.7 * pb, atol=1e-6)
    assert torch.equal(alg.mixture(offer(a, b), np.array([1.0, 0.0]))(x), F.log_softmax(alg.model_with(a)(x), dim=1))
    # Local evaluation uses the client's own pi; a shared mixture carries its owner's pi, which prediction uses.
    pi = np.array([0.0, 1.0])
    swapped = alg.client_evaluate(offer(b, a), FedEMClientState(pi[::-1]), data, ctx_for(0))
    assert alg.client_evaluate(offer(a, b), FedEMClientState(pi), data, ctx_for(0)) == swapped
    uploaded = alg.client_share(offer(a, b), FedEMClientState(pi))
    # Only pi travels: the server holds the components.
    assert list(uploaded.sections) == [MIXTURE] and not uploaded.models
    shared = offer(a, b).merged(uploaded)  # what the vote then uses
    assert np.array_equal(shared[MIXTURE]["pi"], pi)
    assert all(shared.models[0].weights[name] is value for name, value in a.items())  # the server's arrays, not copies
    preds = alg.client_predict(shared, FedEMClientState(np.array([1.0, 0.0])), data, ctx_for(0))[M.PRED]
    test_x = next(data.test_batches(10**6))[0]
    assert np.array_equal(preds, alg.model_with(b)(test_x).argmax(1).numpy())
    # A client never sampled mixes uniformly.
    half = np.array([0.5, 0.5])
    mixed_evenly = alg.client_evaluate(offer(a, b), FedEMClientState(half), data, ctx_for(0))
    assert alg.client_evaluate(offer(a, b), FedEMClientState(), data, ctx_for(0)) == mixed_evenly
    assert np.array_equal(alg.client_share(offer(a, b), FedEMClientState())[MIXTURE]["pi"], half)


def test_component_zero_is_the_runs_initial_model_and_the_others_differ():
    components = fedem(3, seed=5).init_state().components
    assert same(components[0], get_weights(BUILDER.initial(5)))
    assert not np.allclose(components[1]["head.weight"], components[2]["head.weight"])
    assert not np.allclose(components[0]["head.weight"], components[1]["head.weight"])


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_bad_component_counts_are_rejected_naming_the_field(value):
    with pytest.raises(ConfigError) as err:
        tiny_spec(algorithm={"name": "fedem", "components": value})
    assert err.value.field == "algorithm.components"


# -- whole runs ---------------------------------------------------------------------------------------------


def test_one_component_is_fedavg_exactly_and_adds_eight_bytes_of_pi_per_upload():
    ours, fedavg = assert_rounds_equal_fedavgs({"name": "fedem", "components": 1}, also=(M.COMM_DOWN_BYTES,))
    for a, b in zip(ours.history, fedavg.history, strict=True):
        assert a[M.COMM_UP_BYTES] == b[M.COMM_UP_BYTES] + 8 * 4  # pi: one float64 from each of the 4 clients
        assert a[ENTROPY] == 0.0 and a[MASS.format(0)] == 4.0
    assert {M.ACC_SYSTEM, M.ACC_TEST_TIME} <= set(ours.history[-1])


def test_downlink_and_uplink_carry_m_models():
    changes = {"rounds": 2, "algorithm": {"name": "fedem", "components": 3, "client_fraction": 0.5}}
    ours = run_spec(tiny_spec(**changes))
    fedavg = run_spec(tiny_spec(**{**changes, "algorithm": {"name": "fedavg", "client_fraction": 0.5}}))
    assert ours.status == "FINISHED", ours.reason
    for a, b in zip(ours.history, fedavg.history, strict=True):
        model = b[M.COMM_UP_BYTES] / 2 - 8  # 2 of 4 clients sampled; FedAvg sends a model and its sample count
        assert a[M.COMM_DOWN_BYTES] == 3 * b[M.COMM_DOWN_BYTES] > 0
        assert a[M.COMM_UP_BYTES] == 2 * (3 * model + 8 + 3 * 8)  # M models, the sample count, pi (M float64)
        assert sum(a[MASS.format(m)] for m in range(3)) == pytest.approx(2.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_two_separated_client_groups_are_recovered(seed):
    """001 E1 with 2 clusters on digits (clients 0-3 hold classes 0-4, 4-7 classes 5-9), M = 2: after 15 rounds
    the argmax of each client's pi is its group, and each client leans on one component."""
    clients, ids = two_groups()
    alg, states = fedem(2, seed=seed), [FedEMClientState() for _ in clients]
    state = alg.init_state()
    for r in range(1, 16):
        payloads = alg.configure(r, state, list(range(len(clients))))
        results = []
        for c, data in enumerate(clients):
            up, states[c], _ = alg.client_update(payloads[c], states[c], data, ctx_for(c, r, seed, epochs=2))
            results.append(ClientResult(c, up))
        state = alg.aggregate(r, state, results)
    pis = np.array([s.pi for s in states])
    assert adjusted_rand_score(ids, pis.argmax(axis=1)) == 1.0
    assert pis.max(axis=1).min() > 0.9
    assert np.array_equal([state.pi[c] for c in range(8)], pis)  # what the server holds is what they sent
