"""pFedMe: the inner and outer updates by hand on a quadratic, the inner solution against the prox problem's
closed form, the FedAvg limit (K = 1, eta * lam = 1, beta = 1), the server's beta mixing, and where the
personalised model lives and is evaluated."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

from fedbench.algorithms.base import SAMPLES, GlobalState, NoClientState, counted, make_algorithm
from fedbench.algorithms.personal import PersonalClientState, PersonalisedState
from fedbench.algorithms.pfedme import MoreauEnvelope
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult, OptimizerSpec, Payload, RoundContext
from fedbench.runtime import run_spec
from fedbench.training import ClientData, evaluate, materialize, train_local
from tests.conftest import tiny_spec
from tests.scenarios.helpers import make


class Scalar(nn.Module):
    """One parameter theta; the tests' loss f(theta) = a/2 (theta - c)^2 ignores the data."""

    def __init__(self, value: float):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(value))


def quadratic(a: float, c: float):
    return lambda model, x, y: 0.5 * a * (model.w - c) ** 2


def rows(n: int = 8) -> ClientData:
    x, y = torch.zeros(n, 1), torch.zeros(n, dtype=torch.long)
    return ClientData(x, y, x, y, y, y)


def sgd(lr: float, epochs: int, rounds: int = 1) -> RoundContext:
    """Plain SGD, one batch an epoch (the batch holds every row)."""
    return RoundContext(
        round=1,
        client_id=0,
        seed=0,
        local_epochs=epochs,
        batch_size=64,
        optimizer=OptimizerSpec(lr=lr, momentum=0.0),
        num_classes=2,
        rounds=rounds,
    )


def test_inner_steps_and_outer_update_match_hand_computed_numbers():
    """f = (theta - 3)^2 / 2, lam = 1, personal lr 0.25, eta = 0.5, K = 2, two batches, theta and w start at 0.

    Batch 1: theta 0 -> 0 - 0.25 (-3 + 0) = 0.75 -> 0.75 - 0.25 (-2.25 + 0.75) = 1.125; w -> 0 + 0.5 * 1.125 = 0.5625.
    Batch 2 (theta warm-started at 1.125): -> 1.453125 -> 1.6171875; w -> 0.5625 + 0.5 (1.6171875 - 0.5625) =
    1.08984375.
    The loss reported is the mean of each batch's first-step objective: (4.5 + 1.916015625) / 2.
    """
    theta = Scalar(0.0)
    envelope = MoreauEnvelope(theta, lam=1.0, eta=0.5)
    hooks = replace(envelope.hooks(inner_steps=2), loss=quadratic(1.0, 3.0))
    metrics = train_local(theta, rows(), sgd(0.25, epochs=2), hooks)
    assert theta.w.item() == 1.6171875
    assert envelope.local["w"].item() == 1.08984375
    assert metrics[M.TRAIN_LOSS] == (4.5 + 1.916015625) / 2 and metrics[M.TRAIN_STEPS] == 2


def test_many_inner_steps_reach_the_prox_problems_closed_form():
    """argmin a/2 (theta - c)^2 + lam/2 (theta - w)^2 = (a c + lam w) / (a + lam): with a = 1, c = 3, lam = 3,
    w = 1 that is 1.5; 200 steps of lr 0.1 contract the error by 0.6^200. Then w moves by eta lam (theta - w)."""
    theta = Scalar(1.0)
    envelope = MoreauEnvelope(theta, lam=3.0, eta=0.1)
    train_local(theta, rows(), sgd(0.1, epochs=1), replace(envelope.hooks(inner_steps=200), loss=quadratic(1.0, 3.0)))
    assert theta.w.item() == pytest.approx(1.5, abs=1e-6)
    assert envelope.local["w"].item() == pytest.approx(1.0 + 0.1 * 3.0 * (1.5 - 1.0), abs=1e-6)
    # a larger lam pulls the inner solution towards w: (3 + 30) / 31
    theta = Scalar(1.0)
    envelope = MoreauEnvelope(theta, lam=30.0, eta=0.01)
    train_local(theta, rows(), sgd(0.02, epochs=1), replace(envelope.hooks(inner_steps=200), loss=quadratic(1.0, 3.0)))
    assert theta.w.item() == pytest.approx(33.0 / 31.0, abs=1e-6)


def client_setup():
    data, scenario = make({"partition": "dirichlet", "alpha": 0.5, "num_clients": 4}, dataset="digits")
    client = materialize(data, scenario.view(1, 2), scenario.input_shape)
    return scenario.input_shape, client


def algorithm(shape, **config):
    return make_algorithm(tiny_spec(algorithm={"name": "pfedme", **config}), shape, 10)


def context(lr: float, momentum: float = 0.0, cid: int = 2) -> RoundContext:
    return RoundContext(
        round=1,
        client_id=cid,
        seed=0,
        local_epochs=2,
        batch_size=32,
        optimizer=OptimizerSpec(lr=lr, momentum=momentum),
        num_classes=10,
    )


