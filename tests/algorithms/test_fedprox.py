"""FedProx: the proximal term's value, mu = 0 is FedAvg bit for bit, and a larger mu keeps clients closer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedbench.algorithms.fedprox import proximal_term
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.runtime import run_spec
from tests.algorithms.conftest import client_setup
from tests.conftest import tiny_spec


def test_proximal_term_is_half_mu_squared_distance_over_trainable_parameters():
    model = nn.Linear(2, 1)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 2.0]]))
        model.bias.copy_(torch.tensor([3.0]))
    anchor = {"weight": torch.zeros(1, 2), "bias": torch.tensor([1.0])}
    term = proximal_term(0.5, anchor)
    # ||(1, 2) - (0, 0)||^2 + (3 - 1)^2 = 1 + 4 + 4 = 9; mu / 2 * 9 = 2.25
    assert term(model, None, None, None).item() == pytest.approx(2.25)
    model.bias.requires_grad_(False)  # a frozen parameter is not optimised, so not in the objective
    assert term(model, None, None, None).item() == pytest.approx(1.25)


def update(algorithm: dict):
    alg, client, ctx = client_setup(algorithm, local_epochs=2)
    state = alg.init_state()
    uplink, _, _ = alg.client_update(state.global_model, alg.ClientState(), client, ctx)
    return state.global_model.weights, uplink


def test_mu_zero_is_fedavg_bit_for_bit():
    _, prox = update({"name": "fedprox", "mu": 0.0})
    _, avg = update({"name": "fedavg"})
    assert prox.sections.keys() == avg.sections.keys()
    assert all(np.array_equal(prox[s][k], avg[s][k]) for s in avg.sections for k in avg[s])


def test_larger_mu_keeps_the_local_model_closer_to_the_global_one():
    def distance(mu: float) -> float:
        start, uplink = update({"name": "fedprox", "mu": mu})
        return float(sum(((uplink.weights[k] - start[k]) ** 2).sum() for k in start))

    free, pulled = distance(0.0), distance(1.0)
    assert pulled < 0.5 * free


def test_negative_mu_is_rejected():
    with pytest.raises(ConfigError) as err:
        tiny_spec(algorithm={"name": "fedprox", "mu": -0.1})
    assert err.value.field == "algorithm.mu"


def test_whole_run():
    result = run_spec(tiny_spec(algorithm={"name": "fedprox", "mu": 0.01}, rounds=2))
    assert result.status == "FINISHED", result.reason
    assert 0.3 < result.final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] <= 1.0
