"""APFL: one step of w, v and alpha by hand on a tiny linear model, the FedAvg limit (alpha = 0 fixed) bit for
bit with the same random stream, which model travels and which is evaluated."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from torch import nn

from fedbench.algorithms.apfl import APFLClientState, MixedPair
from fedbench.algorithms.base import SAMPLES, make_algorithm
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult, OptimizerSpec, RoundContext
from fedbench.runtime import run_spec
from fedbench.runtime.worker import torch_job_scope
from fedbench.training import ClientData, evaluate, get_weights, materialize, train_local
from tests.conftest import tiny_spec
from tests.scenarios.helpers import make


def linear(rows: list[list[float]]) -> nn.Linear:
    model = nn.Linear(1, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor(rows))
    return model


def one_sample_step(alpha: float, lr: float) -> MixedPair:
    """One plain SGD step on the single sample x = 1, y = 0 of a pair w = 0, v = [[2], [0]] (2 classes, 1 input)."""
    x, y = torch.ones(1, 1), torch.zeros(1, dtype=torch.long)
    pair = MixedPair(linear([[0.0], [0.0]]), linear([[2.0], [0.0]]), alpha, adaptive=True)
    job = RoundContext(
        round=1,
        client_id=0,
        seed=0,
        local_epochs=1,
        batch_size=1,
        num_classes=2,
        optimizer=OptimizerSpec(lr=lr, momentum=0.0),
    )
    train_local(pair, ClientData(x, y, x, y, y, y), job, pair.hooks(lr))
    return pair


def test_one_step_of_w_v_and_alpha_matches_the_hand_computed_gradients():
    """alpha = 0.5: v_bar = [[1], [0]], logits (1, 0), p0 = sigmoid(1); grad f(v_bar) = [[p0 - 1], [1 - p0]].
    w (logits 0, p = 1/2) steps on its own loss only: w = -0.1 [[-1/2], [1/2]]. v gets alpha grad f(v_bar).
    alpha gets <v - w, grad f(v_bar)> = 2 (p0 - 1), all gradients taken before any step."""
    p0 = 1 / (1 + math.exp(-1))
    pair = one_sample_step(alpha=0.5, lr=0.1)
    np.testing.assert_allclose(pair.shared.weight.detach().numpy(), [[0.05], [-0.05]], rtol=1e-6)
    np.testing.assert_allclose(
        pair.personal.weight.detach().numpy(), [[2 - 0.1 * 0.5 * (p0 - 1)], [-0.1 * 0.5 * (1 - p0)]], rtol=1e-6
    )
    assert pair.alpha.item() == pytest.approx(0.5 - 0.1 * 2 * (p0 - 1), rel=1e-6)
    assert pair.alpha.grad is None  # the step consumed it
    assert one_sample_step(alpha=0.5, lr=100.0).alpha.item() == 1.0  # projected onto [0, 1]


def setup(num_clients: int = 3):
    data, scenario = make({"partition": "dirichlet", "alpha": 0.5, "num_clients": num_clients}, dataset="digits")
    return scenario.input_shape, [
        materialize(data, scenario.view(1, c), scenario.input_shape) for c in range(num_clients)
    ]


def algorithm(shape, name: str = "apfl", **config):
    return make_algorithm(tiny_spec(algorithm={"name": name, **config}), shape, 10)


def context(cid: int, round: int = 1) -> RoundContext:
    return RoundContext(
        round=round,
        client_id=cid,
        seed=0,
        local_epochs=1,
        batch_size=32,
        optimizer=OptimizerSpec(lr=0.05, momentum=0.9),
        num_classes=10,
    )


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def play(alg, clients, rounds: int):
    """`rounds` rounds of every client inside seeded job scopes; returns the states, the global models and
    what each job left on the random stream."""
    state, client_states, globals_, draws = alg.init_state(), [alg.ClientState() for _ in clients], [], []
    for round in range(1, rounds + 1):
        results = []
        for cid, data in enumerate(clients):
            with torch_job_scope(100 * round + cid, 1):
                uplink, client_states[cid], _ = alg.client_update(
                    state.global_model, client_states[cid], data, context(cid, round)
                )
                draws.append(torch.rand(4))
            results.append(ClientResult(cid, uplink))
        state = alg.aggregate(round, state, results)
        globals_.append(state.global_model.weights)
    return state, client_states, globals_, draws


def test_alpha_zero_fixed_is_fedavg_bit_for_bit_with_the_same_random_stream():
    shape, clients = setup()
    apfl = algorithm(shape, alpha=0.0, adaptive_alpha=False)
    fedavg = algorithm(shape, "fedavg")
    state, client_states, ours, our_draws = play(apfl, clients, rounds=2)
    fed_state, _, theirs, their_draws = play(fedavg, clients, rounds=2)
    assert all(same(a, b) for a, b in zip(ours, theirs, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(our_draws, their_draws, strict=True))
    assert all(s.alpha == 0.0 for s in client_states)
    assert same(client_states[0].personal, get_weights(apfl.builder.initial(apfl.seed)))  # v never moved
    for cid, data in enumerate(clients):  # the evaluated mixture is the global model
        job = context(cid, 2)
        assert apfl.client_evaluate(state.global_model, client_states[cid], data, job) == fedavg.client_evaluate(
            fed_state.global_model, fedavg.ClientState(), data, job
        )


def test_only_w_travels_v_and_alpha_stay_and_the_mixture_is_evaluated():
    shape, clients = setup()
    alg = algorithm(shape)
    start = alg.init_state().global_model
    uplink, state, _ = alg.client_update(start, APFLClientState(), clients[0], context(0))
    assert set(uplink.sections) == {"weights", SAMPLES}
    assert not same(uplink.weights, state.personal) and not same(uplink.weights, start.weights)
    assert state.alpha != 0.25  # adaptive by default
    _, state2, _ = alg.client_update(start, state, clients[0], context(0, 2))
    assert not same(state2.personal, state.personal)  # v continues from the client state
    # alpha picks the model evaluated: 1 is v alone, 0 the global model
    by_v, by_w = (
        evaluate(alg.model_with(state.personal), clients[0]),
        evaluate(alg.model_with(uplink.weights), clients[0]),
    )
    assert by_v != by_w
    assert alg.client_evaluate(uplink, dataclasses.replace(state, alpha=1.0), clients[0], context(0)) == by_v
    assert alg.client_evaluate(uplink, dataclasses.replace(state, alpha=0.0), clients[0], context(0)) == by_w
    never_trained = APFLClientState()
    assert alg.client_evaluate(uplink, never_trained, clients[0], context(0)) == by_w  # the global model
    fixed_alpha = algorithm(shape, alpha=0.25, adaptive_alpha=False)
    fixed = fixed_alpha.client_update(start, never_trained, clients[0], context(0))[1]
    assert fixed.alpha == 0.25


def test_bad_configs_are_rejected_naming_the_field():
    for field, value in (("alpha", -0.1), ("alpha", 1.5)):
        with pytest.raises(ConfigError) as err:
            tiny_spec(algorithm={"name": "apfl", field: value})
        assert err.value.field == f"algorithm.{field}"


def test_whole_run():
    result = run_spec(tiny_spec(algorithm="apfl", rounds=2))
    assert result.status == "FINISHED", result.reason
    model_bytes = result.history[0][M.COMM_DOWN_BYTES] / 4  # v_bar is uploaded once, for the vote only
    assert [rec[M.COMM_EVAL_UP_BYTES] for rec in result.history] == [0.0, 4 * model_bytes]
    assert 0.3 < result.final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] <= 1.0
    assert 0.0 < result.final[M.FINAL_PREFIX + M.ACC_SYSTEM] <= 1.0
