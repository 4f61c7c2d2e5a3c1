"""FedProx (Li et al. 2020, "Federated optimization in heterogeneous networks", Sec. 3): FedAvg whose local
objective adds the proximal term mu/2 ||w - w_global||^2, keeping local models near the round's global one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import nn

from fedbench.algorithms.base import AlgorithmConfig, counted
from fedbench.algorithms.capabilities import ClientStateT, StateT
from fedbench.algorithms.fedavg import FedAvg
from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.core.types import Metrics, Payload, RoundContext
from fedbench.training import ClientData, TrainHooks, get_weights, train_local
from fedbench.training.loop import ExtraLoss


def proximal_term(mu: float, anchor: dict[str, torch.Tensor]) -> ExtraLoss:
    """`extra_loss` hook: mu/2 * sum over trainable parameters of ||w - anchor||^2 (Li et al. 2020, eq. 2).

    Buffers (normalisation statistics) are not weights of the objective and are left out.
    """

    def extra_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        squares = [((p - anchor[name]) ** 2).sum() for name, p in model.named_parameters() if p.requires_grad]
        return 0.5 * mu * torch.stack(squares).sum()

    return extra_loss


ProxConfigT = TypeVar("ProxConfigT", bound="FedProx.Config")
"""The Config of FedProx or of a method built on it (FedProxFT)."""


@register_algorithm("fedprox")
class FedProx(FedAvg[ProxConfigT, StateT, ClientStateT]):
    """FedAvg with the proximal term added to every local batch loss; aggregation is FedAvg's. Generic in its
    states, which its client half passes through: FedProxFT trains it with FedAvgFT's."""

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        mu: float = 0.01
        """Proximal weight (Li et al. 2020, Sec. 3, tuned over {0.001, 0.01, 0.1, 1}); 0.01 as in 004 Sec. 3.1's
        FedProx(FT) baseline (docs/methods.md). mu = 0 is FedAvg."""

        def __post_init__(self) -> None:
            super().__post_init__()
            if self.mu < 0:
                raise ConfigError("mu", self.mu, "a number >= 0")

    def client_update(
        self, payload: Payload, state: ClientStateT, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientStateT, Metrics]:
        model = self.model_with(payload.weights)
        anchor = {name: p.detach().clone().to(ctx.device) for name, p in model.named_parameters()}
        metrics = train_local(model, data, ctx, TrainHooks(extra_loss=proximal_term(self.config.mu, anchor)))
        return counted(get_weights(model), data.num_train), state, metrics
