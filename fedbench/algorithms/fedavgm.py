"""FedAvgM (Hsu, Qi, Brown 2019, "Measuring the Effects of Non-Identical Data Distribution for Federated Visual
Classification", Sec. 3): FedAvg with momentum on the server.

Hsu et al. write the server update as v <- beta v + Delta_w, w <- w - v, with Delta_w the sample-weighted
average of the clients' changes taken as a gradient (w - w_k). In terms of the pseudo-gradient
Delta = (FedAvg's average) - w = -Delta_w, with a server learning rate as Reddi et al. (2021, Sec. 5) run
FedAvgM:

    v <- beta v + Delta,    w <- w + server_lr v

(heavy-ball momentum, v_0 = 0). Hsu et al.'s form is server_lr = 1; beta = 0 with server_lr = 1 is FedAvg,
bit for bit. Clients are FedAvg's; v lives in the server state and is never sent; buffers take FedAvg's
average (see `fedopt`, whose `ServerOptimizer` this is one of).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedbench.algorithms.base import AlgorithmConfig
from fedbench.algorithms.fedopt import ServerOptimizer, require_decay, require_positive
from fedbench.core.registry import register_algorithm
from fedbench.core.types import Arrays


@register_algorithm("fedavgm")
class FedAvgM(ServerOptimizer["FedAvgM.Config"]):
    """FedAvg whose server steps along a momentum of the rounds' pseudo-gradients."""

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        momentum: float = 0.9
        """Server momentum beta: 0.9, the value Reddi et al. 2021 fix for FedAvgM (Sec. 5; their code's
        hyperparameter table); Hsu et al. Sec. 4 sweep beta. 0 with server_lr = 1 is FedAvg."""
        server_lr: float = 1.0
        """Server learning rate: 1, as Hsu et al. Sec. 3 apply v itself (and the best in 4 of the 6 tasks for
        FedAvgM in Reddi et al. App. D). In a steady direction the step approaches server_lr / (1 - momentum) Delta."""

        def __post_init__(self) -> None:
            super().__post_init__()
            require_decay("momentum", self.momentum)
            require_positive("server_lr", self.server_lr)

    def initial_slots(self, parameter: np.ndarray) -> Arrays:
        return {"velocity": np.zeros(parameter.shape)}

    def step(self, delta: np.ndarray, slots: Arrays) -> tuple[np.ndarray, Arrays]:
        velocity = self.config.momentum * slots["velocity"] + delta
        return self.config.server_lr * velocity, {"velocity": velocity}
