"""FedDRM: the two-term loss, which parameters stay local, the server's shares, routing on a covariate-shift
scenario, lam = 1 leaving the client path untrained, test-time routing, and a whole run."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fedbench.algorithms.base import counted, make_algorithm
from fedbench.algorithms.capabilities import TrainedOn
from fedbench.algorithms.feddrm import (
    HEAD,
    ROUTES,
    ROUTING,
    FedDRM,
    FedDRMClientState,
    FedDRMState,
    local_part,
    shared_part,
)
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult, OptimizerSpec, Payload, RoundContext
from fedbench.runtime import run_spec
from fedbench.training import ClientData, loop, materialize
from tests.conftest import tiny_spec
from tests.scenarios.helpers import make


def freeze_weights(monkeypatch) -> None:
    """From now on, local training leaves the weights as they are (an OptimizerSpec refuses lr 0): torch's SGD at lr
    0."""
    monkeypatch.setattr(loop, "make_optimizer", lambda params, spec, lr: torch.optim.SGD(params, lr=0.0))


SMALL = {"name": "feddrm_net", "backbone": "cnn", "hidden": 32}


def algorithm(num_clients: int, lam: float = 0.8, input_shape=(1, 8, 8), model=SMALL) -> FedDRM:
    spec = tiny_spec(
        algorithm={"name": "feddrm", "lam": lam}, model=model, scenario={"partition": "iid", "num_clients": num_clients}
    )
    return make_algorithm(spec, input_shape, 10)


def context(client_id: int, round: int = 1, lr: float = 0.05, batch_size: int = 32, weight_decay: float = 0.0):
    return RoundContext(
        round=round,
        client_id=client_id,
        seed=0,
        local_epochs=1,
        batch_size=batch_size,
        optimizer=OptimizerSpec(lr=lr, momentum=0.9, weight_decay=weight_decay),
        num_classes=10,
    )


def run_rounds(alg: FedDRM, clients: list[ClientData], rounds: int, **ctx) -> FedDRMState:
    """Every client trains every round; the server aggregates (the runtime's loop, in miniature)."""
    state, client_states = alg.init_state(), [FedDRMClientState() for _ in clients]
    for r in range(1, rounds + 1):
        payloads = alg.configure(r, state, list(range(len(clients))))
        results = []
        for cid, data in enumerate(clients):
            job = context(cid, r, **ctx)
            uplink, client_states[cid], metrics = alg.client_update(payloads[cid], client_states[cid], data, job)
            results.append(ClientResult(cid, uplink, metrics))
        state = alg.aggregate(r, state, results)
    return state


def system_and_routing(alg: FedDRM, state: FedDRMState, clients: list[ClientData]) -> tuple[float, float]:
    """004 Sec. 3.2 through `client_predict`: every client's model answers every client's test split; the
    shared router picks one answer per sample."""
    payloads = alg.evaluation_payloads(state, list(range(len(clients))))
    correct = routed_home = total = 0
    for i, data in enumerate(clients):
        outputs = [alg.client_predict(payloads[j], FedDRMClientState(), data, context(i)) for j in range(len(clients))]
        route = outputs[0]["route"].argmax(axis=1)
        answer = np.stack([o["pred"] for o in outputs], axis=1)[np.arange(data.num_test), route]
        correct += int((answer == data.test_y.numpy()).sum())
        routed_home += int((route == i).sum())
        total += data.num_test
    return correct / total, routed_home / total


def test_loss_is_lam_class_ce_plus_one_minus_lam_client_ce(monkeypatch):
    freeze_weights(monkeypatch)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (4, 1, 8, 8), dtype=torch.uint8, generator=g)
    y = torch.tensor([0, 3, 3, 9])
    data = ClientData(x, y, x, y, y, y)
    for lam in (0.8, 0.3):
        alg = algorithm(num_clients=3, lam=lam)
        payload = alg.init_state().global_model
        model = alg.model_with({**payload.weights, **alg.initial_head()})
        with torch.no_grad():
            z, k = model.both(data.train_batch(torch.arange(4))[0])
        class_ce = (torch.logsumexp(z, dim=1) - z[torch.arange(4), y]).mean()
        client_ce = (torch.logsumexp(k, dim=1) - k[:, 2]).mean()  # every sample's client id is 2
        # frozen weights, one batch: the loss reported is the loss at the given weights
        _, _, metrics = alg.client_update(payload, FedDRMClientState(), data, context(2, batch_size=4))
        assert metrics["train_loss"] == pytest.approx((lam * class_ce + (1 - lam) * client_ce).item(), rel=1e-5)


