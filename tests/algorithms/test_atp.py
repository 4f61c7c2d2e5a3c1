"""ATP: zero rates are no adaptation and FedAvg's numbers; adaptation reads inputs only; the rate meta-gradient
is exact (closed form, finite differences); BN-statistics rates re-estimate the statistics and undo a covariate
shift, and the meta-steps learn to use them."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

from fedbench.algorithms import atp as A
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult, Payload
from fedbench.runtime import run_spec
from fedbench.runtime.worker import torch_job_scope
from tests.algorithms.conftest import client_setup
from tests.conftest import tiny_spec


def bn_net(dtype=torch.float32) -> nn.Module:
    """Linear -> BatchNorm1d -> ReLU -> Linear on 64 inputs (digits), every ATP module kind."""
    return nn.Sequential(nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10)).to(dtype)


def state_of(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# -- the adaptation step --------------------------------------------------------------------------------
def test_rate_modules_are_the_parameters_and_the_running_statistics():
    assert A.rate_modules(bn_net()) == [
        "0.weight",
        "0.bias",
        "1.weight",
        "1.bias",
        "1.running_mean",
        "1.running_var",
        "3.weight",
        "3.bias",
    ]


def test_zero_rates_leave_the_model_bit_for_bit():
    torch.manual_seed(0)
    model = bn_net()
    state = state_of(model)
    x = torch.randn(16, 64) * 3 + 1
    rates = {name: torch.tensor(0.0) for name in A.rate_modules(model)}
    adapted = A.adapt_batch(model, state, rates, x)
    assert adapted.keys() == state.keys()
    assert all(torch.equal(adapted[k], state[k]) for k in state)


def test_a_statistics_rate_of_one_sets_them_to_the_batch_statistics():
    """h = running - batch statistic, so rate 1 is BN-statistics re-estimation on the batch (AdaBN)."""
    torch.manual_seed(0)
    model = bn_net()
    state = state_of(model)
    x = torch.randn(16, 64) * 2 + 0.5
    rates = {"1.running_mean": torch.tensor(1.0), "1.running_var": torch.tensor(1.0)}
    adapted = A.adapt_batch(model, state, rates, x)
    z = model[0](x).detach()  # the BatchNorm layer's input
    assert torch.allclose(adapted["1.running_mean"], z.mean(dim=0), atol=1e-6)
    assert torch.allclose(adapted["1.running_var"], z.var(dim=0), atol=1e-5)  # unbiased, as the released code
    assert torch.equal(adapted["0.weight"], state["0.weight"])  # modules without a rate do not move


def test_positive_rates_change_predictions_by_descending_the_entropy():
    torch.manual_seed(0)
    model = bn_net()
    state = state_of(model)
    x = torch.randn(32, 64)
    rates = {name: torch.tensor(0.5) for name in ("3.weight", "3.bias", "0.weight")}
    before = A.forward(model, state, x)
    after = A.forward(model, A.adapt_batch(model, state, rates, x), x)
    assert A.entropy(after) < A.entropy(before)
    assert not torch.equal(before.argmax(1), after.argmax(1))


# -- the rate meta-gradient -----------------------------------------------------------------------------
class BiasOnly(nn.Module):
    """logits = b for every sample: the entropy and cross-entropy gradients have closed forms."""

    def __init__(self, b):
        super().__init__()
        self.b = nn.Parameter(torch.tensor(b, dtype=torch.float64))

    def forward(self, x):
        return self.b.expand(x.shape[0], -1)


def test_rate_gradient_has_the_closed_form():
    b = np.array([1.0, 0.0, -1.0])
    y = np.array([2, 2, 0, 1])
    alpha = 0.7
    # entropy H(p) of p = softmax(b): dH/db_k = -p_k (log p_k + H); b' = b - alpha dH/db;
    # dCE(b')/d alpha = -<softmax(b') - mean onehot(y), dH/db>
    p = np.exp(b) / np.exp(b).sum()
    H = -(p * np.log(p)).sum()
    h = -p * (np.log(p) + H)
    b_new = b - alpha * h
    q = np.exp(b_new) / np.exp(b_new).sum()
    expected_grad = -np.dot(q - np.bincount(y, minlength=3) / len(y), h)
    expected_loss = -np.log(q[y]).mean()

    model = BiasOnly(b.tolist())
    x = torch.zeros(len(y), 1, dtype=torch.float64)
    grad, loss = A.rate_gradient(
        model, state_of(model), ["b"], torch.tensor([alpha], dtype=torch.float64), x, torch.tensor(y)
    )
    assert grad.item() == pytest.approx(expected_grad, rel=1e-10)
    assert loss.item() == pytest.approx(expected_loss, rel=1e-10)


def test_rate_gradient_matches_finite_differences_through_batchnorm_statistics():
    torch.manual_seed(1)
    model = bn_net(torch.float64)
    with torch.no_grad():
        model[1].running_mean.normal_(0, 0.3)
        model[1].running_var.uniform_(0.5, 1.5)
    state = state_of(model)
    names = A.rate_modules(model)
    x = torch.randn(12, 64, dtype=torch.float64) * 2 + 1
    y = torch.randint(0, 10, (12,))
    rates = torch.tensor([0.3, -0.2, 0.1, 0.4, 0.5, 0.2, 0.7, -0.1], dtype=torch.float64)

    def loss_at(r):
        adapted = A.adapt_batch(model, state, dict(zip(names, r, strict=True)), x)
        return F.cross_entropy(A.forward(model, adapted, x), y).item()

    grad, _ = A.rate_gradient(model, state, names, rates, x, y)
    eps = 1e-6
    numeric = [
        (loss_at(rates + eps * e) - loss_at(rates - eps * e)) / (2 * eps)
        for e in torch.eye(len(names), dtype=torch.float64)
    ]
    assert grad.tolist() == pytest.approx(numeric, abs=1e-7)
    assert grad[names.index("1.running_mean")] != 0  # the statistics' rates get a gradient too


# -- covariate shift ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shifted_digits():
    """A BatchNorm net trained on digits, and held-out digits under an affine input shift, which BatchNorm
    statistics of the first layer's output undo exactly."""
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    with torch_job_scope(0, 1):
        torch.manual_seed(0)
        model = bn_net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model.train()
        for _ in range(30):
            for start in range(0, 1200, 64):
                optimizer.zero_grad()
                F.cross_entropy(model(x[start : start + 64]), y[start : start + 64]).backward()
                optimizer.step()
    return model, state_of(model), 2.5 * x[1200:] + 1.0, y[1200:]


