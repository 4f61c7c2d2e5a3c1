"""FedProxFT (004 Sec. 3.1): FedProx (mu = 0.01), then FedAvgFT's local fine-tuning for the last rounds.

The fine-tuning rounds are plain local training (no proximal term): 004 fine-tunes the global models of
FedAvg, FedProx and FedSAM the same way, so only the federated phase differs between FedAvgFT and FedProxFT.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.algorithms.fedavg_ft import FedAvgFT, FineTunedState, FineTuningClientState
from fedbench.algorithms.fedprox import FedProx
from fedbench.core.registry import register_algorithm


@register_algorithm("fedprox_ft")
class FedProxFT(FedAvgFT["FedProxFT.Config"], FedProx["FedProxFT.Config", FineTunedState, FineTuningClientState]):
    """FedAvgFT's schedule over FedProx's local objective (method order: FedAvgFT, then FedProx, then FedAvg)."""

    @dataclass(frozen=True)
    class Config(FedAvgFT.Config, FedProx.Config):
        """FedProx's `mu` and FedAvgFT's `ft_rounds` (each field's docstring is on its own Config)."""
