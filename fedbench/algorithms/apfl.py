"""APFL (Deng, Kamani, Mahdavi 2020, "Adaptive Personalized Federated Learning", Algorithm 1).

Each client trains two models on every mini-batch: its copy w of the global model on its own loss, exactly as
FedAvg does, and its personal model v on the loss of the mixed model

    v_bar = alpha v + (1 - alpha) w        (a convex combination of the parameters)

whose gradient reaches v only (alpha times the gradient at v_bar); w is treated as a constant there. With
`adaptive_alpha`, the client's mixing weight takes a gradient step too, d f(v_bar) / d alpha = <v - w, grad f(v_bar)>,
at the round's learning rate, projected onto [0, 1] (the range the mixture is defined on). The server averages
the w's as FedAvg does. v and alpha are client state and never travel; only w does.

One pass of the training loop does all three updates (Algorithm 1, lines 6-8: every gradient taken at the
batch's start): the loop's cross-entropy of w's logits is FedAvg's loss, the `extra_loss` hook adds the mixed
model's, and `after_batch` steps alpha, which is not an optimizer parameter, so momentum and weight decay
(which the run's optimizer applies to w and v) never touch it. The reported `train_loss` is the sum of the two
losses.

Where the paper is silent (choices):
- v starts as the global model the client first receives (in round 1, the run's initial model) and alpha at
  `alpha`.
- The mixed model's normalisation statistics (buffers) are v's: the mixed forward pass updates them in training.
- The personalised model evaluated on the client's test split (local accuracy) is v_bar with the latest global
  model as w (what the client holds after synchronising), so evaluation downloads the global model; a client
  that never trained evaluates the global model.
- System accuracy (004 Sec. 5) is the majority vote of the clients' v_bar: each client uploads it once after
  the last round, for the vote only (`PersonalModels`, counted as evaluation traffic). Unseen test
  clients get the global model (FedAvg's `GlobalModelAtTestTime`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fedbench.algorithms.base import AlgorithmConfig, GlobalState, counted
from fedbench.algorithms.capabilities import PersonalModels
from fedbench.algorithms.fedavg import FedAvg
from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.core.types import Arrays, Metrics, Payload, RoundContext
from fedbench.training import ClientData, TrainHooks, evaluate, get_weights, set_weights, train_local
from fedbench.training.loop import scheduled_lr


@dataclass(frozen=True)
class APFLClientState:
    """A client's personal model v and its mixing weight alpha; None before its first job (v = w, the configured
    alpha)."""

    personal: Arrays | None = None
    alpha: float | None = None


class MixedPair(nn.Module):
    """The two models one client trains: `shared` (w, the copy of the global model) and `personal` (v), with
    the mixing weight `alpha`, a tensor on `device` outside the parameters (it requires grad only when adaptive)."""

    def __init__(self, shared: nn.Module, personal: nn.Module, alpha: float, adaptive: bool, device: str = "cpu"):
        super().__init__()
        self.shared, self.personal = shared, personal
        self.alpha = torch.tensor(float(alpha), device=device, requires_grad=adaptive)

    def mixed(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of v_bar = alpha v + (1 - alpha) w with w held constant, and v's buffers."""
        w = dict(self.shared.named_parameters())
        params = {
            name: self.alpha * v + (1 - self.alpha) * w[name].detach() for name, v in self.personal.named_parameters()
        }
        return functional_call(self.personal, params, (x,))

    def hooks(self, lr: float) -> TrainHooks:
        """w on the loop's cross-entropy, v on the mixed model's, alpha by `alpha_step` at `lr`."""
        return TrainHooks(
            forward=lambda pair, x: cast(MixedPair, pair).shared(x),
            extra_loss=lambda pair, x, y, logits: F.cross_entropy(cast(MixedPair, pair).mixed(x), y),
            after_batch=lambda pair: cast(MixedPair, pair).alpha_step(lr),
        )

    @torch.no_grad()
    def alpha_step(self, lr: float) -> None:
        """alpha <- clip(alpha - lr * <v - w, grad f(v_bar)>, 0, 1) (Algorithm 1, line 8, projected on [0, 1])."""
        if self.alpha.grad is not None:
            self.alpha.sub_(lr * self.alpha.grad).clamp_(0.0, 1.0)
            self.alpha.grad = None