def adapted_accuracy(model, state, rates, x, y, batch=64) -> float:
    preds = [
        A.forward(model, A.adapt_batch(model, state, rates, x[i : i + batch]), x[i : i + batch]).argmax(1)
        for i in range(0, len(x), batch)
    ]
    return float((torch.cat(preds) == y).float().mean())


def test_batchnorm_statistics_adaptation_undoes_a_covariate_shift(shifted_digits):
    model, state, x, y = shifted_digits
    none = adapted_accuracy(model, state, {}, x, y)
    stats = {"1.running_mean": torch.tensor(1.0), "1.running_var": torch.tensor(1.0)}
    assert adapted_accuracy(model, state, stats, x, y) > none + 0.3


def test_meta_steps_learn_to_adapt_the_statistics_and_lower_the_loss_after_adaptation(shifted_digits):
    model, state, x, y = shifted_digits
    names = A.rate_modules(model)
    rates = torch.zeros(len(names))
    scale = torch.tensor([1 / math.sqrt(state[n].numel()) for n in names])  # the released variant's steps
    first = None
    for _ in range(3):
        for i in range(0, 300, 30):
            grad, loss = A.rate_gradient(model, state, names, rates, x[i : i + 30], y[i : i + 30])
            first = loss if first is None else first
            rates = rates - 0.1 * scale * grad
    assert rates[names.index("1.running_mean")] > 0.1
    after = F.cross_entropy(
        A.forward(model, A.adapt_batch(model, state, dict(zip(names, rates, strict=True)), x[:300]), x[:300]), y[:300]
    )
    assert after < 0.7 * first


