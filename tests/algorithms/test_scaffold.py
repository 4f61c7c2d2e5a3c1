"""SCAFFOLD: one round against a hand computation, round 1 is FedAvg bit for bit, the server step with client
sampling, c = mean of all c_i across rounds, the exact fixed point FedAvg misses, and what travels."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedbench.algorithms.base import ModelBuilder, make_algorithm
from fedbench.algorithms.scaffold import CONTROL_DELTA, MODEL_DELTA, Scaffold, ScaffoldClientState, ScaffoldState
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.registry import ALGORITHMS
from fedbench.core.types import ClientResult, OptimizerSpec, Payload, RoundContext
from fedbench.runtime import run_spec
from fedbench.training import ClientData, materialize
from tests.conftest import tiny_spec
from tests.scenarios.helpers import make

PLAIN_SGD = {"name": "sgd", "lr": 0.05, "momentum": 0.0}


# -- a two-client example on logistic regression, checked against the paper's formulas ----------------------
LINEAR = ModelBuilder("mlp", (2,), 2, (("hidden", ()),))
"""Logistic regression on 2 features, 2 classes: parameters head.weight [2, 2] and head.bias [2]."""


def linear(weight: list[list[float]], bias: list[float]) -> dict[str, np.ndarray]:
    """LINEAR's parameters (or a control variate shaped like them), float32 as they travel."""
    return {"head.weight": np.array(weight, np.float32), "head.bias": np.array(bias, np.float32)}


def client_data(x: list[list[float]], y: list[int]) -> ClientData:
    xs, ys = torch.tensor(x), torch.tensor(y)
    return ClientData(xs, ys, xs, ys, ys, ys)


