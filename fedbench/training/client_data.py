"""A client's data on a worker: the base dataset's rows for one ClientView, as compact tensors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedbench.data import BaseDataset
from fedbench.scenarios import ClientView


@dataclass(frozen=True, eq=False)
class ClientData:
    """Train and test tensors of one client; images stay uint8 until a batch is formed."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor

    @property
    def num_train(self) -> int:
        return len(self.train_y)

    @property
    def num_test(self) -> int:
        return len(self.test_y)


def materialize(dataset: BaseDataset, view: ClientView) -> ClientData:
    """Gather a client's rows (a copy of its own samples only) and apply its label map."""

    def take(indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        y = dataset.y[indices]
        if view.label_map is not None:
            y = view.label_map[y]
        return torch.from_numpy(dataset.x[indices]), torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64))

    train_x, train_y = take(view.train)
    test_x, test_y = take(view.test)
    return ClientData(train_x, train_y, test_x, test_y)