# -- the algorithm --------------------------------------------------------------------------------------
def test_adaptation_at_evaluation_never_reads_labels(monkeypatch):
    alg, client, ctx = client_setup({"name": "atp", "rate_init": 0.3}, local_epochs=1)
    payload = alg.init_state().global_model
    seen = []
    adapt_batch = A.adapt_batch
    monkeypatch.setattr(A, "adapt_batch", lambda *args: seen.append(adapt_batch(*args)) or seen[-1])
    garbage = dataclasses.replace(
        client, test_y=torch.randint(0, 10, client.test_y.shape, generator=torch.Generator().manual_seed(5))
    )

    def run(data):
        seen.clear()
        preds = alg.client_predict(payload, alg.ClientState(), data, ctx)[M.PRED]
        states = list(seen)
        alg.client_evaluate(payload, alg.ClientState(), data, ctx)
        assert len(seen) == 2 * len(states) > 1  # evaluation adapted every batch the same way
        return preds, states

    preds, states = run(client)
    garbage_preds, garbage_states = run(garbage)
    np.testing.assert_array_equal(preds, garbage_preds)
    assert all(torch.equal(a[k], b[k]) for a, b in zip(states, garbage_states, strict=True) for k in a)
    assert not torch.equal(states[0]["head.weight"], torch.tensor(payload.weights["head.weight"]))  # it did adapt


def test_released_gradient_norm_divides_each_modules_step_by_the_root_of_its_size():
    def delta(norm: str) -> dict[str, float]:
        alg, client, ctx = client_setup({"name": "atp", "rate_grad_norm": norm}, local_epochs=1)
        payload = alg.init_state().global_model
        rates, _ = alg.learn_rates(payload, client, dataclasses.replace(ctx, batch_size=10_000))  # one batch: one step
        return {k: float(rates[k][0]) for k in rates}

    plain, released = delta("none"), delta("sqrt_numel")
    sizes = {
        k: v.size for k, v in client_setup({"name": "atp"}, local_epochs=1)[0].init_state().global_model.weights.items()
    }
    assert all(abs(plain[k]) > 0 for k in plain)
    assert released == pytest.approx({k: plain[k] / math.sqrt(sizes[k]) for k in plain}, rel=1e-4)


def test_fedavg_rounds_then_rate_rounds_on_the_frozen_model():
    alg, client, ctx = client_setup({"name": "atp", "rate_rounds": 1}, local_epochs=1)  # tiny_spec: 2 rounds
    state = alg.init_state()
    down = alg.configure(1, state, [2])[2]
    assert A.RATES not in down  # round 1 is FedAvg: the model alone travels
    uplink, _, _ = alg.client_update(down, alg.ClientState(), client, ctx)
    state = alg.aggregate(1, state, [ClientResult(2, uplink)])
    down = alg.configure(2, state, [2])[2]
    assert down is state.global_model and A.RATES in down
    uplink, _, metrics = alg.client_update(down, alg.ClientState(), client, dataclasses.replace(ctx, round=2))
    assert set(uplink.sections) == {A.RATES}  # only the rates go up
    assert math.isfinite(metrics[M.TRAIN_LOSS]) and metrics[M.TRAIN_STEPS] == math.ceil(client.num_train / 32)
    new = alg.aggregate(2, state, [ClientResult(2, uplink)])
    assert new.global_model.weights is state.global_model.weights  # the model stayed frozen
    assert new.global_model[A.RATES] == uplink[A.RATES]


