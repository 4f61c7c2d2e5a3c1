"""ATP (Bao, Wei, Wang, He 2023, "Adaptive Test-Time Personalization for Federated Learning", NeurIPS;
github baowenxuan/ATP).

A client that never trained (an unseen test client, with no labels) personalises the global model theta on each
batch x of its own inputs by one unsupervised step, scaled module by module:

    theta'_m = theta_m - alpha_m h_m(theta; x)

A module m is one parameter tensor or one BatchNorm running statistic. For a parameter, h_m is the gradient of the
batch's mean prediction entropy (Tent's objective). For a running mean or variance, h_m = running - batch
statistic of the layer's input, so alpha_m is that layer's momentum towards the batch (BN-statistics
re-estimation). The adaptation rates alpha are what ATP learns. A negative rate is allowed: it moves against the
entropy gradient, or away from the batch statistics.

Learning the rates (ATP's training). The global model is first trained by FedAvg and then frozen. Each sampled
client simulates the adaptation on its own labelled batches and steps alpha down the supervised loss after it:
alpha <- alpha - eta d CE(f(theta'(alpha); x), y) / d alpha. h does not depend on alpha, so the gradient is
exact: -<grad CE(theta'), h_m> per module. Each module's gradient is divided by the square root of the module's
size (`rate_grad_norm`). The server averages the clients' rates with equal weights (a plain mean, as the
released code does).

How it maps onto fedbench: one run, two phases.
- Rounds 1 .. R - `rate_rounds` are FedAvg, through the one training loop: the same downlink, uplink, weights
  and numbers. The rates stay at `rate_init`.
- The last `rate_rounds` rounds freeze the global model and learn the rates on it (`learn_rates`: `rate_epochs`
  passes over the client's training split in shuffled batches of the run's batch size, one meta-step per
  batch). These rounds train no model, so no loop runs: the meta-step is a small computation of its own. The
  downlink is the model and the rates; the uplink is the rates only. `train_loss` reports the mean supervised
  loss after adaptation over the client's meta-steps.
- The rates are learned on the model they will adapt: the released code trains the rates only on a
  pre-trained global model that stays fixed. Rates learned alongside a model that is still training transfer
  badly. On MNIST label skew with drift, they were pushed to large negative values on the early models, and the
  next round's model then collapsed to about chance once adapted (docs/methods.md).
- Test time (`assign`, base rule): every test client downloads the global model with the rates. It adapts the
  model on each batch of its inputs, separately from the global model (the released code's default, "ATP-batch";
  its "ATP-online" variants are not implemented), and predicts that batch with the adapted model. Its
  labelled samples (`data.train`) are not used: ATP is unsupervised at test time. Labels of `data.test` only
  score the predictions.
- Local accuracy: each training client adapts the same way on its local test split, because the paper
  personalises every client at test time. So local accuracy is the adapted global model's.
- System accuracy (004 Sec. 5): one model, the global one with its rates, answers every client's test split,
  adapted on that client's own batches. With a single model in the bundle, the vote is its answer.
- Every rate 0: the adapted model is the global model itself, and it is scored as FedAvg scores it.

Models: a rate per parameter tensor and per BatchNorm running mean and variance (only for layers that track
them). LeNet-5 and the MLP have no normalisation layers, so only their weights and biases adapt (10 rates for
LeNet-5). GroupNorm models (resnet18) adapt their GroupNorm affine parameters like any other parameter. The
forward passes of ATP are in eval mode: BatchNorm normalises with its running statistics, as in the released
code.

Where fedbench differs from the released code (choices):
- The released code pre-trains with FedAvg (200 rounds on CIFAR-10), then learns the rates for 400 rounds of 25%
  of the clients, two batches of 20 each. fedbench runs both phases in one run of R rounds. A rate round is a
  full pass over each client's training split (tens of meta-steps), so one round by default.
- The released code learns the rates on the training clients' held-out 20% split. In fedbench that split is
  the local test split, kept for evaluation, so the rates are learned on the training split.
- The adaptation batch is the run's batch size (the released scripts use 20 for everything).
The paper's text could not be read offline when this was written: the defaults come from the released code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Literal, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fedbench.algorithms.base import (
    AlgorithmConfig,
    GlobalState,
    NoClientState,
    average_uplinks,
    warn_if_phase_covers_run,
)
from fedbench.algorithms.capabilities import RoundReport
from fedbench.algorithms.fedavg import FedAvg
from fedbench.core import metrics as M
from fedbench.core.errors import ClientDivergedError, ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.core.runspec import RunSpec
from fedbench.core.types import Arrays, ClientResult, Metrics, Payload, RoundContext
from fedbench.training import ClientData, get_weights

RATES = "rates"
"""Payload section `{module name: float32 [1]}`: the adaptation rate of every module (`rate_modules`)."""

Tensors = dict[str, torch.Tensor]


def _tracks_stats(module: nn.Module) -> bool:
    return isinstance(module, nn.modules.batchnorm._BatchNorm) and module.track_running_stats


def rate_modules(model: nn.Module) -> list[str]:
    """The modules that get a rate, in state-dict order: every parameter tensor, and the running mean and
    variance of every BatchNorm layer that tracks them (the released code's `trainable_parameters()`)."""
    params = {name for name, _ in model.named_parameters()}
    stats = {
        f"{name}.{s}" for name, m in model.named_modules() if _tracks_stats(m) for s in ("running_mean", "running_var")
    }
    return [name for name in model.state_dict() if name in params or name in stats]


@contextmanager
def batchnorm_eval(model: nn.Module) -> Iterator[dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """Inside, each BatchNorm that tracks running statistics normalises with them (eval mode). Unlike torch's
    batch_norm, it is differentiable in them. It also records its input's batch mean and unbiased variance,
    the targets of the statistics' adaptation. The dict yielded maps layer name -> (mean, var) of the last
    forward pass."""
    stats: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    layers = {name: m for name, m in model.named_modules() if _tracks_stats(m)}

    def normalise(name: str, m: nn.modules.batchnorm._BatchNorm) -> Callable[[torch.Tensor], torch.Tensor]:
        def forward(x: torch.Tensor) -> torch.Tensor:
            flat = x.detach().transpose(0, 1).reshape(x.shape[1], -1)
            single = flat.shape[1] == 1  # a one-sample batch of a BatchNorm1d: variance 0, not NaN
            stats[name] = (flat.mean(dim=1), flat.var(dim=1, correction=0 if single else 1))
            shape = (1, -1) + (1,) * (x.dim() - 2)
            assert m.running_mean is not None and m.running_var is not None  # a layer that tracks them
            y = (x - m.running_mean.view(shape)) / torch.sqrt(m.running_var.view(shape) + m.eps)
            return y * m.weight.view(shape) + m.bias.view(shape) if m.affine else y

        return forward

    for name, m in layers.items():
        m.forward = normalise(name, m)
    try:
        yield stats
    finally:
        for m in layers.values():
            del m.forward


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of the prediction entropy -sum_c p_c log p_c (the unsupervised objective)."""
    return -(logits.softmax(dim=1) * logits.log_softmax(dim=1)).sum(dim=1).mean()


def directions(model: nn.Module, state: Tensors, x: torch.Tensor) -> Tensors:
    """h(theta; x) per module: the entropy gradient for a parameter; running - batch statistic for a
    BatchNorm running mean or variance. Reads inputs only."""
    params = {name for name, _ in model.named_parameters()}
    leaves = {name: t.detach().requires_grad_() for name, t in state.items() if name in params}
    with torch.enable_grad(), batchnorm_eval(model) as stats:
        loss = entropy(functional_call(model.eval(), {**state, **leaves}, (x,)))
        grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    h = {name: torch.zeros_like(t) if g is None else g for (name, t), g in zip(leaves.items(), grads, strict=True)}
    for layer, (mean, var) in stats.items():
        h[f"{layer}.running_mean"] = state[f"{layer}.running_mean"].detach() - mean
        h[f"{layer}.running_var"] = state[f"{layer}.running_var"].detach() - var
    return h


def adapt(state: Tensors, rates: dict[str, torch.Tensor], h: Tensors) -> Tensors:
    """theta'_m = theta_m - alpha_m h_m for every module in `rates`; running variances are clipped at 0 (a
    negative rate could push them below, as the released code guards against)."""
    out = dict(state)
    for name, rate in rates.items():
        new = state[name] - rate * h[name]
        out[name] = new.clamp(min=0.0) if name.endswith("running_var") else new
    return out


def adapt_batch(model: nn.Module, state: Tensors, rates: dict[str, torch.Tensor], x: torch.Tensor) -> Tensors:
    """The model ATP predicts batch `x` with: one unsupervised step from `state` on the inputs alone."""
    return adapt({k: v.detach() for k, v in state.items()}, rates, directions(model, state, x))


def forward(model: nn.Module, state: Tensors, x: torch.Tensor) -> torch.Tensor:
    """Logits of the model with `state` in eval mode (BatchNorm differentiable in its statistics)."""
    with batchnorm_eval(model):
        return functional_call(model.eval(), state, (x,))


def rate_gradient(
    model: nn.Module, state: Tensors, names: Sequence[str], rates: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(d CE(f(theta'(alpha); x), y) / d alpha, the loss) at `rates` (a vector over `names`), exact because h
    does not depend on alpha: -<dCE/dtheta'_m, h_m> for each module m."""
    alpha = rates.detach().clone().requires_grad_()
    h = directions(model, state, x)
    with torch.enable_grad():
        adapted = adapt({k: v.detach() for k, v in state.items()}, dict(zip(names, alpha, strict=True)), h)
        loss = F.cross_entropy(forward(model, adapted, x), y)
        (grad,) = torch.autograd.grad(loss, alpha)
    return grad, loss.detach()


def to_tensors(weights: Arrays, device: str) -> Tensors:
    """A state dict of copies of `weights` on `device` (payload arrays may be read-only)."""
    return {name: torch.tensor(np.asarray(value), device=device) for name, value in weights.items()}


@dataclass(frozen=True)
class ATPState(GlobalState):
    """`global_model`: the model with the rates (what rate rounds, evaluation and test clients get); `model`: the
    model alone (FedAvg's downlink)."""

    model: Payload


@register_algorithm("atp")
class ATP(FedAvg["ATP.Config", ATPState, NoClientState], RoundReport[ATPState]):
    """FedAvg, then per-module adaptation rates learned on the frozen global model; every client, seen or
    unseen, predicts with the global model adapted on its unlabeled batches."""

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        rate_rounds: int = 1
        """Last rounds of the run that freeze the global model and learn the rates on it (the released code learns
        them on a FedAvg pre-trained model, in rounds of their own; one fedbench round is a full pass of
        meta-steps per client). 0: the rates stay at `rate_init` and the run is FedAvg."""
        rate_lr: float = 0.1
        """eta, the adaptation rates' learning rate (released code: `lm_lr` 0.1 in options.py and in every
        exp/cifar10 `atp_train_*.sh`)."""
        rate_init: float = 0.0
        """Every module's rate before training (released code: `torch.zeros`, ATP.py), i.e. no adaptation."""
        rate_epochs: int = 1
        """Passes over the client's training split per rate round, one meta-step per batch (released code:
        `lm_epochs` 1)."""
        rate_grad_norm: Literal["sqrt_numel", "none"] = "sqrt_numel"
        """sqrt_numel: each module's rate gradient divided by the square root of its size (the released code's
        default `--grad_norm`), so large weight matrices do not dominate; none: the plain gradient (at lr 0.1 it
        drove LeNet-5's conv rates below -1 within a round and the adapted accuracy to 0 on MNIST, docs/methods.md)."""

        def __post_init__(self) -> None:
            super().__post_init__()
            if isinstance(self.rate_rounds, bool) or not isinstance(self.rate_rounds, int) or self.rate_rounds < 0:
                raise ConfigError("rate_rounds", self.rate_rounds, "an integer >= 0 (0: FedAvg, no rates learned)")
            if not (math.isfinite(self.rate_lr) and self.rate_lr > 0):
                raise ConfigError("rate_lr", self.rate_lr, "a number > 0")
            if not math.isfinite(self.rate_init):
                raise ConfigError("rate_init", self.rate_init, "a finite number")
            if isinstance(self.rate_epochs, bool) or not isinstance(self.rate_epochs, int) or self.rate_epochs < 1:
                raise ConfigError("rate_epochs", self.rate_epochs, "an integer >= 1")
            if self.rate_grad_norm not in ("sqrt_numel", "none"):
                raise ConfigError("rate_grad_norm", self.rate_grad_norm, "sqrt_numel or none")

        def check_run(self, spec: RunSpec) -> None:
            """Warn when the rate rounds cover the whole run: the model is never trained."""
            warn_if_phase_covers_run(
                "rate_rounds", self.rate_rounds, spec, "the global model is never trained, ATP adapts the initial model"
            )

    State = ATPState

    def learning_rates(self, round: int) -> bool:
        """Whether `round` is one of the last `rate_rounds` rounds (never where the run's length is unknown)."""
        return self.rounds is not None and round > self.rounds - self.config.rate_rounds

    # -- server half ---------------------------------------------------------------------------------
    def init_state(self) -> ATPState:
        """The initial model with the rates at `rate_init`, and alone."""
        model = self.builder.initial(self.seed)
        rates = {name: np.array([self.config.rate_init], dtype=np.float32) for name in rate_modules(model)}
        weights = get_weights(model)
        return ATPState(Payload(weights, {RATES: rates}), Payload(weights))

    def configure(self, round: int, state: ATPState, sampled: Sequence[int]) -> dict[int, Payload]:
        payload = state.global_model if self.learning_rates(round) else state.model
        return {cid: payload for cid in sampled}

    def aggregate(self, round: int, state: ATPState, results: Sequence[ClientResult]) -> ATPState:
        """FedAvg's model; in a rate round each rate is the plain mean of the clients' (the released
        TTPBase.learn_to_adapt) and the model stays."""
        if not self.learning_rates(round):
            weights = average_uplinks(results)
            return replace(state, global_model=state.global_model.replace({"weights": weights}), model=Payload(weights))
        rates = {
            name: np.mean([r.uplink[RATES][name] for r in results], axis=0, dtype=np.float64).astype(np.float32)
            for name in state.global_model[RATES]
        }
        # each rate a [1] array: numpy's stubs type a mean over an axis as an array or a scalar
        return replace(state, global_model=state.global_model.replace({RATES: cast(Arrays, rates)}))

    def round_metrics(self, state: ATPState) -> Metrics:
        """The averaged rate of every module (`atp_rate_<module>`), to plot what ATP learned to adapt."""
        return {f"atp_rate_{name}": float(value[0]) for name, value in state.global_model[RATES].items()}

    # -- client half ---------------------------------------------------------------------------------
    def client_update(
        self, payload: Payload, state: NoClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, NoClientState, Metrics]:
        if not self.learning_rates(ctx.round):
            return super().client_update(payload, state, data, ctx)
        rates, loss = self.learn_rates(payload, data, ctx)
        steps = self.config.rate_epochs * math.ceil(data.num_train / ctx.batch_size)
        metrics = {M.TRAIN_LOSS: loss, M.TRAIN_STEPS: float(steps), M.TRAIN_SAMPLES: float(data.num_train)}
        return Payload(extras={RATES: rates}), state, metrics

    def learn_rates(self, payload: Payload, data: ClientData, ctx: RoundContext) -> tuple[Arrays, float]:
        """The client's rates after `rate_epochs` passes of meta-steps on its training batches, each simulating
        the unsupervised adaptation of the payload's frozen model and stepping down the supervised loss after
        it; and the mean of those losses (NaN without training data)."""
        names = list(payload[RATES])
        if data.num_train == 0:
            return dict(payload[RATES]), math.nan
        model = self.model_with(payload.weights).to(ctx.device)
        state = to_tensors(payload.weights, ctx.device)
        rates = torch.tensor(np.concatenate([payload[RATES][n] for n in names]), device=ctx.device)
        scale = torch.ones_like(rates)
        if self.config.rate_grad_norm == "sqrt_numel":
            scale = torch.tensor([1 / math.sqrt(state[n].numel()) for n in names], device=ctx.device)
        generator = torch.Generator().manual_seed(ctx.rng_seed("atp_rates"))
        losses = []
        for _ in range(self.config.rate_epochs):
            order = torch.randperm(data.num_train, generator=generator)
            for start in range(0, data.num_train, ctx.batch_size):
                x, y = data.train_batch(order[start : start + ctx.batch_size], ctx.device)
                grad, loss = rate_gradient(model, state, names, rates, x, y)
                if not torch.isfinite(loss):
                    raise ClientDivergedError(
                        f"client {ctx.client_id}: ATP's loss after adaptation became {loss.item()} in round {ctx.round}"
                    )
                rates = rates - self.config.rate_lr * scale * grad
                losses.append(loss.item())
        values = rates.detach().cpu().numpy().astype(np.float32)
        return {name: values[i : i + 1] for i, name in enumerate(names)}, float(np.mean(losses))

    def client_evaluate(self, payload: Payload, state: NoClientState, data: ClientData, ctx: RoundContext) -> Metrics:
        """Accuracy on the test split of the global model adapted on each of its batches (inputs only)."""
        if not self._adapts(payload):
            return super().client_evaluate(payload, state, data, ctx)
        logits = self.adapted_logits(payload, (x for x, _ in data.test_batches(ctx.batch_size, ctx.device)), ctx)
        n = data.num_test
        if not n:
            return {M.ACCURACY: float("nan"), M.LOSS: float("nan"), M.TEST_SAMPLES: 0.0}
        labels = data.test_y
        return {
            M.ACCURACY: float((logits.argmax(dim=1) == labels).float().mean()),
            M.LOSS: float(F.cross_entropy(logits, labels, reduction="sum")) / n,
            M.TEST_SAMPLES: float(n),
        }

    def client_predict(
        self, payload: Payload, state: NoClientState, data: ClientData, ctx: RoundContext
    ) -> dict[str, np.ndarray]:
        """System accuracy's answers: the global model adapted on each batch of the client's test inputs."""
        if not self._adapts(payload):
            return super().client_predict(payload, state, data, ctx)
        logits = self.adapted_logits(payload, (x for x, _ in data.test_batches(ctx.batch_size, ctx.device)), ctx)
        return {M.PRED: logits.argmax(dim=1).numpy()}

    def adapted_logits(self, payload: Payload, inputs: Iterable[torch.Tensor], ctx: RoundContext) -> torch.Tensor:
        """Logits (on the CPU) of each input batch under the payload's model adapted on that batch alone
        (ATP-batch: every batch starts from the global model)."""
        model = self.model_with(payload.weights).to(ctx.device)
        state = to_tensors(payload.weights, ctx.device)
        rates = {name: torch.tensor(float(v[0]), device=ctx.device) for name, v in payload[RATES].items() if v[0] != 0}
        rows = []
        for x in inputs:
            with torch.no_grad():
                rows.append(forward(model, adapt_batch(model, state, rates, x), x).cpu())
        return torch.cat(rows) if rows else torch.zeros((0, self.builder.num_classes))

    @staticmethod
    def _adapts(payload: Payload) -> bool:
        """Whether any module's rate is nonzero (otherwise the adapted model is the global one)."""
        return any(v[0] != 0 for v in payload[RATES].values())
