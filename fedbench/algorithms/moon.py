"""MOON (Li, He, Song 2021, "Model-Contrastive Federated Learning", Algorithm 1; seed 003 Sec. II-E).

FedAvg whose local loss adds mu * l_con, a contrastive term on the penultimate representation z = R(x)
(`FedModel.represent`, the network before its output layer, as 003 defines R_w):

    l_con = -log( exp(sim(z, z_glob) / tau) / (exp(sim(z, z_glob) / tau) + exp(sim(z, z_prev) / tau)) )

with sim the cosine similarity, z_glob the representation under this round's global model (the positive,
the downlink payload) and z_prev under the client's own model from the last round it trained (the
negative, kept in its client state, never communicated). l_con is averaged over the batch, as the released
code's cross-entropy over [positive, negative] logits is. Both reference models run in eval mode without
gradients, as in the released code.

A client that has no previous model yet (its first round) uses the global model as z_prev. Then z_prev =
z_glob and l_con = log 2 for every z: a constant with zero gradient, so the first local round is FedAvg's,
which is also what the released code does (its model pool is empty in round 1, leaving only the positive
logit and l_con = 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from fedbench.algorithms.base import AlgorithmConfig, GlobalState, counted
from fedbench.algorithms.fedavg import FedAvg
from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.core.types import Arrays, Metrics, Payload, RoundContext
from fedbench.training import ClientData, TrainHooks, get_weights, set_weights, train_local

if TYPE_CHECKING:
    from fedbench.models.base import FedModel


@dataclass(frozen=True)
class MOONClientState:
    """The client's model after its last local training (w_i^{t-1}); None before its first job."""

    previous: Arrays | None = None


def model_contrastive_loss(z: torch.Tensor, z_glob: torch.Tensor, z_prev: torch.Tensor, tau: float) -> torch.Tensor:
    """Batch mean of l_con (MOON eq. 3): cross-entropy of [sim(z, z_glob), sim(z, z_prev)] / tau against
    the positive, i.e. -log(e^{s_glob/tau} / (e^{s_glob/tau} + e^{s_prev/tau}))."""
    logits = torch.stack([F.cosine_similarity(z, z_glob, dim=1), F.cosine_similarity(z, z_prev, dim=1)], dim=1) / tau
    return F.cross_entropy(logits, torch.zeros(len(z), dtype=torch.long, device=z.device))


class ContrastiveHooks:
    """`forward` + `extra_loss` hooks computing the local representation once per batch.

    `forward` keeps z = represent(x) for `extra_loss`, and returns head(z): the same operations as the
    model's own forward, so the cross-entropy path is exactly FedAvg's.
    """

    def __init__(self, mu: float, tau: float, global_model: FedModel, previous_model: FedModel | None):
        self.mu, self.tau = mu, tau
        self.global_model, self.previous_model = global_model, previous_model
        self._z: torch.Tensor | None = None

    def forward(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        fed = cast("FedModel", model)  # the run's model: MOON needs one with `represent` and `head`
        self._z = fed.represent(x)
        return fed.head(self._z)

    def extra_loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            z_glob = self.global_model.represent(x)
            z_prev = z_glob if self.previous_model is None else self.previous_model.represent(x)
        assert self._z is not None  # `forward` ran on this batch
        return self.mu * model_contrastive_loss(self._z, z_glob, z_prev, self.tau)

    def hooks(self) -> TrainHooks:
        return TrainHooks(forward=self.forward, extra_loss=self.extra_loss)


@register_algorithm("moon")
class MOON(FedAvg["MOON.Config", GlobalState, MOONClientState]):
    """FedAvg with the model-contrastive term; the previous local model lives in the client state."""

    ClientState = MOONClientState

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        mu: float = 1.0
        """Weight of l_con (MOON Sec. 4.1 tunes {0.1, 1, 5, 10}: best 5 on CIFAR-10, 1 on CIFAR-100 and
        Tiny-ImageNet; its code's default is 1; 003 does not state its value). mu = 0 is FedAvg."""
        tau: float = 0.5
        """Temperature of the cosine similarities (MOON Sec. 4.1: 0.5; 003 does not state its value)."""

        def __post_init__(self) -> None:
            super().__post_init__()
            if self.mu < 0:
                raise ConfigError("mu", self.mu, "a number >= 0")
            if self.tau <= 0:
                raise ConfigError("tau", self.tau, "a number > 0")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._references: dict[str, nn.Module] = {}

    def client_update(
        self, payload: Payload, state: MOONClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, MOONClientState, Metrics]:
        global_model = self._reference("global", payload.weights, ctx.device)
        previous = None if state.previous is None else self._reference("previous", state.previous, ctx.device)
        model = self.model_with(payload.weights)
        hooks = ContrastiveHooks(self.config.mu, self.config.tau, global_model, previous).hooks()
        metrics = train_local(model, data, ctx, hooks)
        weights = get_weights(model)
        return counted(weights, data.num_train), MOONClientState(weights), metrics

    def _reference(self, role: str, weights: Arrays, device: str) -> FedModel:
        """A frozen eval-mode copy of the run's model with `weights` (one instance per role per process,
        built outside the job's random stream like `model_with`'s)."""
        if role not in self._references:
            with torch.random.fork_rng(devices=[]):
                self._references[role] = self.builder()
        model = self._references[role]
        set_weights(model, weights)
        return cast("FedModel", model.to(device).eval().requires_grad_(False))
