"""FedProx (Li et al. 2020, "Federated optimization in heterogeneous networks", Sec. 3): FedAvg whose local
objective adds the proximal term mu/2 ||w - w_global||^2, keeping local models near the round's global one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

import torch

from fedbench.algorithms.base import AlgorithmConfig
from fedbench.algorithms.capabilities import ClientStateT, StateT
from fedbench.algorithms.fedavg import FedAvg
from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.training.functional import penalty_as_extra_loss
from fedbench.training.loop import ExtraLoss


@dataclass(frozen=True)
class ProximalPenalty:
    """mu/2 * sum over the given parameters of ||w - anchor||^2 (Li et al. 2020, eq. 2), a pure function of the
    weights (`FunctionalFit.fit_penalty`), so the batched backend can take it under `vmap`."""

    mu: float

    def __call__(self, params: Mapping[str, torch.Tensor], anchors: Mapping[str, torch.Tensor]) -> torch.Tensor:
        squares = [((p - anchors[name]) ** 2).sum() for name, p in params.items()]
        return 0.5 * self.mu * torch.stack(squares).sum()


def proximal_term(mu: float, anchor: dict[str, torch.Tensor]) -> ExtraLoss:
    """`extra_loss` hook: `ProximalPenalty(mu)` over the trainable parameters, towards `anchor` (Ditto's and
    pFedMe's inner problems). Buffers (normalisation statistics) are not weights of the objective and are left out.
    """
    return penalty_as_extra_loss(ProximalPenalty(mu), anchor)


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

    def fit_penalty(self) -> ProximalPenalty:
        """Every local batch loss gains the proximal term towards the round's global model (Li et al. 2020, eq. 2)."""
        return ProximalPenalty(self.config.mu)
