"""The scenario artifact: per stage and client, sample indices plus small descriptors, never image copies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class ClientView:
    """What one client holds during one stage of the run.

    Attributes:
        train: indices into the base dataset used for local training.
        test: indices of the client's local test split (same distribution as `train`).
        distribution_id: ground-truth id of the distribution (methods never see it; evaluation and Oracle do).
        transform: descriptor of the feature transform applied on the worker when a batch is formed.
        label_map: array mapping original label -> label seen by the client (concept shift), or None.
    """

    train: np.ndarray
    test: np.ndarray
    distribution_id: int = 0
    transform: dict[str, Any] | None = None
    label_map: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class Scenario:
    """A federation over rounds: `stages[s][client]` and which stage each round uses.

    A static federation has one stage; drifting scenarios add stages and a `round_stage` table
    (round r, 1-based, uses stage `round_stage[r - 1]`).
    """

    key: str
    num_clients: int
    num_classes: int
    stages: tuple[tuple[ClientView, ...], ...]
    round_stage: tuple[int, ...] = ()
    test_clients: tuple[ClientView, ...] = field(default=())

    def view(self, round: int, client_id: int) -> ClientView:
        stage = self.round_stage[round - 1] if self.round_stage else 0
        return self.stages[stage][client_id]

    def train_sizes(self, round: int) -> list[int]:
        return [len(self.view(round, c).train) for c in range(self.num_clients)]