def mixed_weights(alpha: float, personal: Arrays, shared: Arrays, parameters: set[str]) -> Arrays:
    """v_bar's state: alpha v + (1 - alpha) w for the `parameters`, v's buffers (as `MixedPair.mixed` runs it)."""
    a = np.float32(alpha)  # float32 arithmetic, as the training's mixture computes it
    return {
        name: a * v + (np.float32(1) - a) * shared[name] if name in parameters else v for name, v in personal.items()
    }


@register_algorithm("apfl")
class APFL(FedAvg["APFL.Config", GlobalState, APFLClientState], PersonalModels[APFLClientState]):
    """FedAvg on the shared copy w; each client also trains its personal model v and mixing weight alpha."""

    ClientState = APFLClientState

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        alpha: float = 0.25
        """Initial mixing weight of the personal model (Deng et al. 2020, Sec. 5 compares fixed alpha in
        {0.25, 0.5, 0.75} with the adaptive rule; 0.25 is the smallest; the authors' FedTorch code defaults
        to 0.5, fixed; docs/methods.md). alpha = 0 with `adaptive_alpha` off is FedAvg."""
        adaptive_alpha: bool = True
        """Learn each client's alpha by gradient descent (Algorithm 1, line 8; "APFL with adaptive alpha", Sec. 5)."""

        def __post_init__(self) -> None:
            super().__post_init__()
            if not 0.0 <= self.alpha <= 1.0:
                raise ConfigError("alpha", self.alpha, "a number in [0, 1]")
            if not isinstance(self.adaptive_alpha, bool):
                raise ConfigError("adaptive_alpha", self.adaptive_alpha, "true or false")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._personal: nn.Module | None = None

    def client_update(
        self, payload: Payload, state: APFLClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, APFLClientState, Metrics]:
        pair = self._pair(payload.weights, state, ctx.device)
        metrics = train_local(pair, data, ctx, pair.hooks(scheduled_lr(ctx.optimizer, ctx.round, ctx.rounds)))
        new_state = APFLClientState(get_weights(pair.personal), float(pair.alpha.detach()))
        return counted(get_weights(pair.shared), data.num_train), new_state, metrics

    def client_evaluate(self, payload: Payload, state: APFLClientState, data: ClientData, ctx: RoundContext) -> Metrics:
        """Accuracy of v_bar with the latest global model as w (the global model where the client never trained)."""
        return evaluate(self.model_with(self.personalised(payload, state)), data, device=ctx.device)

    def client_share(self, payload: Payload, state: APFLClientState) -> Payload:
        """v_bar with the latest global model as w, for system accuracy's vote (nothing where the client never
        trained: it votes with the global model, its system payload)."""
        return Payload(self.personalised(payload, state)) if state.personal is not None else Payload()

    def personalised(self, payload: Payload, state: APFLClientState) -> Arrays:
        """v_bar = alpha v + (1 - alpha) w on the parameters (v's buffers); w where the client never trained."""
        if state.personal is None:
            return payload.weights
        assert state.alpha is not None  # a client state holds both or neither
        return mixed_weights(state.alpha, state.personal, payload.weights, set(self.parameter_names))

    def _pair(self, weights: Arrays, state: APFLClientState, device: str) -> MixedPair:
        """This process's pair of models: w from the downlink, v and alpha from the client state (a client's
        first job: v = w and the configured alpha)."""
        if self._personal is None:
            with torch.random.fork_rng(devices=[]):
                self._personal = self.builder()
        set_weights(self._personal, weights if state.personal is None else state.personal)
        alpha = self.config.alpha if state.alpha is None else state.alpha
        return MixedPair(self.model_with(weights), self._personal, alpha, self.config.adaptive_alpha, device)
