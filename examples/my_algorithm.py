"""Your own algorithm, outside the fedbench package: FedAvg with a server learning rate.

The server moves the global model only part of the way to the clients' average,
w <- w + server_lr * (average - w) (Reddi et al. 2021, "Adaptive federated optimization", Sec. 2, with SGD
on the server); server_lr = 1 is FedAvg. A task names it by `module:attribute`, no registration needed:

    algorithm: {name: examples.my_algorithm:ServerLrFedAvg, server_lr: 0.5}

Run from the repository root, this script runs `examples/my_algorithm.yaml` and prints its leaderboard:

    python -m examples.my_algorithm
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedbench.algorithms.base import AlgorithmConfig, GlobalState, average_uplinks
from fedbench.algorithms.fedavg import FedAvg
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult, Payload


class ServerLrFedAvg(FedAvg):
    """FedAvg whose server takes a step of `server_lr` towards the clients' sample-weighted average."""

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        server_lr: float = 1.0
        """Server step size (Reddi et al. 2021, Sec. 2); 1.0 is FedAvg."""

        def __post_init__(self) -> None:
            super().__post_init__()
            if self.server_lr <= 0:
                raise ConfigError("server_lr", self.server_lr, "a number > 0")

    def aggregate(self, round: int, state: GlobalState, results: Sequence[ClientResult]) -> GlobalState:
        current, average = state.global_model.weights, average_uplinks(results)
        step = {name: server_step(current[name], value, self.config.server_lr) for name, value in average.items()}
        return dataclasses.replace(state, global_model=Payload(step))


def server_step(current: np.ndarray, average: np.ndarray, lr: float) -> np.ndarray:
    """`current` moved `lr` of the way to `average`; integer buffers (counters) take the average as it is."""
    if not np.issubdtype(average.dtype, np.floating):
        return average
    return (current + lr * (average - current)).astype(average.dtype)


if __name__ == "__main__":
    import fedbench

    task = Path(__file__).with_suffix(".yaml")
    results = fedbench.run(task)
    print(f"{sum(r.status == 'FINISHED' for r in results)} of {len(results)} runs finished")
    board = fedbench.leaderboard(task)
    print(board[["rank", "configuration", "mean", "std", "n"]].to_string(index=False))
