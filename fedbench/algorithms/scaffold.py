"""SCAFFOLD (Karimireddy et al. 2020, "SCAFFOLD: Stochastic Controlled Averaging for Federated Learning",
Algorithm 1 with option II): local SGD whose every step is corrected by control variates, so that clients
on heterogeneous data stop drifting towards their own optima.

The server holds the global model x and a control variate c (zeros at first; never averaged into the model).
Each round it sends x and c (the `control` section: it really travels and is metered). A sampled client starts
from y = x and takes its K local steps y <- y - eta_l (g_i(y) - c_i + c), the correction going through the
training loop's `adjust_gradients` hook; then (option II)

    c_i+ = c_i - c + (x - y) / (K eta_l)

with K the steps the loop actually took and eta_l the round's learning rate (`scheduled_lr`). The client's own
control variate c_i lives in its client state (zeros before its first round; it never travels). The uplink
carries Delta y = y - x (section `model_delta`) and Delta c = c_i+ - c_i (section `control_delta`); both travel
and are metered. The server takes

    x <- x + eta_g mean_S(Delta y),    c <- c + |S|/N mean_S(Delta c),

averaging uniformly over the sampled clients S as the paper does (1/|S|, not weighted by sample counts, so no
sample count is sent), N being the number of clients.

Choices where the paper is silent:
- Buffers (BatchNorm statistics, integer counters) are not parameters of the objective: they have no control
  variate and no server step; they travel inside Delta y and are averaged uniformly like the parameters
  (x + mean_S(Delta y) = mean_S(y)); integer counters are taken from the first client, as FedAvg's are.
- Option II reads (x - y) / (K eta_l) as the mean corrected gradient, which holds only for plain SGD. With
  heavy-ball momentum beta the K steps add up to a times that, a growing towards 1 / (1 - beta) with K (4.62
  for K = 12, beta = 0.9); once a > 2 the offsets c_i - c overshoot and oscillate with growing amplitude
  (docs/methods.md has the numbers). Adam's steps are not eta_l times a gradient at all. `check_run`
  therefore refuses `optimizer.momentum` != 0 and `optimizer.name` != sgd rather than run something that is
  not SCAFFOLD. Weight decay is allowed: it is part of the local objective, and c_i then estimates the
  gradient of the regularised loss.
- A client with no training rows takes no step (K = 0): its c_i stays as it was (Delta c = 0).
- A parameter that gets no gradient in a step (unused by that batch's forward pass) has gradient 0 there, so
  its step is -eta_l (c - c_i), as Algorithm 1 writes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from fedbench.algorithms.base import Algorithm, AlgorithmConfig, GlobalModelAtTestTime, GlobalState
from fedbench.algorithms.capabilities import SystemVote
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.core.runspec import RunSpec
from fedbench.core.types import Arrays, ClientResult, Metrics, Payload, RoundContext
from fedbench.training import ClientData, TrainHooks, average_weights, get_weights, train_local
from fedbench.training.loop import scheduled_lr

CONTROL = "control"
"""Downlink section: the server control variate c (one array per parameter)."""
MODEL_DELTA = "model_delta"
"""Uplink section: Delta y = y - x for every entry of the model's state (parameters and buffers)."""
CONTROL_DELTA = "control_delta"
"""Uplink section: Delta c = c_i+ - c_i, one array per parameter."""


def control_correction(correction: dict[str, torch.Tensor]) -> Callable[[nn.Module], None]:
    """`adjust_gradients` hook: every parameter's gradient g becomes g + (c - c_i) (Algorithm 1's local step);
    a parameter without a gradient this step gets c - c_i (its gradient is 0)."""

    def adjust(model: nn.Module) -> None:
        for name, p in model.named_parameters():
            if p.grad is None:
                p.grad = correction[name].clone()
            else:
                p.grad.add_(correction[name])

    return adjust


def option_ii(c_i: Arrays, c: Arrays, x: Arrays, y: Arrays, steps: int, lr: float) -> Arrays:
    """c_i+ = c_i - c + (x - y) / (K eta_l) per parameter (Algorithm 1, option II), computed in float64;
    after no step (K = 0) c_i is kept."""
    if steps == 0:
        return c_i
    new = {name: wide(c_i[name]) - wide(c[name]) + (wide(x[name]) - wide(y[name])) / (steps * lr) for name in c}
    return {name: value.astype(c[name].dtype) for name, value in new.items()}


@dataclass(frozen=True)
class ScaffoldState(GlobalState):
    """The global model x and the server control variate c (per parameter)."""

    control: Arrays


@dataclass(frozen=True)
class ScaffoldClientState:
    """The client control variate c_i; None before its first job (zero)."""

    control: Arrays | None = None


