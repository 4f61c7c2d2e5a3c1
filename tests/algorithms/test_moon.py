"""MOON: the contrastive term against a hand computation, mu = 0 is FedAvg exactly, and a whole run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedbench.algorithms.base import ModelBuilder, NoClientState
from fedbench.algorithms.fedavg import FedAvg
from fedbench.algorithms.moon import MOON, ContrastiveHooks, MOONClientState, model_contrastive_loss
from fedbench.core.errors import ConfigError
from fedbench.core.types import OptimizerSpec, Payload, RoundContext
from fedbench.data import load_dataset
from fedbench.models import build_model
from fedbench.runtime import run_spec
from fedbench.training import ClientData, get_weights, set_weights
from tests.conftest import tiny_spec

TAU = 0.5


def tiny_mlp(w1, b1) -> torch.nn.Module:
    """mlp on 2 inputs, 3 hidden units (the representation), 2 classes, with the given first layer."""
    model = build_model("mlp", (2,), 2, hidden=[3])
    with torch.no_grad():
        model.body[0].weight.copy_(torch.tensor(w1, dtype=torch.float32))
        model.body[0].bias.copy_(torch.tensor(b1, dtype=torch.float32))
    return model


def hand_l_con(x, current, glob, prev, tau):
    """l_con per MOON eq. 3 with numpy, averaged over the samples."""

    def rep(w, b):
        return np.maximum(x @ np.asarray(w).T + np.asarray(b), 0.0)

    z, zg, zp = rep(*current), rep(*glob), rep(*prev)

    def cos(a, b):
        return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))

    pos, neg = np.exp(cos(z, zg) / tau), np.exp(cos(z, zp) / tau)
    return float(np.mean(-np.log(pos / (pos + neg))))


CURRENT = ([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], [0.1, 0.2, 0.0])
GLOBAL = ([[0.5, 0.5], [1.0, -1.0], [0.0, 2.0]], [0.0, 0.3, 0.1])
PREV = ([[2.0, 0.0], [-1.0, 1.0], [0.5, 0.5]], [0.2, 0.2, 0.2])
X = np.array([[1.0, 2.0], [0.5, -0.3]])


def test_contrastive_loss_equals_a_hand_computation_on_two_samples():
    models = [tiny_mlp(*w) for w in (CURRENT, GLOBAL, PREV)]
    x = torch.tensor(X, dtype=torch.float32)
    mu = 3.0
    hooks = ContrastiveHooks(mu, TAU, models[1], models[2])
    logits = hooks.forward(models[0], x)
    assert torch.equal(logits, models[0](x))  # the forward hook is the model's own forward
    got = hooks.extra_loss(models[0], x, torch.zeros(2, dtype=torch.long), logits).item()
    expected = hand_l_con(X, CURRENT, GLOBAL, PREV, TAU)
    assert got == pytest.approx(mu * expected, rel=1e-5)
    assert expected > 0.1  # a real case: the three representations differ
    # the function alone, on explicit representations
    z, zg, zp = (torch.tensor(a) for a in ([[1.0, 0.0]], [[1.0, 0.0]], [[0.0, 1.0]]))
    expected_single = -np.log(np.exp(1 / TAU) / (np.exp(1 / TAU) + np.exp(0 / TAU)))  # cos 1 with glob, 0 with prev
    assert model_contrastive_loss(z, zg, zp, TAU).item() == pytest.approx(expected_single, rel=1e-6)


def test_first_round_uses_the_global_model_as_previous_constant_log2_no_gradient():
    current, glob = tiny_mlp(*CURRENT), tiny_mlp(*GLOBAL)
    x = torch.tensor(X, dtype=torch.float32)
    hooks = ContrastiveHooks(1.0, TAU, glob, None)
    loss = hooks.extra_loss(current, x, None, hooks.forward(current, x))
    assert loss.item() == pytest.approx(np.log(2), rel=1e-6)
    loss.backward()
    assert all(p.grad is None or torch.all(p.grad == 0) for p in current.parameters())


def digits_client(n_train=120) -> ClientData:
    data = load_dataset("digits")
    x, y = torch.from_numpy(np.array(data.x[: n_train + 60])), torch.from_numpy(data.y[: n_train + 60].astype(np.int64))
    return ClientData(x[:n_train], y[:n_train], x[n_train:], y[n_train:], y[:n_train], y[n_train:])


def make(cls, **config):
    builder = ModelBuilder("mlp", (1, 8, 8), 10, (("hidden", (16,)),))
    return cls(cls.Config(**config), builder, num_clients=2, seed=0)


def ctx(round=2):
    return RoundContext(
        round=round,
        client_id=0,
        seed=0,
        local_epochs=2,
        batch_size=16,
        optimizer=OptimizerSpec(lr=0.05, momentum=0.9),
        num_classes=10,
    )


def test_mu_zero_is_fedavg_bit_for_bit_and_mu_one_is_not():
    data = digits_client()
    fedavg, moon0, moon1 = make(FedAvg), make(MOON, mu=0.0), make(MOON, mu=1.0)
    payload = Payload(get_weights(fedavg.builder.initial(0)))
    other = fedavg.builder()
    previous = get_weights(other)  # a previous local model unlike the global one: l_con has a real gradient
    reference, _, _ = fedavg.client_update(payload, NoClientState(), data, ctx())
    zero, state, _ = moon0.client_update(payload, MOONClientState(previous), data, ctx())
    one, _, _ = moon1.client_update(payload, MOONClientState(previous), data, ctx())
    assert all(np.array_equal(reference.weights[k], zero.weights[k]) for k in reference.weights)
    assert not all(np.array_equal(reference.weights[k], one.weights[k]) for k in reference.weights)
    # the new previous model is the locally trained one
    assert all(np.array_equal(state.previous[k], zero.weights[k]) for k in state.previous)


def test_previous_model_moves_the_update_away_from_itself():
    """With the previous model as the negative, the trained representation ends farther from it (in cosine)
    than FedAvg's does: the term does what it is for."""
    data = digits_client()
    fedavg, moon = make(FedAvg), make(MOON, mu=5.0)
    payload = Payload(get_weights(fedavg.builder.initial(0)))
    prev_model = fedavg.builder()
    set_weights(prev_model, payload.weights)
    with torch.no_grad():
        for p in prev_model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    previous = get_weights(prev_model)
    plain, _, _ = fedavg.client_update(payload, NoClientState(), data, ctx())
    contrast, _, _ = moon.client_update(payload, MOONClientState(previous), data, ctx())
    x, _ = data.train_batch(torch.arange(data.num_train))

    def mean_cos(uplink, ref):
        model = fedavg.builder()
        set_weights(model, uplink.weights)
        with torch.no_grad():
            return torch.nn.functional.cosine_similarity(model.represent(x), ref.represent(x), dim=1).mean().item()

    assert mean_cos(contrast, prev_model) < mean_cos(plain, prev_model)


def test_config_rejects_bad_values():
    with pytest.raises(ConfigError, match="^tau: "):
        MOON.Config(tau=0.0)
    with pytest.raises(ConfigError, match="^mu: "):
        MOON.Config(mu=-1.0)


def test_whole_run_is_fedavg_in_round_one_and_contrastive_after():
    """Round 1 has no previous models (zero-gradient term: FedAvg's accuracy exactly, loss + mu log 2);
    from round 2 the previous models kept in client state make the runs differ."""
    moon = run_spec(tiny_spec(algorithm={"name": "moon", "mu": 1.0}, rounds=3))
    fedavg = run_spec(tiny_spec(algorithm="fedavg", rounds=3))
    assert moon.status == "FINISHED", moon.reason
    assert len(moon.history) == 3
    first, later = moon.history[0], moon.history[1:]
    assert first["acc_local_mean"] == fedavg.history[0]["acc_local_mean"]
    assert first["train_loss_mean"] == pytest.approx(fedavg.history[0]["train_loss_mean"] + np.log(2), rel=1e-5)
    assert any(m["acc_local_mean"] != f["acc_local_mean"] for m, f in zip(later, fedavg.history[1:], strict=True))
    assert moon.history[-1]["acc_local_mean"] > 0.3