def test_only_the_final_target_layer_stays_local():
    alg = algorithm(num_clients=2)
    state = alg.init_state()
    shared = state.global_model.weights
    assert not any(k.startswith("head.") for k in shared)
    assert any(k.startswith("client_head.") for k in shared)
    initial = {**shared, **alg.initial_head()}
    models = [{k: v + shift for k, v in initial.items()} for shift in (1.0, 5.0)]
    results = [
        ClientResult(cid, counted(shared_part(m), n, {HEAD: local_part(m)}))
        for cid, m, n in zip((0, 1), models, (1, 3), strict=True)
    ]
    state = alg.aggregate(1, state, results)
    for k, v in state.global_model.weights.items():  # weighted by n_i / sum n: (1 * 1 + 3 * 5) / 4 = 4
        np.testing.assert_allclose(v, initial[k] + 4.0, rtol=1e-6)
    payloads = alg.evaluation_payloads(state, [0, 1])
    for cid, shift in ((0, 1.0), (1, 5.0)):
        np.testing.assert_allclose(payloads[cid].weights["head.weight"], initial["head.weight"] + shift, rtol=1e-6)
        assert all(payloads[cid].weights[k] is v for k, v in state.global_model.weights.items())
    np.testing.assert_allclose(payloads[0][ROUTING]["log_pi"], np.log([0.25, 0.75]), rtol=1e-6)


def test_client_keeps_its_head_across_rounds_and_uploads_it(monkeypatch):
    alg = algorithm(num_clients=2)
    data, scenario = make({"partition": "iid", "num_clients": 2}, dataset="digits")
    client = materialize(data, scenario.view(1, 1), scenario.input_shape)
    downlink = alg.configure(1, alg.init_state(), [0, 1])[1]
    assert not any(k.startswith("head.") for k in downlink.weights)
    uplink, state, _ = alg.client_update(downlink, FedDRMClientState(), client, context(1))
    assert all(np.array_equal(state.head[k], uplink[HEAD][k]) for k in ("head.weight", "head.bias"))
    assert not np.array_equal(uplink[HEAD]["head.weight"], alg.initial_head()["head.weight"])
    freeze_weights(monkeypatch)
    again, _, _ = alg.client_update(downlink, state, client, context(1, round=2))
    assert np.array_equal(again[HEAD]["head.weight"], state.head["head.weight"])  # frozen: starts from its own head


def test_shares_of_clients_not_heard_from_are_the_mean():
    alg = algorithm(num_clients=3)
    state = alg.init_state()
    assert np.allclose(np.exp(alg.log_shares(state)), 1 / 3)
    heard = dataclasses.replace(state, counts={0: 10, 1: 30})
    assert np.allclose(np.exp(alg.log_shares(heard)), [10 / 60, 30 / 60, 20 / 60])