@register_algorithm("scaffold")
class Scaffold(
    Algorithm["Scaffold.Config", ScaffoldState, ScaffoldClientState],
    GlobalModelAtTestTime[ScaffoldState],
    SystemVote[ScaffoldState, ScaffoldClientState],
):
    """FedAvg's round with control variates: corrected local steps, option-II client control variates,
    uniform averaging of Delta y and Delta c with a global step size."""

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        global_lr: float = 1.0
        """Global step size eta_g of x <- x + eta_g mean(Delta y) (Karimireddy et al. 2020, Sec. 7: "we always
        use global step-size eta_g = 1"). It does not scale c's update. The paper's Sec. 7 samples 20% of
        the clients a round; `client_fraction` keeps the platform's default of 1 (set 0.2 to follow it)."""

        def __post_init__(self) -> None:
            super().__post_init__()
            if not (math.isfinite(self.global_lr) and self.global_lr > 0):
                raise ConfigError("global_lr", self.global_lr, "a number > 0 (1: the paper's setting)")

        def check_run(self, spec: RunSpec) -> None:
            """Option II's control variate is exact only under plain SGD (module docstring): refuse anything else."""
            if spec.optimizer.name != "sgd":
                raise ConfigError(
                    "optimizer.name",
                    spec.optimizer.name,
                    "sgd with SCAFFOLD (its option-II control "
                    "variate reads (x - y) / (K lr) as the mean gradient, true only of plain SGD)",
                )
            if spec.optimizer.momentum != 0:
                raise ConfigError(
                    "optimizer.momentum",
                    spec.optimizer.momentum,
                    "0 with SCAFFOLD (plain SGD, as in "
                    "the paper: with momentum its option-II control variates overshoot and diverge)",
                )

    State = ScaffoldState
    ClientState = ScaffoldClientState

    # -- server half ---------------------------------------------------------------------------------
    def init_state(self) -> ScaffoldState:
        weights = self.initial_weights()
        control = {name: np.zeros(weights[name].shape, dtype=np.float32) for name in self.parameter_names}
        return ScaffoldState(Payload(weights), control)

    def configure(self, round: int, state: ScaffoldState, sampled: Sequence[int]) -> dict[int, Payload]:
        """x and c, in one payload shipped once to every sampled client."""
        downlink = state.global_model.replace({CONTROL: state.control})
        return {cid: downlink for cid in sampled}

    def aggregate(self, round: int, state: ScaffoldState, results: Sequence[ClientResult]) -> ScaffoldState:
        uniform = [1.0] * len(results)
        delta_y = average_weights([r.uplink[MODEL_DELTA] for r in results], uniform)
        delta_c = average_weights([r.uplink[CONTROL_DELTA] for r in results], uniform)
        x, c = state.global_model.weights, state.control
        share = len(results) / self.num_clients
        sizes = {name: self.config.global_lr if name in c else 1.0 for name in x}  # buffers: no server step
        new_x = {name: step(value, delta_y[name], sizes[name]) for name, value in x.items()}
        new_c = {name: step(value, delta_c[name], share) for name, value in c.items()}
        return replace(state, global_model=Payload(new_x), control=new_c)

    # -- client half ---------------------------------------------------------------------------------
    def client_update(
        self, payload: Payload, state: ScaffoldClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ScaffoldClientState, Metrics]:
        x, c = payload.weights, payload[CONTROL]
        c_i = state.control if state.control is not None else {name: np.zeros_like(value) for name, value in c.items()}
        correction = {name: torch.from_numpy(c[name] - c_i[name]).to(ctx.device) for name in c}
        model = self.model_with(x)
        metrics = train_local(model, data, ctx, TrainHooks(adjust_gradients=control_correction(correction)))
        y = get_weights(model)
        lr = scheduled_lr(ctx.optimizer, ctx.round, ctx.rounds)
        c_new = option_ii(c_i, c, x, y, int(metrics[M.TRAIN_STEPS]), lr)
        uplink = Payload(
            extras={
                MODEL_DELTA: {name: y[name] - x[name] for name in y},
                CONTROL_DELTA: {name: c_new[name] - c_i[name] for name in c},
            }
        )
        return uplink, ScaffoldClientState(c_new), metrics


def step(value: np.ndarray, delta: np.ndarray, size: float) -> np.ndarray:
    """value + size * delta, computed in float64 and returned in value's dtype (an integer counter with
    size 1 stays exact)."""
    return (wide(value) + size * wide(delta)).astype(value.dtype)


def wide(a: np.ndarray) -> np.ndarray:
    """`a` in float64, where the control-variate and server arithmetic happen before casting back."""
    return np.asarray(a, dtype=np.float64)
