"""FedOpt (FedAdam, FedYogi, FedAdagrad): Algorithm 2's m and v after two rounds by hand, the sign-like limit
of FedAdam, sample weighting of the pseudo-gradient, buffers left to FedAvg's average, v's start at tau^2,
the defaults, and nothing but FedAvg's payloads on the wire."""

from __future__ import annotations

import numpy as np
import pytest

from fedbench.algorithms.base import ModelBuilder, counted, make_algorithm
from fedbench.algorithms.fedopt import FedAdam
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult
from fedbench.runtime import run_spec
from tests.conftest import tiny_spec


def algorithm(name: str, **config):
    return make_algorithm(tiny_spec(algorithm={"name": name, **config}), (1, 8, 8), 10)


def send(state, changes: list[tuple[list[float], int]]) -> list[ClientResult]:
    """Client results whose models are the global `w` plus each change, with the given sample counts."""
    w = state.global_model.weights["w"]
    return [ClientResult(cid, counted({"w": w + np.array(change)}, n)) for cid, (change, n) in enumerate(changes)]


def test_fedadam_with_no_memory_steps_delta_over_its_magnitude_plus_tau():
    """beta1 = beta2 = 0: m = Delta, v = Delta^2, so the step is eta Delta / (|Delta| + tau), elementwise."""
    alg = algorithm("fedadam", server_lr=1.0, beta1=0.0, beta2=0.0, tau=0.125)
    state = alg.initial_state({"w": np.array([1.0, -2.0, 0.5])}, ["w"])
    # sample-weighted Delta = (1 * a + 3 * b) / 4 = [0.25, -0.125, 0]; a plain mean would give [0.25, -0.25, 0.1]
    results = send(state, [([0.25, -0.5, 0.3], 1), ([0.25, 0.0, -0.1], 3)])
    w = alg.aggregate(1, state, results).global_model.weights["w"]
    # 0.25 / (0.25 + 0.125) = 2/3;  -0.125 / (0.125 + 0.125) = -1/2;  0 / (0 + 0.125) = 0
    assert w == pytest.approx([1.0 + 2 / 3, -2.5, 0.5], rel=1e-12)


FIRST, SECOND = [0.7, -0.2], [0.1, 0.4]
"""Two rounds' pseudo-gradients for the two-step examples (beta1 = beta2 = 0.5, tau = 0.1, eta = 1)."""

# m is the same rule for all three: m0 = 0.5 * FIRST = [0.35, -0.1]; m1 = 0.5 * m0 + 0.5 * SECOND = [0.225, 0.15].
# v starts at tau^2 = 0.01; FIRST^2 = [0.49, 0.04], SECOND^2 = [0.01, 0.16].
TWO_STEPS = {
    # v0 = 0.5 * 0.01 + 0.5 * [0.49, 0.04] = [0.25, 0.025];  v1 = 0.5 * v0 + 0.5 * [0.01, 0.16] = [0.13, 0.0925]
    "fedadam": ([0.25, 0.025], [0.13, 0.0925]),
    # v0 = 0.01 + 0.5 * [0.49, 0.04] (both squares above v: sign -1) = [0.255, 0.03];
    # v1: 0.255 > 0.01 shrinks by only 0.5 * 0.01 -> 0.25; 0.03 < 0.16 grows by 0.5 * 0.16 -> 0.11
    "fedyogi": ([0.255, 0.03], [0.25, 0.11]),
    # v0 = 0.01 + [0.49, 0.04] = [0.5, 0.05];  v1 = v0 + [0.01, 0.16] = [0.51, 0.21]
    "fedadagrad": ([0.5, 0.05], [0.51, 0.21]),
}


@pytest.mark.parametrize("name", TWO_STEPS)
def test_two_rounds_by_hand(name):
    beta2 = {} if name == "fedadagrad" else {"beta2": 0.5}
    alg = algorithm(name, server_lr=1.0, beta1=0.5, tau=0.1, **beta2)
    x0 = np.array([1.0, 2.0])
    state = alg.initial_state({"w": x0}, ["w"])
    assert state.slots["w"]["v"] == pytest.approx([0.01, 0.01], rel=1e-12)  # v_{-1} = tau^2
    moments = []
    for round, change in enumerate([FIRST, SECOND], start=1):
        state = alg.aggregate(round, state, send(state, [(change, 4)]))
        moments.append(state.slots["w"])
    (v0, v1), (m0, m1) = TWO_STEPS[name], ([0.35, -0.1], [0.225, 0.15])
    assert moments[0]["m"] == pytest.approx(m0, rel=1e-9) and moments[0]["v"] == pytest.approx(v0, rel=1e-9)
    assert moments[1]["m"] == pytest.approx(m1, rel=1e-9) and moments[1]["v"] == pytest.approx(v1, rel=1e-9)
    x2 = x0 + np.array(m0) / (np.sqrt(v0) + 0.1) + np.array(m1) / (np.sqrt(v1) + 0.1)
    assert state.global_model.weights["w"] == pytest.approx(x2, rel=1e-9)