def test_server_averages_the_model_by_samples_then_the_rates_plainly():
    alg, _, _ = client_setup({"name": "atp", "rate_rounds": 1}, local_epochs=1)  # tiny_spec: 2 rounds
    state = alg.init_state()
    weights = state.global_model.weights
    names = list(state.global_model[A.RATES])

    def model(cid, value, n):
        return ClientResult(
            cid, Payload({k: np.full_like(v, value) for k, v in weights.items()}, {"samples": {"n": np.array([n])}})
        )

    def rates(cid, value):
        return ClientResult(
            cid, Payload(extras={A.RATES: {name: np.array([value], dtype=np.float32) for name in names}})
        )

    state = alg.aggregate(1, state, [model(0, 1.0, 30), model(1, 4.0, 10)])
    assert all(np.allclose(v, 1.75) for v in state.global_model.weights.values())  # (30 * 1 + 10 * 4) / 40
    assert state.model.weights is state.global_model.weights
    state = alg.aggregate(2, state, [rates(0, 1.0), rates(1, 4.0)])
    assert all(state.global_model[A.RATES][name][0] == pytest.approx(2.5) for name in names)  # (1 + 4) / 2
    assert all(np.allclose(v, 1.75) for v in state.global_model.weights.values())
    assert alg.round_metrics(state) == {f"atp_rate_{name}": pytest.approx(2.5) for name in names}


def test_zero_rates_never_learned_are_fedavg_and_learning_them_is_metered():
    avg = run_spec(tiny_spec(algorithm="fedavg", rounds=3))
    atp = run_spec(tiny_spec(algorithm={"name": "atp", "rate_rounds": 0}, rounds=3))
    assert atp.status == avg.status == "FINISHED", (atp.reason, avg.reason)
    for key in (M.ACC_LOCAL_MEAN, M.ACC_SYSTEM, M.ACC_TEST_TIME, M.TRAIN_LOSS_MEAN):
        assert atp.final[M.FINAL_PREFIX + key] == avg.final[M.FINAL_PREFIX + key], key
    for key in (M.COMM_UP_BYTES, M.COMM_DOWN_BYTES):
        assert atp.final[M.TOTAL_PREFIX + key] == avg.final[M.TOTAL_PREFIX + key], key

    learned = run_spec(tiny_spec(algorithm={"name": "atp", "rate_rounds": 1}, rounds=3))
    rates_bytes = 4 * 4  # mlp [32]: 4 modules, one float32 each; 4 clients in the last round
    model_bytes = avg.final[M.TOTAL_PREFIX + M.COMM_DOWN_BYTES] / 3
    assert learned.final[M.TOTAL_PREFIX + M.COMM_DOWN_BYTES] == 3 * model_bytes + 4 * rates_bytes
    model_up = avg.final[M.TOTAL_PREFIX + M.COMM_UP_BYTES] / 3
    assert learned.final[M.TOTAL_PREFIX + M.COMM_UP_BYTES] == 2 * model_up + 4 * rates_bytes


def test_whole_run_learns_rates():
    result = run_spec(tiny_spec(algorithm="atp", rounds=2))
    assert result.status == "FINISHED", result.reason
    assert 0.3 < result.final[M.FINAL_PREFIX + M.ACC_TEST_TIME] <= 1.0
    assert any(value != 0 for key, value in result.history[-1].items() if key.startswith("atp_rate_"))


def test_rate_rounds_covering_the_run_warn_that_the_model_never_trains():
    with pytest.warns(UserWarning, match="never trained"):
        tiny_spec(algorithm={"name": "atp", "rate_rounds": 2}, rounds=2)


@pytest.mark.parametrize(
    "field, value",
    [
        ("rate_rounds", -1),
        ("rate_lr", 0.0),
        ("rate_lr", math.inf),
        ("rate_init", math.nan),
        ("rate_epochs", 0),
        ("rate_grad_norm", "numel"),
    ],
)
def test_bad_values_are_rejected(field, value):
    with pytest.raises(ConfigError) as err:
        tiny_spec(algorithm={"name": "atp", field: value})
    assert err.value.field == f"algorithm.{field}"