def ce_gradient(w: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gradient of the mean softmax cross-entropy of logits x w^T + b: with d = (softmax - onehot(y)) / n,
    d^T x for w and the column sums of d for b."""
    logits = x @ w.T + b
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    d = (p - np.eye(w.shape[0])[y]) / len(y)
    return d.T @ x, d.sum(axis=0)


def job(client_id: int, steps: int, lr: float, weight_decay: float = 0.0, round: int = 1) -> RoundContext:
    """Full-batch plain SGD (batch 64 > rows): each epoch is one step on the whole local set."""
    return RoundContext(
        round=round,
        client_id=client_id,
        seed=0,
        local_epochs=steps,
        batch_size=64,
        optimizer=OptimizerSpec(lr=lr, momentum=0.0, weight_decay=weight_decay),
        num_classes=2,
    )


def test_one_round_matches_the_papers_formulas_computed_by_hand():
    """Two clients, K = 2 full-batch steps each, nonzero c and c_i, so the correction acts in every step."""
    lr, K = 0.5, 2
    x = linear([[0.2, -0.1], [0.0, 0.3]], [0.1, -0.2])
    c = linear([[0.05, 0.0], [-0.05, 0.1]], [0.02, -0.02])
    c_own = [linear([[0.1, -0.2], [0.0, 0.05]], [0.0, 0.04]), linear([[0.0, 0.2], [-0.1, 0.15]], [0.04, -0.08])]
    rows = [([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], [0, 0, 1]), ([[2.0, -1.0], [0.5, 0.5]], [1, 0])]

    # By hand, in float64: y <- y - lr (g_i(y) - c_i + c) twice, then option II, the deltas, the server step.
    expected_c_own, expected_dy, expected_dc = [], [], []
    for (xi, yi), ci in zip(rows, c_own, strict=True):
        w, b = x["head.weight"].astype(float), x["head.bias"].astype(float)
        for _ in range(K):
            gw, gb = ce_gradient(w, b, np.array(xi), np.array(yi))
            w = w - lr * (gw - ci["head.weight"] + c["head.weight"])
            b = b - lr * (gb - ci["head.bias"] + c["head.bias"])
        new_w = ci["head.weight"] - c["head.weight"] + (x["head.weight"] - w) / (K * lr)
        new_b = ci["head.bias"] - c["head.bias"] + (x["head.bias"] - b) / (K * lr)
        expected_c_own.append({"head.weight": new_w, "head.bias": new_b})
        expected_dy.append({"head.weight": w - x["head.weight"], "head.bias": b - x["head.bias"]})
        expected_dc.append({"head.weight": new_w - ci["head.weight"], "head.bias": new_b - ci["head.bias"]})
    expected_x = {k: x[k] + 1.0 * (expected_dy[0][k] + expected_dy[1][k]) / 2 for k in x}
    expected_c = {k: c[k] + 2 / 2 * (expected_dc[0][k] + expected_dc[1][k]) / 2 for k in c}

    alg = Scaffold(Scaffold.Config(), LINEAR, num_clients=2, seed=0)
    state = ScaffoldState(Payload(x), c)
    downlink = alg.configure(1, state, [0, 1])
    results = []
    for cid, ((xi, yi), ci) in enumerate(zip(rows, c_own, strict=True)):
        data = client_data(xi, yi)
        uplink, client_state, metrics = alg.client_update(downlink[cid], ScaffoldClientState(ci), data, job(cid, K, lr))
        assert metrics[M.TRAIN_STEPS] == K
        for k in x:
            np.testing.assert_allclose(client_state.control[k], expected_c_own[cid][k], rtol=0, atol=1e-5)
            np.testing.assert_allclose(uplink[MODEL_DELTA][k], expected_dy[cid][k], rtol=0, atol=1e-6)
            np.testing.assert_allclose(uplink[CONTROL_DELTA][k], expected_dc[cid][k], rtol=0, atol=1e-5)
        results.append(ClientResult(cid, uplink))
    new = alg.aggregate(1, state, results)
    for k in x:
        np.testing.assert_allclose(new.global_model.weights[k], expected_x[k], rtol=0, atol=1e-6)
        np.testing.assert_allclose(new.control[k], expected_c[k], rtol=0, atol=1e-5)


def test_the_server_steps_x_by_global_lr_and_c_by_the_sampled_share():
    """N = 4 clients, |S| = 2 sampled, eta_g = 0.5. Parameter w: x + 0.5 mean(Delta y) and c + 2/4 mean(Delta c).
    Buffers have no control variate and no server step: a float buffer becomes the mean of the clients'
    (x + mean(Delta y)); an integer counter is the first client's, as in FedAvg."""
    alg = Scaffold(Scaffold.Config(global_lr=0.5), LINEAR, num_clients=4, seed=0)
    state = ScaffoldState(
        Payload(
            {
                "w": np.array([1.0, 2.0], np.float32),
                "running_mean": np.array([1.0], np.float32),
                "count": np.array(5, np.int64),
            }
        ),
        {"w": np.array([1.0, -1.0], np.float32)},
    )

    def result(cid, dw, dm, dn, dc):
        delta_y = {
            "w": np.array(dw, np.float32),
            "running_mean": np.array(dm, np.float32),
            "count": np.array(dn, np.int64),
        }
        delta_c = {"w": np.array(dc, np.float32)}
        return ClientResult(cid, Payload(extras={MODEL_DELTA: delta_y, CONTROL_DELTA: delta_c}))

    results = [result(0, [2.0, 0.0], [2.0], 3, [2.0, 2.0]), result(3, [0.0, 4.0], [4.0], 7, [4.0, -2.0])]
    new = alg.aggregate(1, state, results)
    x = new.global_model.weights
    np.testing.assert_array_equal(x["w"], [1.5, 3.0])  # (1, 2) + 0.5 * (1, 2)
    np.testing.assert_array_equal(x["running_mean"], [4.0])  # 1 + (2 + 4) / 2
    assert x["count"] == 8 and x["count"].dtype == np.int64  # 5 + 3
    np.testing.assert_array_equal(new.control["w"], [2.5, -1.0])  # (1, -1) + 2/4 * (3, 0)
    assert state.control["w"].tolist() == [1.0, -1.0]  # the old state is not changed in place


# -- on real data, through make_algorithm ---------------------------------------------------------------------
def digits_setup(algorithm: dict, num_clients: int = 4):
    spec = tiny_spec(algorithm=algorithm, optimizer=PLAIN_SGD)
    data, scenario = make({"partition": "dirichlet", "alpha": 0.5, "num_clients": num_clients}, dataset="digits")
    clients = [materialize(data, scenario.view(1, cid), scenario.input_shape) for cid in range(num_clients)]
    return make_algorithm(spec, scenario.input_shape, 10), clients


def digits_job(cid: int, round: int = 1) -> RoundContext:
    return RoundContext(
        round=round,
        client_id=cid,
        seed=0,
        local_epochs=2,
        batch_size=32,
        optimizer=OptimizerSpec(**PLAIN_SGD),
        num_classes=10,
    )


def test_round_one_with_zero_control_variates_is_fedavg_bit_for_bit():
    scaffold, clients = digits_setup({"name": "scaffold"})
    fedavg, _ = digits_setup({"name": "fedavg"})
    state = scaffold.init_state()
    x = state.global_model.weights
    assert all(not v.any() for v in state.control.values())
    uplink, _, _ = scaffold.client_update(
        scaffold.configure(1, state, [2])[2], ScaffoldClientState(), clients[2], digits_job(2)
    )
    reference, _, _ = fedavg.client_update(
        fedavg.init_state().global_model, fedavg.ClientState(), clients[2], digits_job(2)
    )
    assert uplink[MODEL_DELTA].keys() == x.keys()
    assert all(np.array_equal(uplink[MODEL_DELTA][k], reference.weights[k] - x[k]) for k in x)


def test_with_client_sampling_c_stays_the_mean_of_all_clients_control_variates():
    """c <- c + |S|/N mean_S(Delta c) keeps c = (1/N) sum over all N clients of c_i (unsampled ones keep theirs,
    never-sampled ones count 0): the invariant the paper's server update is built on."""
    alg, clients = digits_setup({"name": "scaffold", "client_fraction": 0.5})
    state, own = alg.init_state(), {}
    for round, sampled in enumerate([[0, 1], [1, 3], [2, 3]], start=1):
        payloads = alg.configure(round, state, sampled)
        results = []
        for cid in sampled:
            job_ctx = digits_job(cid, round)
            uplink, own[cid], _ = alg.client_update(
                payloads[cid], own.get(cid, alg.ClientState()), clients[cid], job_ctx
            )
            results.append(ClientResult(cid, uplink))
        state = alg.aggregate(round, state, results)
        for name, c in state.control.items():
            mean = sum(s.control[name].astype(np.float64) for s in own.values()) / len(clients)
            np.testing.assert_allclose(c, mean, rtol=0, atol=1e-5)
    assert any(np.abs(c).max() > 1e-2 for c in state.control.values())  # the invariant is not 0 = 0


def test_full_batch_scaffold_reaches_the_global_optimum_where_fedavg_stops_short():
    """Deterministic gradients, two heterogeneous clients, 5 local steps: SCAFFOLD's fixed point is a stationary
    point of the average objective (here with weight decay, so a unique one exists); FedAvg's is not."""
    rows = [
        ([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, -1.0]], [0, 0, 1, 0]),
        ([[1.0, 0.0], [-1.0, 1.0], [2.0, 0.5]], [1, 0, 1]),
    ]
    clients, lr, wd = [client_data(*r) for r in rows], 0.5, 0.1

    def global_gradient_norm(x) -> float:
        w, b = x["head.weight"].astype(float), x["head.bias"].astype(float)
        grads = [ce_gradient(w, b, np.array(xi), np.array(yi)) for xi, yi in rows]
        gw = sum(g[0] for g in grads) / 2 + wd * w
        gb = sum(g[1] for g in grads) / 2 + wd * b
        return float(np.sqrt((gw**2).sum() + (gb**2).sum()))

    def train(name: str) -> float:
        cls = ALGORITHMS.get(name)
        alg = cls(cls.Config(), LINEAR, num_clients=2, seed=0)
        state, own = alg.init_state(), [alg.ClientState(), alg.ClientState()]
        for round in range(1, 81):
            payloads, results = alg.configure(round, state, [0, 1]), []
            for cid in (0, 1):
                job_ctx = job(cid, 5, lr, wd, round)
                uplink, own[cid], _ = alg.client_update(payloads[cid], own[cid], clients[cid], job_ctx)
                results.append(ClientResult(cid, uplink))
            state = alg.aggregate(round, state, results)
        return global_gradient_norm(state.global_model.weights)

    assert train("scaffold") < 1e-5
    assert train("fedavg") > 1e-2