def test_buffers_take_fedavgs_average_and_only_parameters_get_slots():
    alg = algorithm("fedadam")
    weights = {
        "w": np.array([1.0], np.float32),
        "bn.running_var": np.array([1.0], np.float32),
        "bn.num_batches_tracked": np.array(5, np.int64),
    }
    state = alg.initial_state(weights, ["w"])
    results = [
        ClientResult(
            0,
            counted(
                {
                    "w": np.array([2.0], np.float32),
                    "bn.running_var": np.array([0.5], np.float32),
                    "bn.num_batches_tracked": np.array(9, np.int64),
                },
                1,
            ),
        ),
        ClientResult(
            1,
            counted(
                {
                    "w": np.array([0.0], np.float32),
                    "bn.running_var": np.array([2.0], np.float32),
                    "bn.num_batches_tracked": np.array(7, np.int64),
                },
                3,
            ),
        ),
    ]
    new = alg.aggregate(1, state, results).global_model.weights
    assert new["bn.running_var"][0] == np.float32(0.25 * 0.5 + 0.75 * 2.0)  # the average, not a step
    assert new["bn.num_batches_tracked"] == 9 and new["bn.num_batches_tracked"].dtype == np.int64  # FedAvg's: the first
    assert new["w"].dtype == np.float32 and new["w"][0] != np.float32(0.5)  # stepped, not averaged
    # a real model with BatchNorm: its parameters get slots, its running statistics and counter do not
    bn = FedAdam(FedAdam.Config(), ModelBuilder("cnn_cifar", (3, 32, 32), 10), num_clients=2, seed=0).init_state()
    assert set(bn.slots) == {k for k in bn.global_model.weights if k.endswith(("weight", "bias"))}
    assert any("running_var" in k for k in bn.global_model.weights)


def test_defaults_and_bad_configs():
    adam, yogi, adagrad = (tiny_spec(algorithm=n).algorithm.kwargs for n in ("fedadam", "fedyogi", "fedadagrad"))
    assert adam == yogi and {k: adam[k] for k in ("server_lr", "beta1", "beta2", "tau")} == {
        "server_lr": 0.01,
        "beta1": 0.9,
        "beta2": 0.99,
        "tau": 1e-3,
    }
    assert {k: adagrad[k] for k in ("server_lr", "beta1", "tau")} == {"server_lr": 0.1, "beta1": 0.0, "tau": 1e-3}
    with pytest.raises(
        ConfigError, match="parameters of algorithm fedadagrad are: beta1, client_fraction, server_lr, tau"
    ):  # Adagrad has no second-moment decay
        tiny_spec(algorithm={"name": "fedadagrad", "beta2": 0.5})
    bad = [
        ("fedadam", "beta1", 1.0),
        ("fedadam", "beta1", -0.1),
        ("fedyogi", "beta2", 1.0),
        ("fedadam", "tau", 0.0),
        ("fedyogi", "tau", -1e-3),
        ("fedadagrad", "server_lr", 0.0),
        ("fedadam", "server_lr", float("nan")),
        ("fedadagrad", "beta1", 1.5),
    ]
    for name, field, value in bad:
        with pytest.raises(ConfigError) as err:
            tiny_spec(algorithm={"name": name, field: value})
        assert err.value.field == f"algorithm.{field}", (name, field, value)


def test_whole_run_sends_exactly_what_fedavg_sends():
    runs = {name: run_spec(tiny_spec(algorithm=name, rounds=2)) for name in ("fedavg", "fedyogi")}
    assert all(r.status == "FINISHED" for r in runs.values()), [r.reason for r in runs.values()]
    for key in (M.COMM_UP_BYTES, M.COMM_DOWN_BYTES):
        assert [h[key] for h in runs["fedyogi"].history] == [h[key] for h in runs["fedavg"].history]
    assert 0.0 <= runs["fedyogi"].final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] <= 1.0