def test_routing_is_learned_and_lam_one_leaves_the_client_path_untrained():
    """Covariate shift on digits: client c's images are rotated by c * 120 degrees. Chance routing is 1/3.
    (On 004's own digits scenario, feddrm/dir0.3, routing takes far more rounds: bench/feddrm_routing.py.)"""
    rotated = {"partition": "iid", "num_clients": 3, "shifts": [{"name": "rotation", "clusters": 3}]}
    data, scenario = make(rotated, dataset="digits")
    clients = [materialize(data, scenario.view(1, c), scenario.input_shape) for c in range(3)]
    routed = {}
    for lam in (0.8, 1.0):
        alg = algorithm(3, lam=lam)
        initial = alg.init_state().global_model.weights
        state = run_rounds(alg, clients, rounds=12, weight_decay=5e-4)
        system, routed[lam] = system_and_routing(alg, state, clients)
        shared = state.global_model.weights
        unchanged = [np.array_equal(v, initial[k]) for k, v in shared.items() if k.startswith("client_head.")]
        assert not np.array_equal(shared["body.0.weight"], initial["body.0.weight"])
        if lam == 1.0:
            assert all(unchanged)  # no gradient and no weight decay: the client path is not in the objective
        else:
            assert not any(unchanged) and system > 0.6
    assert routed[0.8] > 0.6
    assert abs(routed[1.0] - 1 / 3) < 0.1


def test_test_clients_get_the_model_their_samples_route_to():
    alg = algorithm(num_clients=3)
    state = alg.init_state()
    state = dataclasses.replace(state, heads={**state.heads, 2: {k: v + 1.0 for k, v in state.heads[2].items()}})
    request = alg.describe_payloads(state, [0])[0]
    assert ROUTING in request and not any(k.startswith("head.") for k in request.weights)
    descriptions = {
        0: Payload(extras={ROUTES: {"counts": np.array([1, 0, 5])}}),
        1: Payload(extras={ROUTES: {"counts": np.array([2, 2, 0])}}),
    }
    assignment = alg.assign(state, descriptions)
    assert assignment.matched == {0: TrainedOn(2), 1: TrainedOn(0)}  # a tie goes to the smallest client id
    assert np.array_equal(assignment.payloads[0].weights["head.weight"], state.heads[2]["head.weight"])


def test_client_describe_counts_routes_without_labels():
    alg = algorithm(num_clients=3)
    state = alg.init_state()
    data, scenario = make({"partition": "iid", "num_clients": 3}, dataset="digits")
    client = materialize(data, scenario.view(1, 0), scenario.input_shape)
    counts = alg.client_describe(alg.describe_payloads(state, [0])[0], client, context(0))[ROUTES]["counts"]
    assert counts.shape == (3,) and counts.sum() == client.num_test


@pytest.mark.parametrize(
    "model, lam, field",
    [
        ({"name": "mlp", "hidden": [32]}, 0.8, "model.name"),
        ({**SMALL, "num_clients": 5}, 0.8, "model.num_clients"),
        (SMALL, 1.5, "algorithm.lam"),
    ],
)
def test_bad_configurations_are_config_errors(model, lam, field):
    with pytest.raises(ConfigError) as err:
        algorithm(num_clients=4, lam=lam, model=model)
    assert err.value.field == field


def test_whole_run_reports_system_and_routing_accuracy():
    result = run_spec(tiny_spec(algorithm="feddrm", model=SMALL, rounds=2))
    assert result.status == "FINISHED", result.reason
    final = result.final
    assert 0.3 < final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] <= 1.0
    for key in (M.ACC_SYSTEM, M.ACC_ROUTING, M.ACC_TEST_TIME, M.ACC_ASSOCIATION):  # system and test-time evaluation
        assert 0.0 <= final[M.FINAL_PREFIX + key] <= 1.0


def test_the_variants_differ_in_lams_default_and_an_explicit_lam_wins():
    assert FedDRM.Config().lam == 0.8  # 004 Fig. 4
    assert FedDRM.Config(variant="released").lam == 0.9  # the authors' code (METHODS.md)
    assert FedDRM.Config(variant="released", lam=0.6).lam == 0.6
    spec = tiny_spec(algorithm={"name": "feddrm", "variant": "released"}, model=SMALL)
    assert FedDRM.Config(**spec.algorithm.kwargs).lam == 0.9