def test_momentum_and_adam_are_refused_and_global_lr_must_be_positive():
    with pytest.raises(ConfigError) as err:
        tiny_spec(algorithm="scaffold", optimizer={"name": "sgd", "lr": 0.05, "momentum": 0.9})
    assert err.value.field == "optimizer.momentum"
    with pytest.raises(ConfigError) as err:
        tiny_spec(algorithm="scaffold", optimizer={"name": "adam", "lr": 0.001, "momentum": 0.0})
    assert err.value.field == "optimizer.name"
    with pytest.raises(ConfigError) as err:
        tiny_spec(algorithm={"name": "scaffold", "global_lr": 0.0}, optimizer=PLAIN_SGD)
    assert err.value.field == "algorithm.global_lr"


def test_whole_run_meters_x_and_c_down_and_both_deltas_up():
    """The tiny MLP has no buffers: every client downloads x and c and uploads Delta y and Delta c, each the
    parameters' size (and no sample count: the averages are uniform)."""
    spec = tiny_spec(algorithm="scaffold", optimizer=PLAIN_SGD, rounds=2)
    result = run_spec(spec)
    assert result.status == "FINISHED", result.reason
    assert 0.3 < result.final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] <= 1.0
    alg, _ = digits_setup({"name": "scaffold"})
    parameter_bytes = sum(4 * p.numel() for p in alg.builder().parameters())
    for record in result.history:
        assert record[M.COMM_DOWN_BYTES] == 4 * 2 * parameter_bytes
        assert record[M.COMM_UP_BYTES] == 4 * 2 * parameter_bytes