def test_one_inner_step_with_eta_lam_one_is_a_fedavg_sgd_step_at_the_personal_lr():
    """With eta * lam = 1 the outer update sets w to theta, so every batch's inner step starts at w, where the
    proximal gradient is 0: theta = w - personal_lr grad f(w), w <- theta. K = 1 and beta = 1 is FedAvg with
    plain SGD at `personal_lr`, up to float rounding of w - (w - theta)."""
    shape, client = client_setup()
    pfedme = algorithm(shape, inner_steps=1, lam=10.0, personal_lr=0.05, beta=1.0)
    fedavg = make_algorithm(tiny_spec(algorithm="fedavg"), shape, 10)
    start = pfedme.init_state().global_model
    ours, state, _ = pfedme.client_update(
        start, PersonalClientState(), client, context(lr=0.1, momentum=0.9)
    )  # momentum: unused
    theirs, _, _ = fedavg.client_update(start, NoClientState(), client, context(lr=0.05))
    moved = max(np.abs(theirs.weights[k] - start.weights[k]).max() for k in start.weights)
    assert moved > 1e-2
    for k in start.weights:
        np.testing.assert_allclose(ours.weights[k], theirs.weights[k], rtol=0, atol=1e-6)
        np.testing.assert_allclose(state.personal[k], theirs.weights[k], rtol=0, atol=1e-6)


def test_server_mixes_the_sample_weighted_average_in_with_beta():
    alg = algorithm((1, 8, 8), beta=2.0)
    state = PersonalisedState(Payload({"w": np.array([0.5], dtype=np.float32)}), personalised=frozenset({3}))
    results = [
        ClientResult(0, counted({"w": np.array([1.0], dtype=np.float32)}, 1)),
        ClientResult(1, counted({"w": np.array([3.0], dtype=np.float32)}, 3)),
    ]
    new = alg.aggregate(1, state, results)
    # average (1 * 1 + 3 * 3) / 4 = 2.5; (1 - 2) * 0.5 + 2 * 2.5 = 4.5
    assert new.global_model.weights["w"].tolist() == [4.5]
    assert new.personalised == {0, 1, 3}
    fedavg = make_algorithm(tiny_spec(algorithm="fedavg"), (1, 8, 8), 10).aggregate(
        1, GlobalState(state.global_model), results
    )
    assert (
        algorithm((1, 8, 8)).aggregate(1, state, results).global_model.weights["w"].tolist()
        == fedavg.global_model.weights["w"].tolist()
    )


def test_the_personalised_model_stays_on_the_client_and_is_what_local_accuracy_evaluates():
    shape, client = client_setup()
    alg = algorithm(shape)
    state = alg.init_state()
    uplink, client_state, _ = alg.client_update(
        state.global_model, PersonalClientState(), client, context(lr=0.005, momentum=0.9)
    )
    theta = client_state.personal
    assert set(uplink.sections) == {"weights", SAMPLES}
    assert any(not np.array_equal(uplink.weights[k], theta[k]) for k in theta)  # w travels, theta does not
    state = alg.aggregate(1, state, [ClientResult(2, uplink)])
    payloads = alg.evaluation_payloads(state, [1, 2])
    assert not payloads[2].sections and payloads[1] is state.global_model  # a client without theta evaluates w
    entries = alg.system_payloads(state, [1, 2])  # for the vote, 2 uploads theta and 1 uses w
    assert not entries[2].sections and entries[1] is state.global_model
    never_trained = PersonalClientState()
    assert not alg.client_share(state.global_model, never_trained).sections  # a client that never trained votes with w
    assert alg.client_share(payloads[2], PersonalClientState(theta)).weights is theta
    local = alg.client_evaluate(payloads[2], client_state, client, context(lr=0.005))
    assert local == evaluate(alg.model_with(theta), client)
    assert local != evaluate(alg.model_with(state.global_model.weights), client)


def test_bad_configs_are_rejected_naming_the_field():
    for field, value in (("lam", 0.0), ("inner_steps", 0), ("inner_steps", 2.5), ("personal_lr", 0.0), ("beta", 0.0)):
        with pytest.raises(ConfigError) as err:
            tiny_spec(algorithm={"name": "pfedme", field: value})
        assert err.value.field == f"algorithm.{field}"


def test_optimizer_settings_pfedme_ignores_are_warned_about_at_load():
    with pytest.warns(UserWarning, match=r"pFedMe ignores optimizer.momentum = 0.9") as caught:
        tiny_spec(algorithm="pfedme")  # TINY: sgd, momentum 0.9
    assert len(caught) == 1
    with pytest.warns(UserWarning, match=r"optimizer.name = adam, optimizer.weight_decay = 0.01"):
        tiny_spec(algorithm="pfedme", optimizer={"name": "adam", "lr": 0.01, "momentum": 0.0, "weight_decay": 0.01})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tiny_spec(algorithm="pfedme", optimizer={"name": "sgd", "lr": 0.02, "momentum": 0.0})  # plain SGD: silent


def test_whole_run_evaluates_personal_models_without_downloads():
    result = run_spec(tiny_spec(algorithm="pfedme", rounds=3, optimizer={"name": "sgd", "lr": 0.02}))
    assert result.status == "FINISHED", result.reason
    assert [rec[M.COMM_EVAL_DOWN_BYTES] for rec in result.history[:2]] == [0.0, 0.0]  # every client holds theta
    assert 0.3 < result.final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] <= 1.0
    assert 0.0 < result.final[M.FINAL_PREFIX + M.ACC_SYSTEM] <= 1.0
    # the vote's models: each client uploads theta once after the last round, as evaluation traffic
    model_bytes = result.history[0][M.COMM_DOWN_BYTES] / 4
    assert [rec[M.COMM_EVAL_UP_BYTES] for rec in result.history] == [0.0, 0.0, 4 * model_bytes]
